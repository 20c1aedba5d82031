"""Runs the question stage (`questions.py`) on a thread of its own, so grouping never holds sampling up.

MiniLM groups new text at about a hundred questions a second: inside the sampling loop it would delay every
decision behind it. Here the sampling loop only says how far the roll-up has gone (`offer`, which never blocks) and
this thread follows. It may lag and catches up, in runs of at most `ranges_per_run` sampled ranges, so one read stays
the size of a few ranges however far behind it is.

Bounded: past `max_behind_ranges` ranges rolled up and not grouped, the oldest are given up (`QuestionStage.skip`):
their traces get no group, counted (`ragmon_question_ranges{outcome="skipped"}`) and logged. Captured text lives in
`span_content` for a day only; a stage that cannot keep up would otherwise fall further behind until the text it
needs has expired, and the view would say nothing about the present. A failed run (the store down) waits out a
jittered backoff (`ragmon.retry.Recovery`, the stage's own) and retries the same range, a failed write with the
same rows and token. Health component `questions`: failing while it backs off, stalled if a run hangs.
"""

from __future__ import annotations

import logging
import threading
import time

from ragmon.health import Component
from ragmon.pipeline.questions import QuestionStage

log = logging.getLogger("ragmon.agent")

# Beats at least this often when idle, so `questions` is not reported stalled between ranges.
IDLE_BEAT_S = 1.0


class QuestionThread:
    def __init__(self, stage: QuestionStage, *, health: Component | None = None) -> None:
        self.stage = stage
        self.health = health
        self._ready_to: int | None = None
        self._stored_to: int | None = None
        self._wake = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0

    def offer(self, ready_to: int | None, stored_to: int | None) -> None:
        """From the sampling loop: the roll-up has done everything up to `ready_to`. Never blocks on grouping."""
        with self._wake:
            if ready_to is not None and (self._ready_to is None or ready_to > self._ready_to):
                self._ready_to = ready_to
                self._wake.notify()
            self._stored_to = stored_to

    def start(self) -> QuestionThread:
        self._thread = threading.Thread(target=self._run, name="ragmon-questions", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Stop after the run in progress; False when it is stuck on the store past `timeout_s` (left be)."""
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(max(0.1, timeout_s))
            if self._thread.is_alive():
                log.warning("question grouping did not finish within the shutdown deadline")
                return False
        return True

    def run_once(self) -> bool:
        """One step: give up what lies past the bound, then group the next batch of ranges (if due). Returns
        whether it grouped; raises what the stage raised (it has already set its backoff)."""
        with self._wake:
            ready_to, stored_to = self._ready_to, self._stored_to
        if ready_to is None:
            return False
        stage = self.stage
        ends = stage.pending_ends(ready_to)
        if len(ends) > stage.max_behind_ranges:
            stage.skip(ends[len(ends) - stage.max_behind_ranges - 1])
            ends = ends[len(ends) - stage.max_behind_ranges :]
        # a batch ends where a sampled range ends (its context is known); the last may end mid-range at `ready_to`
        batch_to = ends[stage.ranges_per_run - 1] if len(ends) > stage.ranges_per_run else ready_to
        return stage.group(batch_to, stored_to=stored_to)

    def _behind(self) -> bool:
        grouped, ready = self.stage.grouped_to, self._ready_to
        return ready is not None and (grouped is None or ready > grouped)

    def _run(self) -> None:
        stage = self.stage
        try:
            while not self._stop.is_set():
                try:
                    self.run_once()
                except Exception as exc:  # the stage backs off (its Recovery); the range waits, sampling goes on
                    self.errors += 1
                    if self.health is not None:
                        self.health.failing(exc)
                else:
                    if self.health is not None:
                        if stage.recovery.failing:
                            self.health.failing(stage.recovery.last_error)
                        else:
                            self.health.ok()
                with self._wake:
                    if self._stop.is_set():
                        break
                    # behind: again once due (the stage's interval, or its backoff); else until offered more
                    wait_s = IDLE_BEAT_S
                    if self._behind() or stage.failed_pending:
                        wait_s = min(wait_s, max(0.0, stage.next_due_s() - time.monotonic()))
                    self._wake.wait(wait_s)
        finally:
            if self.health is not None:
                self.health.stopped(expected=self._stop.is_set())
