"""Groups each decided range's questions into recurring questions (`ragmon.questions`), after its roll-up.

Run on its own thread (`question_thread.py`), which follows the ranges the roll-up has done (`rollups.py`): their
traces are decided, so whole; sampling never waits for it. A range's traces are those whose root span was stored
in it (`Store.trace_questions`); their earlier spans are read from the oldest range the sampler still held a trace
in when it took this one (`seen`). Each trace's question joins a group; its `trace_questions` row and the changed
groups' `question_groups` rows are written. Traces without a captured question get no row (counted:
`traces_without_question`).

Exactly once, as the roll-up: the range's end is journaled (`questions.pending`) before its inserts, and the
`trace_questions` insert's deduplication token names the range. A failed insert is retried with the same rows and
token after a jittered backoff (`ragmon.retry.Recovery`); after a crash the journaled range is grouped again at the
next start, against the groups reloaded from the store, under the same token (and `trace_questions` collapses on
(tenant, start_time, trace_id) besides). `questions.cursor` is the last sequence number grouped; a data directory
without one starts after what is stored. Group member counts may count a re-grouped range twice: they rank groups
for eviction, the view counts `trace_questions`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragmon.pipeline.intake import IngestSeq
from ragmon.pipeline.wal import Cursor, Position
from ragmon.questions import QuestionGrouper
from ragmon.retry import Recovery
from ragmon.sinks.for_questions import QuestionStore

log = logging.getLogger("ragmon.agent")

QUESTIONS_STALL_AFTER_S = 120.0


class QuestionStage:
    def __init__(
        self,
        store: QuestionStore,
        grouper: QuestionGrouper,
        state_dir: Path,
        seq: IngestSeq,
        log_id: str,
        *,
        interval_s: float = 2.0,
        ranges_per_run: int = 50,
        max_behind_ranges: int = 2000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.grouper = grouper
        self.seq = seq
        self.log_id = log_id
        self.interval_s = interval_s  # one range per interval at most, as the roll-up: the query's cost is per range
        self._clock = clock
        self.cursor = Cursor(Path(state_dir) / "questions.cursor")
        self.journal = Cursor(Path(state_dir) / "questions.pending")
        self.grouped_to: int | None = None
        # (last seq of a sampled range, its context's first): appended by the sampling thread, read by the stage's
        self._contexts: deque[tuple[int, int]] = deque()
        self._contexts_lock = threading.Lock()
        # the stage's own thread (`question_thread.py`) reads at most this many sampled ranges per run, and gives up
        # the oldest past `max_behind_ranges` rolled up and not grouped
        self.ranges_per_run = max(1, ranges_per_run)
        self.max_behind_ranges = max(1, max_behind_ranges)
        self._floor = 0  # the context of ranges seen before this process (recovery)
        self.recovery = Recovery("question grouping", log, clock=clock)
        self._grouped_at_s = -float("inf")
        self._retry_at_s = -float("inf")
        self._failed: tuple[int, int, list[dict[str, Any]], list[dict[str, Any]]] | None = None
        self.counts: Counter[str] = Counter()

    def recover(self, stored: Position | None, context_from: int) -> None:
        """At start: hold the stored groups, finish a journaled range, or begin after `stored` on a new data
        directory. `context_from`: where the sampler re-reads from (its cursor)."""
        self._floor = context_from
        self.counts["groups_loaded"] += self.grouper.load(self.store.question_groups_held(self.grouper.max_groups))
        cursor = self.cursor.load()
        if cursor is None:
            cursor = stored if stored is not None else Position(0, 0)
            self.cursor.save(cursor)
        self.grouped_to = self.seq.of(cursor)
        pending = self.journal.load()
        if pending is not None and self.seq.of(pending) > self.grouped_to:
            self._run(self.grouped_to + 1, self.seq.of(pending), None)
        self.journal.clear()

    def seen(self, seq_to: int, context_from: int) -> None:
        """The sampler took a range ending at `seq_to` while its oldest held trace began at `context_from`."""
        with self._contexts_lock:
            self._contexts.append((seq_to, context_from))

    def pending_ends(self, ready_to: int) -> list[int]:
        """The ends of the sampled ranges rolled up (≤ `ready_to`) and not grouped yet, oldest first."""
        done = -1 if self.grouped_to is None else self.grouped_to
        with self._contexts_lock:
            return [end for end, _ in self._contexts if done < end <= ready_to]

    def skip(self, seq_to: int) -> int:
        """Give up the ranges up to `seq_to` ungrouped (their traces get no row): the stage's bound when it has
        fallen too far behind (`question_thread.py`). Never over a failed write, which is retried first. Returns the
        sampled ranges given up (counted: `ranges_skipped`)."""
        if self._failed is not None or (self.grouped_to is not None and seq_to <= self.grouped_to):
            return 0
        with self._contexts_lock:
            skipped = 0
            while self._contexts and self._contexts[0][0] <= seq_to:
                self._contexts.popleft()
                skipped += 1
        self.cursor.save(self.seq.position(seq_to))
        self.grouped_to = seq_to
        self.counts["ranges_skipped"] += skipped
        log.warning("question grouping fell behind: %d ranges up to ingest sequence %d left ungrouped", skipped, seq_to)
        return skipped

    @property
    def failed_pending(self) -> bool:
        """A failed write waits to be retried with its rows and token."""
        return self._failed is not None

    def next_due_s(self) -> float:
        """When (on the stage's clock) `due` turns true: after the interval since the last run, and the backoff."""
        return max(self._grouped_at_s + self.interval_s, self._retry_at_s)

    def due(self, *, final: bool = False) -> bool:
        now = self._clock()
        return final or (now - self._grouped_at_s >= self.interval_s and now >= self._retry_at_s)

    def group(self, ready_to: int | None, *, stored_to: int | None = None, final: bool = False) -> bool:
        """Group the ranges up to `ready_to` (the roll-up's: decided) not grouped yet; returns whether it ran."""
        if ready_to is None or not self.due(final=final):
            return False
        if self._failed is not None:
            seq_from, seq_to, rows, groups = self._failed
        elif self.grouped_to is not None and ready_to <= self.grouped_to:
            return False
        else:
            seq_from = self.seq.of(Position(0, 0)) if self.grouped_to is None else self.grouped_to + 1
            seq_to, rows, groups = ready_to, [], []
        try:
            if self._failed is None:
                self._run(seq_from, seq_to, stored_to)
            else:
                self._write(seq_from, seq_to, rows, groups)
        except Exception as exc:
            self._retry_at_s = self._clock() + self.recovery.failed(exc)
            raise
        self._failed = None
        self.recovery.succeeded()
        self._grouped_at_s = self._clock()
        with self._contexts_lock:
            while self._contexts and self._contexts[0][0] <= seq_to:
                self._contexts.popleft()
        return True

    def _context_from(self, seq_from: int, seq_to: int) -> int:
        with self._contexts_lock:
            held = [ctx for end, ctx in self._contexts if end >= seq_from and end <= seq_to] or [self._floor]
        return min(min(held), seq_from)

    def _run(self, seq_from: int, seq_to: int, stored_to: int | None) -> None:
        self.journal.save(self.seq.position(seq_to))
        traces = self.store.trace_questions(seq_from, seq_to, self._context_from(seq_from, seq_to), stored_to)
        rows = self._assign(traces)
        groups = self.grouper.take_changed()
        try:
            self._write(seq_from, seq_to, rows, groups)
        except Exception:
            self._failed = (seq_from, seq_to, rows, groups)  # retried as they are: the grouper has moved on
            raise

    def _assign(self, traces: list[dict[str, Any]]) -> list[dict[str, Any]]:
        by_feature: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for trace in traces:
            if not trace["question"]:
                self.counts["traces_without_question"] += 1
                continue
            by_feature.setdefault((trace["tenant"], trace["feature"]), []).append(trace)
        rows = []
        for (tenant, feature), group in by_feature.items():
            assignments = self.grouper.assign(tenant, feature, [t["question"] for t in group])
            for trace, assignment in zip(group, assignments, strict=True):
                rows.append({**trace, "group_id": assignment.group_id, "similarity": assignment.similarity})
        self.counts["traces_grouped"] += len(rows)
        return rows

    def _write(self, seq_from: int, seq_to: int, rows: list[dict[str, Any]], groups: list[dict[str, Any]]) -> None:
        # groups first: a trace's row never names a group the store has not heard of
        self.store.insert_question_groups(groups)
        self.store.insert_trace_questions(rows, f"questions:{self.log_id}:{seq_from}-{seq_to}")
        self.cursor.save(self.seq.position(seq_to))
        self.journal.clear()
        self.grouped_to = seq_to
