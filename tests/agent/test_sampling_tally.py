"""Sampling decisions counted per minute for the store: filed by outcome and first reason, late fragments not
counted, a retryable store error keeps the counts for the next write, and every write has a token of its own."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ragmon.sinks.errors import StoreError

from ragmon.pipeline.sampling_tally import SamplingTally
from ragmon.sampling import DecidedTrace, Decision


class RecordingStore:
    def __init__(self) -> None:
        self.writes: list[tuple[list[dict[str, Any]], str | None]] = []
        self.fail_next = False

    def insert_sampling_counts(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str:
        if self.fail_next:
            self.fail_next = False
            raise StoreError("store down", retryable=True)
        self.writes.append(([dict(row) for row in rows], dedup_token))
        return dedup_token or ""


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _decided(decision: Decision, reasons: tuple[str, ...], by: str = "complete", feature: str = "qa") -> DecidedTrace:
    return DecidedTrace("acme", "0" * 32, decision, reasons, 1.0, by, 0.0, 0, feature)


def _counts(store: RecordingStore) -> dict[tuple[str, str, str], int]:
    out: dict[tuple[str, str, str], int] = {}
    for rows, _ in store.writes:
        for row in rows:
            key = (row["feature"], row["outcome"], row["reason"])
            out[key] = out.get(key, 0) + row["traces"]
    return out


def test_decisions_are_filed_by_outcome_and_first_reason() -> None:
    store, clock = RecordingStore(), Clock(0.0)
    tally = SamplingTally(store, write_interval_s=5.0, clock=clock, wall_clock=Clock(1_800_000_030.0))
    tally(
        [
            _decided(Decision.KEEP, ("error", "slow")),
            _decided(Decision.KEEP, ("slow", "baseline")),
            _decided(Decision.KEEP, ("error",), by="late"),  # a late fragment of a kept trace: not a decision
            _decided(Decision.SKIP, ()),
            _decided(Decision.SKIP, ("budget",)),
            _decided(Decision.DROP, ("no-load-tests",), feature="chat"),
        ]
    )
    assert _counts(store) == {
        ("qa", "keep", "error"): 1,
        ("qa", "keep", "slow"): 1,
        ("qa", "skip", ""): 1,
        ("qa", "skip", "budget"): 1,
        ("chat", "drop", "no-load-tests"): 1,
    }
    assert {row["minute"].timestamp() for row in store.writes[0][0]} == {1_800_000_000.0}  # the decision's minute


def test_a_retryable_failure_keeps_counts_and_each_write_has_its_own_token() -> None:
    store, clock = RecordingStore(), Clock(0.0)
    tally = SamplingTally(store, write_interval_s=5.0, clock=clock, wall_clock=Clock(1_800_000_030.0))
    store.fail_next = True
    tally([_decided(Decision.SKIP, ())])
    assert store.writes == [] and tally.counts["write_retries"] == 1
    clock.now += 1
    tally([_decided(Decision.SKIP, ())])  # within the interval: waits, merged with what failed
    assert store.writes == []
    clock.now += 5
    tally([])
    clock.now += 5
    tally([_decided(Decision.SKIP, ())])  # the same minute and key again: a second write, not a re-send
    assert [rows[0]["traces"] for rows, _ in store.writes] == [2, 1]
    tokens = [token for _, token in store.writes]
    assert all(tokens) and len(set(tokens)) == 2
