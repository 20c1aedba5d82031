"""Feeds the per-minute rollup: each stored range once, after the tail sampler has decided its traces.

The rollup counts one call per nested run of a stage (`sinks/rollup_sql.py`), which needs a trace's upper spans,
and they arrive last. The sampler already waits for that — a trace is decided when its root has arrived plus the
grace period, or at the decision timeout — so a range is ready when no trace with a span in it is still pending:
every sequence number below the sampler's low-water mark. The report therefore lags the spans by about the grace
period. A trace whose root never arrives (its app's spans hang under a gateway that does not send to ragmon) is
pending until the decision timeout; so that one such trace does not hold the report back for all traffic, a range
is rolled up at the latest `max_delay_s` after the sampler saw it, by when exporters have sent a span's
ancestors: a wrapper ends milliseconds after the call inside it, so both leave in one export batch unless the
batch processor's timer (5 s in the SDKs) fires in between, and then the wrapper leaves with the next batch.

Exactly once: the range's end is journaled (`rollup.pending`) before its INSERT, whose deduplication token names
the range; a crash in between re-runs the same range with the same token at the next start, and the store drops it
if it had landed. `rollup.cursor` is the last sequence number rolled up. A data directory without one (new, or an
agent upgraded from a store whose view counted every span on insert) starts after what is already stored. A roll-up
that fails while the agent runs (the store is down) is the same: the next try re-runs exactly the failed range with
its token before any later one, after a jittered backoff (`ragmon.retry.Recovery`, up to 10 s) that holds the
sampling thread's ticks off the store meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from ragmon.pipeline.intake import IngestSeq
from ragmon.pipeline.wal import Cursor, Position
from ragmon.retry import Recovery
from ragmon.sinks.for_sampler import SamplerStore

log = logging.getLogger("ragmon.agent")


class Rollups:
    def __init__(
        self,
        store: SamplerStore,
        state_dir: Path,
        seq: IngestSeq,
        log_id: str,
        *,
        interval_s: float = 2.0,
        max_delay_s: float = 6.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.seq = seq
        self.log_id = log_id
        # At most one INSERT per interval: each range is one more part in the rollup tables, and the query's fixed
        # cost is paid per range, not per span; 2 s rather than 1 s is what brought ingest of a burst back to the
        # rate it had with the view (`benchmarks/ingest.py --against`; docs/results.md).
        self.interval_s = interval_s
        self.max_delay_s = max_delay_s
        self._clock = clock
        self.cursor = Cursor(Path(state_dir) / "rollup.cursor")
        self.journal = Cursor(Path(state_dir) / "rollup.pending")
        self.rolled_to: int | None = None  # the last sequence number rolled up
        self._rolled_at_s = -float("inf")
        self._seen: deque[tuple[float, int]] = deque()  # (when, last sequence number) of ranges not rolled up yet
        self.recovery = Recovery("roll-ups", log, clock=clock)
        self._retry_at_s = -float("inf")  # after a failed roll-up, the next not before this
        self._failed_to: int | None = None  # the end of a range whose INSERT failed: re-run exactly, same token

    def recover(self, stored: Position | None) -> None:
        """At start, before new requests are stored: finish a journaled range, or begin after `stored` (the store
        cursor) when this data directory has never rolled up."""
        cursor = self.cursor.load()
        if cursor is None:  # saved at once: spans stored from here on are rolled up even after a crash
            cursor = stored if stored is not None else Position(0, 0)
            self.cursor.save(cursor)
        self.rolled_to = self.seq.of(cursor)
        pending = self.journal.load()
        if pending is not None and self.seq.of(pending) > self.rolled_to:
            self._roll(self.seq.of(pending))
        self.journal.clear()

    def seen(self, seq_to: int) -> None:
        """The sampler has seen the stored requests up to `seq_to`."""
        self._seen.append((self._clock(), seq_to))

    def lag_s(self) -> float:
        """How long the oldest range the sampler has seen has waited to be rolled up (0: none waits). Read by the
        API's thread while the sampling thread rolls up: a deque's ends are safe to read, but may empty meanwhile."""
        try:
            return self._clock() - self._seen[0][0]
        except IndexError:
            return 0.0

    def due(self, *, final: bool = False) -> bool:
        """Whether a roll-up may run now: at most one per `interval_s`, and after a failure not before its backoff
        has passed — except the last one (`final`)."""
        now = self._clock()
        return final or (now - self._rolled_at_s >= self.interval_s and now >= self._retry_at_s)

    def roll(self, decided_to: int, *, stored_to: int | None = None, final: bool = False) -> bool:
        """Roll up what is not rolled up yet up to `decided_to` (inclusive: every trace with a span there is decided)
        or, past it, up to the ranges seen `max_delay_s` ago — unless the last roll-up was less than `interval_s`
        ago (`final`: regardless); ancestors are looked up among the spans stored up to `stored_to` (None: all).
        Returns whether a range was rolled up."""
        now = self._clock()
        ready_to = decided_to
        for seen_at, seq_to in self._seen:
            if now - seen_at < self.max_delay_s:
                break
            ready_to = max(ready_to, seq_to)
        if self._failed_to is not None:
            # The failed INSERT may have landed: the same range with the same token lets the store drop the repeat;
            # a wider range would carry a new token and count the failed one twice.
            ready_to = self._failed_to
        rolled = (self.rolled_to is None or ready_to > self.rolled_to) and self.due(final=final)
        if rolled:
            try:
                self._roll(ready_to, stored_to)
            except Exception as exc:
                self._failed_to = ready_to
                self._retry_at_s = self._clock() + self.recovery.failed(exc)
                raise
            self._failed_to = None
            self.recovery.succeeded()
            self._rolled_at_s = now
        while self._seen and self.rolled_to is not None and self._seen[0][1] <= self.rolled_to:
            self._seen.popleft()
        return rolled

    def _roll(self, seq_to: int, stored_to: int | None = None) -> None:
        # `recover` was not called (a writer driven by hand): from the first sequence number this instance gives
        seq_from = self.seq.of(Position(0, 0)) if self.rolled_to is None else self.rolled_to + 1
        self.journal.save(self.seq.position(seq_to))
        self.store.roll_up(seq_from, seq_to, f"rollup:{self.log_id}:{seq_from}-{seq_to}", context_to=stored_to)
        self.cursor.save(self.seq.position(seq_to))
        self.journal.clear()
        self.rolled_to = seq_to
