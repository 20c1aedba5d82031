"""The agent's roll-ups: each stored range once, in order, at most once per interval, and exactly once across a
crash (the journaled range is re-run with the same token, which the store drops if it had landed)."""

from __future__ import annotations

import contextlib
import logging
import random
from pathlib import Path

import pytest

from ragmon.pipeline.intake import IngestSeq
from ragmon.pipeline.rollups import Rollups
from ragmon.pipeline.wal import Position
from ragmon.retry import Recovery


class RecordingStore:
    """Records each roll-up; fails the next one when told to (a store that went away mid-INSERT)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, str | None]] = []
        self.fail_next = False

    def roll_up(
        self, seq_from: int, seq_to: int, dedup_token: str | None = None, *, context_to: int | None = None
    ) -> None:
        self.calls.append((seq_from, seq_to, dedup_token))
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("store went away")


SEQ = IngestSeq()


def _rollups(store: RecordingStore, state: Path, clock: list[float]) -> Rollups:
    return Rollups(store, state, SEQ, "log1", interval_s=1.0, max_delay_s=10.0, clock=lambda: clock[0])


def test_ranges_follow_each_other_at_most_once_per_interval(tmp_path: Path) -> None:
    store, clock = RecordingStore(), [100.0]
    rollups = _rollups(store, tmp_path, clock)
    rollups.recover(None)  # a new data directory
    assert rollups.roll(SEQ.of(Position(0, 500)))
    assert not rollups.roll(SEQ.of(Position(0, 900)))  # within the interval
    clock[0] += 1.0
    assert not rollups.roll(SEQ.of(Position(0, 500)))  # nothing new
    assert rollups.roll(SEQ.of(Position(1, 20)))
    assert rollups.roll(SEQ.of(Position(1, 90)), final=True)  # on shutdown: regardless of the interval
    first, second, third = store.calls
    assert first[:2] == (SEQ.of(Position(0, 0)) + 1, SEQ.of(Position(0, 500)))
    assert second[:2] == (SEQ.of(Position(0, 500)) + 1, SEQ.of(Position(1, 20)))
    assert third[:2] == (SEQ.of(Position(1, 20)) + 1, SEQ.of(Position(1, 90)))
    assert len({token for _, _, token in store.calls}) == 3


def test_an_upgraded_data_directory_starts_after_what_is_stored(tmp_path: Path) -> None:
    """Spans stored before the upgrade were counted by the store's old view: not again."""
    store, clock = RecordingStore(), [0.0]
    rollups = _rollups(store, tmp_path, clock)
    rollups.recover(Position(3, 4000))
    rollups.roll(SEQ.of(Position(3, 4000)))
    assert store.calls == []
    rollups.roll(SEQ.of(Position(3, 5000)))
    assert store.calls[0][:2] == (SEQ.of(Position(3, 4000)) + 1, SEQ.of(Position(3, 5000)))
    # and a restart continues from the cursor, not from the store cursor it is given
    again = _rollups(store, tmp_path, clock)
    again.recover(Position(9, 9))
    assert again.rolled_to == SEQ.of(Position(3, 5000))


def test_a_crash_mid_roll_up_reruns_the_same_range_with_the_same_token(tmp_path: Path) -> None:
    store, clock = RecordingStore(), [0.0]
    rollups = _rollups(store, tmp_path, clock)
    rollups.recover(None)
    rollups.roll(SEQ.of(Position(0, 100)))
    store.fail_next = True
    clock[0] += 5
    with pytest.raises(ConnectionError):
        rollups.roll(SEQ.of(Position(0, 300)))
    interrupted = store.calls[-1]
    # the restarted agent has stored more since; the journaled range is re-run first, exactly as it was
    restarted = _rollups(store, tmp_path, clock)
    restarted.recover(Position(0, 700))
    assert store.calls[-1] == interrupted
    assert restarted.rolled_to == SEQ.of(Position(0, 300))
    restarted.roll(SEQ.of(Position(0, 700)))
    assert store.calls[-1][:2] == (SEQ.of(Position(0, 300)) + 1, SEQ.of(Position(0, 700)))
    assert not (tmp_path / "rollup.pending").exists()


def test_a_range_waits_for_its_traces_at_most_the_maximum_delay(tmp_path: Path) -> None:
    """A trace whose root never arrives stays undecided until the sampler's timeout; the ranges after it are rolled
    up once the delay has passed, and the lag says how long the oldest one has waited."""
    store, clock = RecordingStore(), [0.0]
    rollups = _rollups(store, tmp_path, clock)
    rollups.recover(Position(0, 50))
    decided = SEQ.of(Position(0, 50))
    stuck = SEQ.of(Position(0, 100))  # the rootless trace's range: nothing is decided from here on
    rollups.seen(stuck)
    clock[0] = 4.0
    rollups.seen(SEQ.of(Position(0, 200)))
    clock[0] = 9.0
    assert not rollups.roll(decided)
    assert rollups.lag_s() == 9.0
    clock[0] = 12.0
    assert rollups.roll(decided)  # the first range has waited 12 s, the second 8 s
    assert store.calls[-1][1] == stuck
    assert rollups.lag_s() == 8.0
    clock[0] = 14.0
    assert rollups.roll(decided)
    assert store.calls[-1][1] == SEQ.of(Position(0, 200))
    assert rollups.lag_s() == 0.0


def test_a_new_data_directory_that_crashes_before_its_first_roll_up_loses_nothing(tmp_path: Path) -> None:
    store, clock = RecordingStore(), [0.0]
    _rollups(store, tmp_path, clock).recover(None)  # first start: nothing stored, nothing rolled up
    # requests were stored, then the agent died before rolling them up; the restart sees the store cursor
    restarted = _rollups(store, tmp_path, clock)
    restarted.recover(Position(0, 800))
    restarted.roll(SEQ.of(Position(0, 800)))
    assert store.calls[-1][:2] == (SEQ.of(Position(0, 0)) + 1, SEQ.of(Position(0, 800)))


def test_a_store_down_mid_run_backs_off_then_reruns_the_failed_range_with_its_token(tmp_path: Path) -> None:
    store, clock = RecordingStore(), [0.0]
    rollups = _rollups(store, tmp_path, clock)
    rollups.recovery = Recovery("roll-ups", logging.getLogger("test"), clock=lambda: clock[0], rng=random.Random(5))
    rollups.recover(None)
    rollups.roll(SEQ.of(Position(0, 100)))
    clock[0] += 5
    calls = len(store.calls)
    # The store is down for a minute while the sampling thread ticks every 0.1 s, the decided range growing.
    for tick in range(600):
        store.fail_next = True
        with contextlib.suppress(ConnectionError):
            rollups.roll(SEQ.of(Position(0, 300 + tick)))
        clock[0] += 0.1
    tries = store.calls[calls:]
    assert 8 <= len(tries) <= 30  # backed off, up to 10 s apart (not 600 tries, one per tick)
    assert len(set(tries)) == 1  # each the failed range with its token, though more was decided meanwhile
    assert rollups.recovery.failing
    store.fail_next = False
    clock[0] += 60  # past any backoff
    assert rollups.roll(SEQ.of(Position(0, 900)))
    assert store.calls[-1] == tries[0]  # the store drops it if one of the failed INSERTs had landed
    assert not rollups.recovery.failing
    clock[0] += 1
    assert rollups.roll(SEQ.of(Position(0, 900)))
    assert store.calls[-1][:2] == (SEQ.of(Position(0, 300)) + 1, SEQ.of(Position(0, 900)))
