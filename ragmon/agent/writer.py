"""The store writer: moves logged requests into the store in batches and feeds the tail sampler.

Two threads, each owning its part, so neither needs locks beyond the hand-over of one range of sequence numbers.
The writer thread owns the store's write path:

1. take the next durable requests from the intake (a contiguous range of the write-ahead log);
2. journal the range (`batch.pending`) before inserting it, so a crash mid-insert re-sends *the same* range with
   *the same* deduplication token — the store drops it if it had landed, everywhere including the rollups;
3. insert: the engine decodes the OTLP protobuf and normalises every span (no Python per span);
4. move the store cursor past the range, clear the journal, trim the log, hand the range to the sampling thread.

The sampling thread owns the sampler: it asks the store for per-trace fragments of the ranges stored since it
last looked (one query for all of them when it fell behind), gives them to the sampler, acts on decided traces
and persists where a restarted sampler must look back from. It reads on the store's read connection, so on the
embedded engine its queries run on the second core while the next batch is inserted, instead of after it. It also
feeds the per-minute rollup with the ranges whose traces the sampler has all decided (`rollups.py`: what is a call
is known only once a trace's upper spans are in).

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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ragmon.agent.health import Component, HealthRegistry
from ragmon.agent.intake import IngestSeq, PendingRequest, WalIntake
from ragmon.agent.rollups import Rollups
from ragmon.agent.wal import Cursor, Position, WriteAheadLog
from ragmon.retry import Recovery, RetryPolicy
from ragmon.sampling import DecidedTrace, Sampler
from ragmon.sinks.envelope import seal
from ragmon.sinks.errors import PartlyStored, StoreError

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("ragmon.agent")
_QUARANTINE_LOG_EVERY_S = 60.0


class WriteStore(Protocol):
    def insert_otlp(self, envelopes: Sequence[bytes], dedup_token: str) -> None: ...

    def trace_fragment_table(self, seq_from: int, seq_to: int) -> pa.Table: ...

    def roll_up(
        self, seq_from: int, seq_to: int, dedup_token: str | None = None, *, context_to: int | None = None
    ) -> None: ...


DecisionHandler = Callable[[list[DecidedTrace]], None]


class _Stopping(Exception):
    """Raised inside the writer when a shutdown interrupts a retry."""


# How long each of the writer's loops may go without a heartbeat before it counts as stalled (ragmon.agent.health).
# Each beats at least every `tick_interval_s` when idle and after each failed try (5 s apart at most for inserts, 10 s
# for sampling and roll-ups): what exceeds two minutes is one store call that does not return.
WRITER_STALL_AFTER_S = 120.0
SAMPLING_STALL_AFTER_S = 120.0
ROLLUPS_STALL_AFTER_S = 120.0


class StoreWriter:
    def __init__(
        self,
        intake: WalIntake,
        wal: WriteAheadLog,
        store: WriteStore,
        sampler: Sampler,
        on_decided: DecisionHandler,
        state_dir: Path,
        *,
        batch_max_requests: int = 256,
        batch_max_spans: int = 131_072,
        batch_max_bytes: int = 32 * 1024 * 1024,  # agent.insert_batch_max_bytes: memory against throughput
        tick_interval_s: float = 0.1,
        policy: RetryPolicy | None = None,
        seq: IngestSeq | None = None,
        decisions_low_water: Callable[[], int | None] | None = None,
        health: HealthRegistry | None = None,
    ) -> None:
        self.intake = intake
        # The oldest ingest seq of a decided trace whose consequence (a kept trace's payload copy, and with it its
        # place in the judge queue) is not durable yet: the sampler cursor stays before it, so a kill -9 in
        # between re-decides the trace at the next start instead of losing it.
        self.decisions_low_water = decisions_low_water
        self.wal = wal
        # Where the three loops report (components `writer`, `sampling`, `rollups`). An insert the store refuses for
        # a while is retried inside the writer's step (`_insert_with_retry`), which reports each failed try.
        self._health: tuple[Component, Component, Component] | None = None
        if health is not None:
            self._health = (
                health.component("writer", stall_after_s=WRITER_STALL_AFTER_S),
                health.component("sampling", stall_after_s=SAMPLING_STALL_AFTER_S),
                health.component("rollups", stall_after_s=ROLLUPS_STALL_AFTER_S),
            )
        self.store = store
        self.sampler = sampler
        self.on_decided = on_decided
        self.state_dir = Path(state_dir)
        self.seq = seq or IngestSeq()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log_id = _log_id(self.state_dir / "log.id")
        self.cursor = Cursor(self.state_dir / "store.cursor")
        self.journal = Cursor(self.state_dir / "batch.pending")
        self.sampler_cursor = Cursor(self.state_dir / "sampler.cursor")
        self.rollups = Rollups(store, self.state_dir, self.seq, self.log_id)
        self.batch_max_requests = batch_max_requests
        self.batch_max_spans = batch_max_spans
        self.batch_max_bytes = batch_max_bytes
        self.tick_interval_s = tick_interval_s
        self.policy = policy or RetryPolicy(max_attempts=1_000_000, max_backoff_s=5.0, deadline_s=float("inf"))
        self.counts: Counter[str] = Counter()
        self._quarantine_said_s = float("-inf")  # when a quarantine was last logged, and the count then
        self._quarantined_when_said = 0
        # Where the writer's time goes (wall seconds per phase): it is the agent's throughput limit, so an operator
        # (and benchmarks/ingest.py) can see whether inserting, the sampler's queries or payload copies bound it.
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.last_error = ""
        self._stored: Position | None = None  # the store cursor, mirrored in memory
        self._sampler_saved_at_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Stored but not yet sampled: one contiguous range of ingest sequence numbers (the writer extends it, the
        # sampling thread takes it whole), and the last sequence number the sampler has seen.
        self._unsampled: tuple[int, int] | None = None
        self._sampled_to: int | None = None
        self._sampling = threading.Condition()
        self._stop_sampling = threading.Event()
        self._sampling_thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------
    def recover(self) -> None:
        """After a restart: finish a journaled batch, queue what the log holds past the cursor, and give the
        sampler back the traces it had not decided (from the store, by ingest sequence)."""
        stored = self._stored = self.cursor.load()
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
        self.rollups.recover(self._stored)
        # No sampler cursor yet: the sampler never saved one (an agent killed within its first second), so it has
        # seen nothing for sure — from the log's start. Its ranges are then rolled up once it has decided them.
        low_water = self.sampler_cursor.load() or Position(0, 0)
        if self._stored is not None and low_water <= self._stored:
            self._feed(self.seq.of(low_water), self.seq.of(self._stored))
            self._sampled_to = self.seq.of(self._stored)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ragmon-store-writer", daemon=True)
        self._thread.start()
        self._sampling_thread = threading.Thread(target=self._run_sampling, name="ragmon-sampler", daemon=True)
        self._sampling_thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Store what is queued (within the timeout), sample it, decide every held trace, stop."""
        deadline = time.monotonic() + timeout_s
        while self.intake.backlog[0] and time.monotonic() < deadline and self._thread and self._thread.is_alive():
            time.sleep(0.02)
        self._stop.set()
        with self.intake.ready:
            self.intake.ready.notify_all()
        if self._thread is not None:
            self._thread.join(max(0.1, deadline - time.monotonic()))
        self._stop_sampling.set()
        with self._sampling:
            self._sampling.notify_all()
        if self._sampling_thread is not None:
            self._sampling_thread.join(max(0.1, deadline - time.monotonic()))
            if self._sampling_thread.is_alive():  # stuck on the store: it still owns the sampler, leave it be
                log.warning("sampling did not finish within the shutdown deadline; held traces stay undecided")
                return
        try:
            self.sample_stored()
        except Exception:  # the store went away: the sampler cursor makes the next start sample these
            log.exception("could not sample the last stored requests before stopping")
        self._handle(self.sampler.flush())
        self._save_sampler_cursor()
        try:
            self.roll_up(final=True)
        except Exception:  # the store went away: the next start rolls these ranges up
            log.exception("could not roll up the last stored requests before stopping")

    # -- the loops -----------------------------------------------------------------------------------------
    def _run(self) -> None:
        health = self._health[0] if self._health else None
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

    def _run_sampling(self) -> None:
        sampling, rollups = (self._health[1], self._health[2]) if self._health else (None, None)
        recovery = Recovery("sampling", log)
        retry_at_s = -float("inf")  # after a failed try, the next one not before this
        next_tick = time.monotonic()
        try:
            while not self._stop_sampling.is_set():
                with self._sampling:
                    now = time.monotonic()
                    if self._unsampled is None or now < retry_at_s:
                        # a range waiting while sampling backs off must not wake the loop at once, again and again
                        wake_at_s = next_tick if self._unsampled is None else min(next_tick, retry_at_s)
                        self._sampling.wait(max(0.0, wake_at_s - now))
                now = time.monotonic()
                tick = now >= next_tick
                if now >= retry_at_s and (tick or self._unsampled is not None):
                    try:
                        self.sample_stored()
                        if tick:
                            self._handle(self.sampler.tick())
                            if now - self._sampler_saved_at_s >= 1.0:
                                self._save_sampler_cursor()
                                self._sampler_saved_at_s = now
                    except Exception as exc:  # sampling must outlive any bug or store outage; the range waits
                        self.counts["sampling_errors"] += 1
                        retry_at_s = time.monotonic() + recovery.failed(exc)
                        if sampling is not None:
                            sampling.failing(exc)
                    else:
                        recovery.succeeded()
                        if sampling is not None:
                            sampling.ok()
                if not tick:
                    continue
                next_tick = now + self.tick_interval_s
                try:  # after sampling's own fault too: ranges already decided can still be rolled up
                    self.roll_up()
                except Exception as exc:  # logged by Rollups, which holds its next try off for a backoff
                    self.counts["rollup_errors"] += 1
                    if rollups is not None:
                        rollups.failing(exc)
                else:
                    if rollups is not None:
                        if self.rollups.recovery.failing:  # backing off: still failing, and alive
                            rollups.failing(self.rollups.recovery.last_error)
                        else:
                            rollups.ok()
        finally:
            for component in (sampling, rollups):
                if component is not None:
                    component.stopped(expected=self._stop_sampling.is_set())

    def sample_stored(self) -> None:
        """Feed the sampler every range stored since it last looked, in one query (called by the sampling thread;
        directly by whoever drives `step` by hand)."""
        with self._sampling:
            taken, self._unsampled = self._unsampled, None
        if taken is None:
            return
        try:
            self._feed(*taken)
        except StoreError as exc:
            if not exc.retryable:  # a query the store will never answer: drop the range, say so
                self.counts["sampling_ranges_dropped"] += 1
                log.error("sampling skipped ingest sequences %d-%d: %s", taken[0], taken[1], exc)
                return
            self._give_back(taken)
            raise
        except Exception:
            self._give_back(taken)
            raise
        self._sampled_to = taken[1]
        self.rollups.seen(taken[1])

    @property
    def settled(self) -> bool:
        """Everything stored has been sampled and rolled up (for whoever waits for the pipeline: the demo, tests)."""
        return self._unsampled is None and (self._sampled_to is None or self.rollups.rolled_to == self._sampled_to)

    def roll_up(self, *, final: bool = False) -> None:
        """Roll up the ranges whose traces the sampler has all decided (called by the sampling thread; directly by
        whoever drives `step` by hand; `final`: now, not at most once per interval)."""
        if self._sampled_to is None or not self.rollups.due(final=final):
            return
        low_water = self.sampler.low_water_seq()  # the oldest range an undecided trace has spans in
        decided = self._sampled_to if low_water is None else min(self._sampled_to, low_water - 1)
        began = time.perf_counter()
        stored = self._stored  # the writer thread's: a reference read is atomic
        if self.rollups.roll(decided, stored_to=None if stored is None else self.seq.of(stored), final=final):
            self.seconds["roll_up"] += time.perf_counter() - began

    def _give_back(self, taken: tuple[int, int]) -> None:
        with self._sampling:
            later = self._unsampled
            self._unsampled = taken if later is None else (taken[0], later[1])

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
        with self._sampling:  # hand the range to the sampling thread, merged with any it has not taken yet
            pending = self._unsampled
            self._unsampled = (self.seq.of(first) if pending is None else pending[0], self.seq.of(last))
            self._sampling.notify()
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
                    self._health[0].failing(exc)
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
        folder = self.state_dir / "quarantine"
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

    # -- sampling ------------------------------------------------------------------------------------------
    def _feed(self, seq_from: int, seq_to: int) -> None:
        began = time.perf_counter()
        decided = self.sampler.ingest_table(self.store.trace_fragment_table(seq_from, seq_to), seq_from)
        self.seconds["sample"] += time.perf_counter() - began
        self._handle(decided)

    def _handle(self, decided: list[DecidedTrace]) -> None:
        # called on every tick, also with nothing decided: the handler may batch work and needs to hear time pass
        began = time.perf_counter()
        self.on_decided(decided)
        self.seconds["decided"] += time.perf_counter() - began

    def _save_sampler_cursor(self) -> None:
        """Persist where a restarted sampler must look back to: its oldest undecided trace, else the last request
        it has seen (stored requests past it are not sampled yet: a restart feeds them from the store)."""
        held = [self.sampler.low_water_seq(), self.decisions_low_water() if self.decisions_low_water else None]
        low_water = min((seq for seq in held if seq is not None), default=None)
        if low_water is not None:
            self.sampler_cursor.save(self.seq.position(low_water))
        elif self._sampled_to is not None:
            self.sampler_cursor.save(self.seq.position(self._sampled_to))

    def save_sampler_cursor_after_decisions(self) -> None:
        """After a stop, once the decided traces' consequences are durable (the agent flushed its payload copies):
        move the sampler cursor past them, so the next start does not decide them again. Not while a sampling
        thread stuck on the store still owns the sampler."""
        if self._sampling_thread is None or not self._sampling_thread.is_alive():
            self._save_sampler_cursor()


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
