"""The store stage: moves logged requests into the store in batches and hands each stored range on.

The writer's thread owns the store's write path:

1. take the next durable requests from the intake (a contiguous range of the write-ahead log);
2. journal the range (`batch.pending`) before inserting it, so a crash mid-insert re-sends *the same* range with
   *the same* deduplication token — the store drops it if it had landed, everywhere including the rollups;
3. insert: the engine decodes the OTLP protobuf and normalises every span (no Python per span);
4. move the store cursor past the range, clear the journal, trim the log, hand the range to the sampling stage
   (`sampling_loop.StoredRanges`; a range handed over is durable in the store, and the sampler cursor, not this
   hand-off, makes sure it is sampled after a crash).

A retryable store error (server down, timeouts) is retried with backoff while requests keep queueing in the log
(receivers push back when it is full). A batch the store rejects for good (a request the engine cannot parse) is
split in halves until the requests at fault are found (`_bisect`): one bad request among n costs at most
2·log2(n) + 1 inserts instead of n + 1, and the rest of the batch is stored. A request is quarantined only after
the store rejected it alone: moved aside to `quarantine/` (`<position>.otlp`, the body as logged or re-encoded, and
`<position>.why`, its tenant and the engine's message) and counted (`requests_quarantined`, `spans_quarantined`);
`isolation_inserts` counts the inserts the search cost. Most such requests are bodies upb parses and the engine's
Protobuf reader refuses; the receivers log upb's own encoding of any body that is not canonical
(`ragmon.collectors.validate`), so these reach the log only from an agent before that. So before searching, the
writer reads the rejected requests as a receiver now would (`requests_reencoded`): when a body changes or upb
cannot read one (a damaged record: a receiver would have answered 400), the readable requests, re-encoded, go
in one insert (usually stored at once, whatever their number) and each unreadable one on its own (quarantined
when refused); the search runs within any of these the engine still refuses.

Durability of a rejected batch (the promise the journal keeps): every insert of the search sends a contiguous
slice of the journaled batch under the token of that slice, `wal:<log id>:<first seq>-<last seq>`, and the
slices are a function of the batch alone (halves by count, the store's own split by bytes). A slice of the
re-read requests (readable or not) carries `:canonical` after its range: the same function of the batch, its
bytes upb's deterministic encoding (for one version of upb; across an upgrade the two encodings read alike).
A crash anywhere in the search leaves the journal on the whole batch; recovery re-sends it, the engine rejects it
again, and the same search sends the same slices with the same tokens: the slices that had landed are dropped as
repeats, the rest are stored once, the same requests are quarantined again (same file names). The cursor moves
past the batch only when every request of it is stored or quarantined.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from ragmon.data_dir import QUARANTINE_DIR
from ragmon.health import Component, HealthRegistry
from ragmon.pipeline.intake import IngestSeq, PendingRequest, WalIntake
from ragmon.pipeline.sampling_loop import StoredRanges
from ragmon.pipeline.wal import Cursor, Position, WriteAheadLog
from ragmon.retry import Recovery, RetryPolicy
from ragmon.sinks.envelope import seal
from ragmon.sinks.errors import PartlyStored, StoreError
from ragmon.sinks.for_writer import WriterStore

log = logging.getLogger("ragmon.agent")
_QUARANTINE_LOG_EVERY_S = 60.0


class _Stopping(Exception):
    """Raised inside the writer when a shutdown interrupts a retry."""


# How long the writer may go without a heartbeat before it counts as stalled (ragmon.health). It beats at least
# every `tick_interval_s` when idle and after each failed try (5 s apart at most): what exceeds two minutes is one
# store call that does not return.
WRITER_STALL_AFTER_S = 120.0


class StoreWriter:
    def __init__(
        self,
        intake: WalIntake,
        wal: WriteAheadLog,
        store: WriterStore,
        state_dir: Path,
        *,
        ranges: StoredRanges | None = None,
        batch_max_requests: int = 256,
        batch_max_spans: int = 131_072,
        batch_max_bytes: int = 32 * 1024 * 1024,  # agent.insert_batch_max_bytes: memory against throughput
        tick_interval_s: float = 0.1,
        policy: RetryPolicy | None = None,
        seq: IngestSeq | None = None,
        health: HealthRegistry | None = None,
    ) -> None:
        self.intake = intake
        self.wal = wal
        # Where the loop reports (component `writer`). An insert the store refuses for a while is retried inside the
        # writer's step (`_insert_with_retry`), which reports each failed try.
        self._health: Component | None = (
            health.component("writer", stall_after_s=WRITER_STALL_AFTER_S) if health is not None else None
        )
        self.store = store
        self.ranges = ranges or StoredRanges()  # a writer driven by hand hands its ranges to nobody
        self.state_dir = Path(state_dir)
        self.seq = seq or IngestSeq()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log_id = _log_id(self.state_dir / "log.id")
        self.cursor = Cursor(self.state_dir / "store.cursor")
        self.journal = Cursor(self.state_dir / "batch.pending")
        self.batch_max_requests = batch_max_requests
        self.batch_max_spans = batch_max_spans
        self.batch_max_bytes = batch_max_bytes
        self.tick_interval_s = tick_interval_s
        self.policy = policy or RetryPolicy(max_attempts=1_000_000, max_backoff_s=5.0, deadline_s=float("inf"))
        self.counts: Counter[str] = Counter()
        self._quarantine_said_s = float("-inf")  # when a quarantine was last logged, and the count then
        self._quarantined_when_said = 0
        # Where the writer's time goes (wall seconds inserting; the sampling stage counts its own phases): it is the
        # agent's throughput limit, so an operator (and benchmarks/ingest.py) can see what bounds it.
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.last_error = ""
        self._stored: Position | None = None  # the store cursor, mirrored in memory
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------
    def recover(self) -> Position | None:
        """After a restart: finish a journaled batch and queue what the log holds past the cursor. Returns the
        store cursor (the sampling stage recovers from it)."""
        stored = self._stored = self.cursor.load()
        if stored is not None:
            self.ranges.stored_to = self.seq.of(stored)
        pending = self.journal.load()
        head: list[PendingRequest] = []  # the journaled batch: at most one batch, so it fits in memory
        for record in self.wal.replay(after=stored):
            request = PendingRequest(record.position, record.tenant, record.body, 0)
            if pending is not None and record.position <= pending:
                head.append(request)
            else:  # queued for the writer; past the memory cap the intake keeps only its position
                self.intake.enqueue(request)
                self.counts["recovered_requests"] += 1
        if head:
            # Re-send exactly the journaled range first, so its token matches the interrupted insert; a rejected
            # batch is searched the same way again, so the slices it had stored are dropped as repeats.
            self._store(head)
            self._advance(head[-1].position)
            self.counts["recovered_batches"] += 1
        return self._stored

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ragmon-store-writer", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Store what is queued (within the timeout), stop."""
        deadline = time.monotonic() + timeout_s
        while self.intake.backlog[0] and time.monotonic() < deadline and self._thread and self._thread.is_alive():
            time.sleep(0.02)
        self._stop.set()
        with self.intake.ready:
            self.intake.ready.notify_all()
        if self._thread is not None:
            self._thread.join(max(0.1, deadline - time.monotonic()))

    # -- the loop -----------------------------------------------------------------------------------------
    def _run(self) -> None:
        health = self._health
        recovery = Recovery("store writer", log)
        try:
            while not self._stop.is_set():
                try:
                    stored = self.step()
                except _Stopping:
                    unstored = self.intake.backlog[0]
                    log.warning(
                        "stopping with %d requests not yet stored; they stay in the log for the next start", unstored
                    )
                    return
                except Exception as exc:  # the writer must outlive any fault or bug: counted, logged once, retried
                    self.counts["writer_errors"] += 1
                    if health is not None:
                        health.failing(exc)
                    # The batch is still at the head of the intake (taken, not committed): the next step retries it.
                    self._stop.wait(recovery.failed(exc))
                    continue
                recovery.succeeded()
                if health is not None:
                    health.ok()
                if not stored:
                    self.intake.wait(self.tick_interval_s)
        finally:
            if health is not None:
                health.stopped(expected=self._stop.is_set())

    def step(self) -> int:
        """Store one batch if any is ready; returns the requests stored."""
        taken = self.intake.take(self.batch_max_requests, self.batch_max_spans, self.batch_max_bytes)
        if not taken:
            return 0
        batch = self._with_bodies(taken)
        first, last = taken[0].position, taken[-1].position
        self.journal.save(last)
        quarantined: list[PendingRequest] = []
        if batch:
            began = time.perf_counter()
            quarantined = self._insert_with_retry(batch)
            self.seconds["insert"] += time.perf_counter() - began
        self._advance(last)
        self.intake.commit(len(taken))
        self.wal.trim(last)
        self.counts["batches"] += 1
        self.counts["requests_stored"] += len(batch) - len(quarantined)
        self.counts["spans_stored"] += sum(r.spans for r in batch) - sum(r.spans for r in quarantined)
        self.ranges.add(self.seq.of(first), self.seq.of(last))
        return len(taken)

    def _with_bodies(self, batch: list[PendingRequest]) -> list[PendingRequest]:
        """Read spilled requests' bodies back from the log. The batch is the queue's head, so it starts right after
        the store cursor and one sequential read returns it."""
        if not any(r.spilled for r in batch):
            return batch
        records = {rec.position: rec.body for rec in self.wal.read_after(self._stored, len(batch))}
        out = []
        for request in batch:
            if not request.spilled:
                out.append(request)
            elif (body := records.get(request.position)) is not None:
                out.append(PendingRequest(request.position, request.tenant, body, request.spans))
            else:  # the log lost an acknowledged record (disk corruption): say so loudly, don't stall on it
                self.counts["requests_lost_from_log"] += 1
                log.error("request at log position %s is missing from the write-ahead log", request.position)
        self.counts["requests_read_back"] += len(batch) - sum(1 for r in batch if not r.spilled)
        return out

    def _advance(self, stored: Position) -> None:
        """Everything up to `stored` is in the store: move the cursor, then drop the journal."""
        self.cursor.save(stored)
        self._stored = stored
        self.ranges.stored_to = self.seq.of(stored)
        self.journal.clear()

    # -- inserting -----------------------------------------------------------------------------------------
    def _insert_with_retry(self, batch: list[PendingRequest]) -> list[PendingRequest]:
        """Store `batch`, retrying what may succeed later; returns the requests quarantined."""
        attempt = 0
        while True:
            attempt += 1
            try:
                quarantined = self._store(batch)
                self.last_error = ""
                return quarantined
            except StoreError as exc:  # retryable only: `_store` handles permanent rejections
                self.last_error = str(exc)[:500]
                self.counts["store_retries"] += 1
                if self._health is not None:
                    # each try is a heartbeat that says why: a store outage must not read as a stalled writer
                    self._health.failing(exc)
                if attempt == 1 or attempt % 50 == 0:
                    log.warning("store unavailable (%s); retrying, requests wait in the log", exc)
                delay = self.policy.backoff_s(min(attempt, 8))
                if self._stop.wait(delay):
                    # shutting down: the batch stays in the log and the journal, re-sent on restart
                    raise _Stopping from exc

    def _store(self, batch: Sequence[PendingRequest]) -> list[PendingRequest]:
        """Insert `batch`; if the store rejects it for good, find the requests at fault by halves and quarantine
        them, storing the rest. Returns the requests quarantined; raises only retryable `StoreError`s (a retry
        re-sends the whole batch: the slices already stored are dropped by their tokens)."""
        try:
            self._insert(batch)
            return []
        except StoreError as exc:
            if exc.retryable:
                raise
            self.counts["batches_rejected"] += 1
            self.last_error = str(exc)[:500]
            quarantined: list[PendingRequest] = []
            for start, stop in _unstored(exc, len(batch)):  # the parts stored must not be stored again
                part = batch[start:stop]
                readable, unreadable, reencoded = self._as_received_now(part)
                if not reencoded and (not unreadable or len(part) == 1):
                    # every body as a receiver logs it (search the slice), or one unreadable body already refused
                    # on its own (quarantine it)
                    self._bisect(part, exc, quarantined)
                    continue
                # Under their own tokens (`_CANONICAL`): the bytes differ from the logged ones, and a slice of
                # `readable` need not be a contiguous range of the log (the slices are still a function of the
                # batch, so a re-run after a crash sends the same ones).
                if readable:  # usually stored in one insert
                    self._try_slice(readable, quarantined, _CANONICAL)
                for request in unreadable:  # each on its own: the engine may read what upb does not
                    self._try_slice([request], quarantined, _CANONICAL)
            return quarantined

    def _as_received_now(
        self, part: Sequence[PendingRequest]
    ) -> tuple[list[PendingRequest], list[PendingRequest], int]:
        """(`part`'s requests upb reads, each body replaced by what a receiver now logs for it, i.e. upb's encoding
        with invalid spans left out, see `ragmon.collectors.validate`; the requests upb cannot read, which a
        receiver would have refused; how many bodies were replaced)."""
        from ragmon.collectors.decode import parse_protobuf  # the receive path's own rule, not a second copy
        from ragmon.collectors.errors import DecodeError
        from ragmon.collectors.validate import validate

        readable: list[PendingRequest] = []
        unreadable: list[PendingRequest] = []
        reencoded = 0
        for request in part:
            try:
                validation = validate(parse_protobuf(request.body), request.body)
            except DecodeError:
                unreadable.append(request)
                continue
            if validation.body is request.body:
                readable.append(request)
            else:
                reencoded += 1
                readable.append(PendingRequest(request.position, request.tenant, validation.body, request.spans))
        self.counts["requests_reencoded"] += reencoded
        return readable, unreadable, reencoded

    def _insert(self, batch: Sequence[PendingRequest], variant: str = "") -> None:
        envelopes = [seal(r.body, r.tenant, self.seq.of(r.position)) for r in batch]
        # Unique to this log, even when two agents sharing a database were given one instance number by mistake:
        # the store would silently drop the second agent's batch as a repeat of the first's. A slice of a rejected
        # batch (`_bisect`) carries its own range, so it is idempotent on its own; re-encoded bodies (`variant`)
        # carry their own tokens, so a repeat of them is never mistaken for the logged bytes or the reverse.
        token = f"wal:{self.log_id}:{self.seq.of(batch[0].position)}-{self.seq.of(batch[-1].position)}{variant}"
        self.store.insert_otlp(envelopes, token)

    def _bisect(
        self,
        rejected: Sequence[PendingRequest],
        exc: StoreError,
        quarantined: list[PendingRequest],
        variant: str = "",
    ) -> None:
        """`rejected` was refused as a whole (`exc`): store its halves, searching further the ones refused.

        When the first half is stored the fault must be in the second, which is split without being sent whole
        (one insert saved per level); a request is quarantined only once it was refused on its own."""
        if len(rejected) == 1:
            self._quarantine(rejected[0], exc)
            quarantined.append(rejected[0])
            return
        middle = len(rejected) // 2
        first, second = rejected[:middle], rejected[middle:]
        first_stored = self._try_slice(first, quarantined, variant)
        if first_stored and len(second) > 1:
            self._bisect(second, exc, quarantined, variant)
        else:
            self._try_slice(second, quarantined, variant)

    def _try_slice(self, part: Sequence[PendingRequest], quarantined: list[PendingRequest], variant: str = "") -> bool:
        """Insert one slice of a rejected batch under its own token; search it if it is refused. True if it was
        stored whole."""
        self.counts["isolation_inserts"] += 1
        try:
            self._insert(part, variant)
            return True
        except StoreError as exc:
            if exc.retryable:
                raise
            for start, stop in _unstored(exc, len(part)):
                self._bisect(part[start:stop], exc, quarantined, variant)
            return False

    def _quarantine(self, request: PendingRequest, exc: Exception) -> None:
        folder = self.state_dir / QUARANTINE_DIR
        folder.mkdir(exist_ok=True)
        (folder / f"{request.position.token().replace(':', '-')}.otlp").write_bytes(request.body)
        (folder / f"{request.position.token().replace(':', '-')}.why").write_text(f"{request.tenant}\n{exc}\n")
        self.counts["requests_quarantined"] += 1
        self.counts["spans_quarantined"] += request.spans
        # A stream of poison requests must not become a stream of log lines: the first is said, then at most one
        # line a minute with how many more (each is counted on /metrics and kept with its reason in `.why`).
        now_s = time.monotonic()
        if now_s - self._quarantine_said_s >= _QUARANTINE_LOG_EVERY_S:
            since = self.counts["requests_quarantined"] - self._quarantined_when_said - 1
            more = f" ({since} more since the last line)" if since > 0 else ""
            log.error("store rejected a request (%s); kept in %s%s", exc, folder, more)
            self._quarantine_said_s, self._quarantined_when_said = now_s, self.counts["requests_quarantined"]


_CANONICAL = ":canonical"  # the token suffix of slices of re-encoded bodies


def _unstored(exc: StoreError, count: int) -> list[tuple[int, int]]:
    """The (start, stop) index ranges of a batch of `count` requests that a failed insert did not store."""
    return exc.unstored if isinstance(exc, PartlyStored) else [(0, count)]


def _log_id(path: Path) -> str:
    """A random id for this agent's write-ahead log, made once and kept with its cursors."""
    if path.exists() and (existing := path.read_text().strip()):
        return existing
    log_id = uuid.uuid4().hex
    tmp = path.with_suffix(".tmp")
    tmp.write_text(log_id + "\n")
    os.replace(tmp, path)
    return log_id
