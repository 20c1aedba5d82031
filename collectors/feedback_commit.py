"""Group commit for end users' feedback: the rows of every request waiting are stored by one INSERT, and each request
is answered with what happened to its rows.

Why: "acknowledged means stored" costs one INSERT per acknowledgement, and an INSERT into the embedded engine costs
milliseconds whatever its size; one INSERT per request (at most one at a time) capped the endpoint at a few dozen
requests a second. Here a request's rows join a queue and the request waits (on the server's loop, holding no pool
thread: `http_server.Handle`); one writer thread takes every request waiting, stores their rows as one block, and
wakes each with the outcome. Under load the queue fills while the previous INSERT runs, so the INSERTs grow instead
of multiplying.

What each request is told, exactly once (`Outcome`):

- `stored`: the INSERT holding its rows returned. Only then.
- `busy`, at `submit` (nothing queued): the rows or bytes waiting are at their caps (`max_waiting_rows`,
  `max_waiting_bytes`), or more than `max_waiting_requests` requests wait. The sender retries later (429).
- `unavailable`: the store refused the batch (`Backpressure`); the writer tried the same block again (same rows, same
  deduplication token) while the batch's earliest deadline allowed, then gave up. Retry (503).
- `timeout`: the request waited `wait_s` without an answer (a store that hangs). If the writer had not taken its rows
  yet they are dropped from the queue and never stored; if it had, its INSERT may still land (see below). Retry (503).
- `stopping`: the agent is stopping; rows not yet stored are not stored (503); `stop` stores what waits first, within
  its timeout.
- `failed`: the writer raised something else (a bug): 500, rows not acknowledged.

A refused batch is not half-stored. A batch is one INSERT of one block (at most `max_batch_rows` rows, far below the
engine's block size): `feedback_writes` gets a single part holding all of its rows or none. Its view copies the block
into `feedback` within the same INSERT; were the store to fail between the two, the writer's next attempt sends the
same block with the same token, which the engine drops from the audit and still completes in the view
(`deduplicate_blocks_in_dependent_materialized_views`). A batch the store still refuses at its deadline is answered
503 to all of its requests; whatever of it the store might have kept is not counted twice when they retry, because
`feedback` keeps one row per (tenant, target, name, voter) and the writer remembers the requests it stored.

That memory (the last `remembered` requests' contents, without their arrival time) keeps a client's re-send of the
same content out of the audit, as the engine's per-INSERT deduplication did when each request was its own INSERT: a
re-send of a stored request is answered `stored` without a second row, and two identical requests in one batch are
stored once.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from ragmon.collectors.errors import Backpressure

__all__ = ["FeedbackCommitter", "Outcome"]

_log = logging.getLogger(__name__)

Rows = list[dict[str, Any]]
OutcomeKind = Literal["stored", "busy", "unavailable", "timeout", "stopping", "failed"]
_RETRY_PAUSE_MAX_S: Final = 0.5  # between the writer's attempts at a refused batch, at most


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: OutcomeKind
    message: str = ""
    retry_after_s: float = 1.0

    @property
    def stored(self) -> bool:
        return self.kind == "stored"


_STORED: Final = Outcome("stored")


class _Waiting:
    """One request's rows between `submit` and its answer."""

    __slots__ = ("answer", "answered", "deadline", "key", "rows", "size", "taken")

    def __init__(self, rows: Rows, size: int, answer: Callable[[Outcome], None], deadline: float) -> None:
        self.rows = rows
        self.size = size
        self.answer = answer
        self.deadline = deadline
        self.key = _content_key(rows)
        self.taken = False  # the writer holds its rows: a timeout can no longer keep them out of the store
        self.answered = False


class FeedbackCommitter:
    """`start()` runs the writer and the deadline watch; `submit` queues a request's rows; `stop` drains.

    `write(rows)` stores rows before returning (the agent's store) and raises `Backpressure` when it cannot."""

    def __init__(
        self,
        write: Callable[[Rows], None],
        *,
        max_waiting_rows: int = 50_000,
        max_waiting_bytes: int = 16 * 1024 * 1024,
        max_waiting_requests: int = 4096,
        max_batch_rows: int = 10_000,
        wait_s: float = 10.0,
        remembered: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if min(max_waiting_rows, max_waiting_bytes, max_waiting_requests, max_batch_rows) < 1 or wait_s <= 0:
            raise ValueError("the feedback committer's caps must be >= 1 and wait_s > 0")
        self._write = write
        self.max_waiting_rows = max_waiting_rows
        self.max_waiting_bytes = max_waiting_bytes
        self.max_waiting_requests = max_waiting_requests
        self.max_batch_rows = max_batch_rows
        self.wait_s = wait_s
        self._clock = clock
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # the writer waits on it for requests
        self._watch = threading.Condition(self._lock)  # the deadline watch waits on it
        self._queue: collections.deque[_Waiting] = collections.deque()  # not yet taken by the writer
        self._unanswered: collections.deque[_Waiting] = collections.deque()  # arrival (= deadline) order
        self._rows = self._bytes = self._requests = 0  # of the unanswered
        self._stored_keys: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._remembered = remembered
        self._stopping = False
        self._threads: list[threading.Thread] = []  # the writer, then the deadline watch
        self._writer_done = threading.Event()
        self.batches = 0  # INSERTs that returned (the benchmark's and tests' view of the grouping)

    # --- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> FeedbackCommitter:
        if self._threads:
            raise RuntimeError("feedback committer already started")
        self._threads = [
            threading.Thread(target=self._run_writer, name="ragmon-feedback-writer", daemon=True),
            threading.Thread(target=self._run_watch, name="ragmon-feedback-deadlines", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Take no more requests; store what waits (within `timeout_s`); answer every request still unanswered
        (`stopping`: its rows are not acknowledged)."""
        deadline = self._clock() + timeout_s
        with self._lock:
            self._stopping = True
            self._work.notify_all()
            self._watch.notify_all()
        if not self._threads:
            return  # never started: nothing was taken
        self._writer_done.wait(max(0.0, deadline - self._clock()))
        with self._lock:
            left = list(self._unanswered)
        for waiting in left:
            self._answer(waiting, Outcome("stopping", "the agent is stopping; feedback not stored, retry"))
        for thread in self._threads[1:]:
            thread.join(max(0.0, deadline - self._clock()))
        self._threads = []

    # --- called by the endpoint, in the server's pool ----------------------------------------------------------
    def submit(self, rows: Rows, size_bytes: int, answer: Callable[[Outcome], None]) -> Outcome | None:
        """Queue `rows` (from a body of `size_bytes`); `answer` is called once with the outcome, from another thread.
        Returns the outcome instead (and never calls `answer`) when the request is refused at once: `busy` past a
        cap, `stopping` once `stop` began."""
        with self._lock:
            if self._stopping or not self._threads:
                return Outcome("stopping", "the agent is stopping; feedback not stored, retry")
            over = (
                self._requests + 1 > self.max_waiting_requests
                or (self._rows and self._rows + len(rows) > self.max_waiting_rows)
                or (self._bytes and self._bytes + size_bytes > self.max_waiting_bytes)
            )
            if over:
                return Outcome("busy", "too much feedback waiting to be stored; retry later")
            waiting = _Waiting(rows, size_bytes, answer, self._clock() + self.wait_s)
            self._queue.append(waiting)
            self._unanswered.append(waiting)
            self._rows += len(rows)
            self._bytes += size_bytes
            self._requests += 1
            self._work.notify()
            if len(self._unanswered) == 1:
                self._watch.notify()
        return None

    @property
    def waiting(self) -> tuple[int, int, int]:
        """(requests, rows, bytes) submitted and not yet answered."""
        with self._lock:
            return self._requests, self._rows, self._bytes

    # --- the writer ------------------------------------------------------------------------------------------
    def _run_writer(self) -> None:
        try:
            self._write_batches()
        finally:
            self._writer_done.set()
            with self._lock:
                self._watch.notify_all()

    def _write_batches(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stopping:
                    self._work.wait()
                if not self._queue:
                    return  # stopping, and nothing left to store
                batch = self._take()
            try:
                self._commit(batch)
            except Exception:  # a bug: answer (500) rather than leave requests hanging until their deadline
                _log.exception("storing feedback failed")
                for waiting in batch:
                    self._answer(waiting, Outcome("failed", "internal error; feedback not stored"))

    def _take(self) -> list[_Waiting]:
        """The requests at the front of the queue, up to `max_batch_rows` rows (at least one request)."""
        batch: list[_Waiting] = []
        rows = 0
        while self._queue:
            waiting = self._queue[0]
            if waiting.answered:  # timed out while queued: its rows are never stored
                self._queue.popleft()
                continue
            if batch and rows + len(waiting.rows) > self.max_batch_rows:
                break
            self._queue.popleft()
            waiting.taken = True
            batch.append(waiting)
            rows += len(waiting.rows)
        return batch

    def _commit(self, batch: list[_Waiting]) -> None:
        with self._lock:
            fresh: list[_Waiting] = []
            seen: set[str] = set()
            repeats: list[_Waiting] = []  # the same content as a request stored before, or earlier in this batch
            for waiting in batch:
                if waiting.key in self._stored_keys or waiting.key in seen:
                    repeats.append(waiting)
                else:
                    seen.add(waiting.key)
                    fresh.append(waiting)
        if fresh:
            rows = [row for waiting in fresh for row in waiting.rows]
            outcome = self._store(rows, min(waiting.deadline for waiting in fresh))
        else:
            outcome = _STORED
        if outcome.stored:
            with self._lock:
                self.batches += bool(fresh)
                for waiting in fresh:
                    self._stored_keys[waiting.key] = None
                while len(self._stored_keys) > self._remembered:
                    self._stored_keys.popitem(last=False)
        for waiting in fresh:
            self._answer(waiting, outcome)
        for waiting in repeats:
            # A repeat of this batch's own request shares its fate; a repeat of an earlier one was stored then.
            self._answer(waiting, outcome if waiting.key in seen else _STORED)

    def _store(self, rows: Rows, deadline: float) -> Outcome:
        """One INSERT of `rows`, tried again (same block, same token) while the store refuses and time remains."""
        while True:
            try:
                self._write(rows)
                return _STORED
            except Backpressure as exc:
                left_s = deadline - self._clock()
                if left_s <= 0 or self._stopping:
                    return Outcome("unavailable", f"feedback not stored: {exc}; retry", max(1.0, exc.retry_after_s))
                time.sleep(min(_RETRY_PAUSE_MAX_S, exc.retry_after_s or _RETRY_PAUSE_MAX_S, left_s))

    # --- answers and deadlines ---------------------------------------------------------------------------------
    def _answer(self, waiting: _Waiting, outcome: Outcome) -> None:
        with self._lock:
            if waiting.answered:
                return
            waiting.answered = True
            self._rows -= len(waiting.rows)
            self._bytes -= waiting.size
            self._requests -= 1
        try:
            waiting.answer(outcome)
        except Exception:
            _log.exception("answering a feedback request failed")

    def _run_watch(self) -> None:
        """Answers each request still unanswered at its deadline, even while the writer is stuck in an INSERT."""
        while True:
            expired: list[_Waiting] = []
            with self._lock:
                while self._unanswered and self._unanswered[0].answered:
                    self._unanswered.popleft()
                if self._stopping and self._writer_done.is_set() and not self._unanswered:
                    return
                if not self._unanswered:
                    self._watch.wait(1.0 if self._stopping else None)
                    continue
                now = self._clock()
                while self._unanswered and self._unanswered[0].deadline <= now:
                    expired.append(self._unanswered.popleft())
                if not expired:
                    self._watch.wait(min(self._unanswered[0].deadline - now, 1.0))
                    continue
            for waiting in expired:
                note = "it may still be stored; a retry is counted once" if waiting.taken else "nothing was stored"
                message = f"feedback not stored within {self.wait_s:g}s ({note}); retry"
                self._answer(waiting, Outcome("timeout", message, 1.0))


def _content_key(rows: Rows) -> str:
    """What a request stores, without its arrival time: equal for a client's re-send of the same feedback."""
    rows_sent = [{k: v for k, v in row.items() if k != "received_at"} for row in rows]
    text = json.dumps(rows_sent, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
