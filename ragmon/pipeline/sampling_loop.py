"""The sampling stage: stored ranges → trace fragments → the tail sampler → decided traces, and the roll-up.

The store writer (`writer.py`) hands each stored range over through `StoredRanges`; this stage's thread owns the
sampler. It asks the store for per-trace fragments of the ranges stored since it last looked (one query for all of
them when it fell behind), gives them to the sampler, hands what the sampler decided to the pipeline
(`DecisionHandOff.decided`, `pipeline.py`) and persists where a restarted sampler must look back from
(`sampler.cursor`). It reads on the store's read connection, so on the embedded engine its queries run on the second
core while the writer inserts the next batch. It also feeds the per-minute rollup with the ranges whose traces the
sampler has all decided (`rollups.py`: what is a call is known only once a trace's upper spans are in).

Durability of a decision (the promise `sampler.cursor` keeps): the cursor never passes the oldest trace the sampler
still holds, nor the oldest decided trace whose consequence is not durable yet (`DecisionHandOff.undecided_low_water`:
a kept trace whose text is not copied). A kill -9 anywhere re-feeds the sampler from the cursor at the next start,
so such a trace is decided again, never lost; one decided twice is copied twice, which `payloads` collapses.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ragmon.health import Component, HealthRegistry
from ragmon.pipeline.intake import IngestSeq
from ragmon.pipeline.question_thread import QuestionThread
from ragmon.pipeline.rollups import Rollups
from ragmon.pipeline.wal import Cursor, Position
from ragmon.retry import Recovery
from ragmon.sampling import DecidedTrace, Sampler
from ragmon.sinks.errors import StoreError
from ragmon.sinks.for_sampler import SamplerStore

if TYPE_CHECKING:
    from ragmon.pipeline.questions import QuestionStage

log = logging.getLogger("ragmon.agent")

# How long each loop may go without a heartbeat before it counts as stalled (ragmon.health). Each beats at
# least every tick when idle and after each failed try (10 s apart at most): two minutes is a store call that hangs.
SAMPLING_STALL_AFTER_S = 120.0
ROLLUPS_STALL_AFTER_S = 120.0


class DecisionHandOff(Protocol):
    """Where decided traces go next (the pipeline), and how far back their consequences are not durable yet."""

    def decided(self, traces: list[DecidedTrace]) -> None:
        """Called on every tick, also with nothing decided: the receiver may batch work and needs to hear time pass."""

    def undecided_low_water(self) -> int | None:
        """The oldest first ingest seq of a decided trace whose consequence is not durable yet (None: none)."""


class StoredRanges:
    """The hand-off from the store writer to the sampling stage: the ingest sequence numbers stored and not yet
    sampled, as one contiguous range (the writer extends it, the sampling stage takes it whole), and how far the
    store holds everything (`stored_to`, for the roll-up's ancestor lookups)."""

    def __init__(self) -> None:
        self._unsampled: tuple[int, int] | None = None
        self._ready = threading.Condition()
        self.stored_to: int | None = None  # the writer's store cursor as a sequence number; a reference read is atomic

    def add(self, seq_from: int, seq_to: int) -> None:
        """Stored: merged with any range the sampling stage has not taken yet."""
        with self._ready:
            pending = self._unsampled
            self._unsampled = (seq_from if pending is None else pending[0], seq_to)
            self._ready.notify()

    def take(self) -> tuple[int, int] | None:
        with self._ready:
            taken, self._unsampled = self._unsampled, None
            return taken

    def give_back(self, taken: tuple[int, int]) -> None:
        """A taken range that could not be sampled now: it goes first again, merged with any stored since."""
        with self._ready:
            later = self._unsampled
            self._unsampled = taken if later is None else (taken[0], later[1])

    @property
    def waiting(self) -> bool:
        return self._unsampled is not None

    def wait(self, wake_at_s: float, retry_at_s: float) -> None:
        """Sleep until a range is stored or `wake_at_s`; a range waiting while sampling backs off does not wake the
        loop before `retry_at_s` (else it would wake at once, again and again)."""
        with self._ready:
            now = time.monotonic()
            if self._unsampled is None or now < retry_at_s:
                wake_at = wake_at_s if self._unsampled is None else min(wake_at_s, retry_at_s)
                self._ready.wait(max(0.0, wake_at - now))

    def wake(self) -> None:
        with self._ready:
            self._ready.notify_all()


class SamplingLoop:
    def __init__(
        self,
        store: SamplerStore,
        sampler: Sampler,
        hand_off: DecisionHandOff,
        ranges: StoredRanges,
        state_dir: Path,
        log_id: str,
        *,
        seq: IngestSeq | None = None,
        tick_interval_s: float = 0.1,
        health: HealthRegistry | None = None,
        questions: QuestionStage | None = None,
    ) -> None:
        self.store = store
        self.sampler = sampler
        self.hand_off = hand_off
        self.ranges = ranges
        self.seq = seq or IngestSeq()
        self.tick_interval_s = tick_interval_s
        self.sampler_cursor = Cursor(Path(state_dir) / "sampler.cursor")
        self.rollups = Rollups(store, Path(state_dir), self.seq, log_id)
        # recurring questions: grouped after the roll-up, over the ranges it has done (questions.py), on a thread of
        # their own (question_thread.py) that this loop only tells how far the roll-up has gone
        self.questions = questions
        self._question_thread: QuestionThread | None = None
        if questions is not None:
            component: Component | None = None
            if health is not None:
                component = health.component("questions", stall_after_s=ROLLUPS_STALL_AFTER_S)
            self._question_thread = QuestionThread(questions, health=component)
        self._health: tuple[Component, Component] | None = None
        if health is not None:
            self._health = (
                health.component("sampling", stall_after_s=SAMPLING_STALL_AFTER_S),
                health.component("rollups", stall_after_s=ROLLUPS_STALL_AFTER_S),
            )
        self.counts: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)  # wall seconds: sample, decided, roll_up
        self._sampled_to: int | None = None  # the last sequence number the sampler has seen
        self._saved_at_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------
    def recover(self, stored: Position | None) -> None:
        """After a restart, once the writer has recovered up to `stored`: finish a journaled roll-up and give the
        sampler back the traces it had not decided (from the store, by ingest sequence)."""
        self.rollups.recover(stored)
        # No sampler cursor yet: the sampler never saved one (an agent killed within its first second), so it has
        # seen nothing for sure — from the log's start. Its ranges are then rolled up once it has decided them.
        low_water = self.sampler_cursor.load() or Position(0, 0)
        if self.questions is not None:
            self.questions.recover(stored, self.seq.of(low_water))
        if stored is not None and low_water <= stored:
            self._feed(self.seq.of(low_water), self.seq.of(stored))
            self._sampled_to = self.seq.of(stored)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ragmon-sampler", daemon=True)
        self._thread.start()
        if self._question_thread is not None:
            self._question_thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """After the writer stopped: sample what it stored, decide every held trace, roll up, stop."""
        self._stop.set()
        self.ranges.wake()
        if self._thread is not None:
            self._thread.join(max(0.1, timeout_s))
            if self._thread.is_alive():  # stuck on the store: it still owns the sampler, leave it be
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
        if self._question_thread is not None and not self._question_thread.stop(timeout_s):
            return  # stuck on the store: it still owns the stage; the next start groups what it has not
        try:
            self.group_questions(final=True)
        except Exception:  # the store went away: the next start groups these ranges
            log.exception("could not group the last questions before stopping")

    def save_cursor_after_decisions(self) -> None:
        """After a stop, once the decided traces' consequences are durable (the pipeline flushed its payload copies):
        move the sampler cursor past them, so the next start does not decide them again. Not while a sampling
        thread stuck on the store still owns the sampler."""
        if self._thread is None or not self._thread.is_alive():
            self._save_sampler_cursor()

    # -- the loop ------------------------------------------------------------------------------------------
    def _run(self) -> None:
        sampling, rollups = self._health if self._health else (None, None)
        recovery = Recovery("sampling", log)
        retry_at_s = -float("inf")  # after a failed try, the next one not before this
        next_tick = time.monotonic()
        try:
            while not self._stop.is_set():
                self.ranges.wait(next_tick, retry_at_s)
                now = time.monotonic()
                tick = now >= next_tick
                if now >= retry_at_s and (tick or self.ranges.waiting):
                    try:
                        self.sample_stored()
                        if tick:
                            self._handle(self.sampler.tick())
                            if now - self._saved_at_s >= 1.0:
                                self._save_sampler_cursor()
                                self._saved_at_s = now
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
                if self._question_thread is not None:  # never waits: the question thread follows on its own
                    self._question_thread.offer(self.rollups.rolled_to, self.ranges.stored_to)
        finally:
            for component in (sampling, rollups):
                if component is not None:
                    component.stopped(expected=self._stop.is_set())

    def group_questions(self, *, final: bool = False) -> None:
        """Group the questions of the ranges rolled up and not grouped yet (`questions.py`), here and now: for
        whoever drives the loop by hand, and at stop once the question thread has stopped."""
        if self.questions is None:
            return
        began = time.perf_counter()
        if self.questions.group(self.rollups.rolled_to, stored_to=self.ranges.stored_to, final=final):
            self.seconds["questions"] += time.perf_counter() - began

    def sample_stored(self) -> None:
        """Feed the sampler every range stored since it last looked, in one query (called by the loop; directly by
        whoever drives the writer's `step` by hand)."""
        taken = self.ranges.take()
        if taken is None:
            return
        if self.questions is not None:  # before the feed: the traces it completes began at or after this
            held = self.sampler.low_water_seq()
            self.questions.seen(taken[1], taken[0] if held is None else min(held, taken[0]))
        try:
            self._feed(*taken)
        except StoreError as exc:
            if not exc.retryable:  # a query the store will never answer: drop the range, say so
                self.counts["sampling_ranges_dropped"] += 1
                log.error("sampling skipped ingest sequences %d-%d: %s", taken[0], taken[1], exc)
                return
            self.ranges.give_back(taken)
            raise
        except Exception:
            self.ranges.give_back(taken)
            raise
        self._sampled_to = taken[1]
        self.rollups.seen(taken[1])

    @property
    def settled(self) -> bool:
        """Everything stored has been sampled and rolled up (for whoever waits for the pipeline: the demo, tests)."""
        rolled = self._sampled_to is None or self.rollups.rolled_to == self._sampled_to
        grouped = self.questions is None or self.questions.grouped_to == self.rollups.rolled_to
        return not self.ranges.waiting and rolled and grouped

    def roll_up(self, *, final: bool = False) -> None:
        """Roll up the ranges whose traces the sampler has all decided (`final`: now, not at most once per
        interval)."""
        if self._sampled_to is None or not self.rollups.due(final=final):
            return
        low_water = self.sampler.low_water_seq()  # the oldest range an undecided trace has spans in
        decided = self._sampled_to if low_water is None else min(self._sampled_to, low_water - 1)
        began = time.perf_counter()
        if self.rollups.roll(decided, stored_to=self.ranges.stored_to, final=final):
            self.seconds["roll_up"] += time.perf_counter() - began

    # -- the sampler ---------------------------------------------------------------------------------------
    def _feed(self, seq_from: int, seq_to: int) -> None:
        began = time.perf_counter()
        decided = self.sampler.ingest_table(self.store.trace_fragment_table(seq_from, seq_to), seq_from)
        self.seconds["sample"] += time.perf_counter() - began
        self._handle(decided)

    def _handle(self, decided: list[DecidedTrace]) -> None:
        began = time.perf_counter()
        self.hand_off.decided(decided)
        self.seconds["decided"] += time.perf_counter() - began

    def _save_sampler_cursor(self) -> None:
        """Persist where a restarted sampler must look back to: its oldest undecided trace or the oldest decided one
        whose consequence is not durable, else the last request it has seen (stored requests past it are not
        sampled yet: a restart feeds them from the store)."""
        held = [self.sampler.low_water_seq(), self.hand_off.undecided_low_water()]
        low_water = min((seq for seq in held if seq is not None), default=None)
        if low_water is not None:
            self.sampler_cursor.save(self.seq.position(low_water))
        elif self._sampled_to is not None:
            self.sampler_cursor.save(self.seq.position(self._sampled_to))
