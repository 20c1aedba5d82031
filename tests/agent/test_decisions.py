"""Kept traces are copied in batches: one copy per interval (or per full batch), everything at a flush, and a
retryable failure keeps them waiting for the next copy."""

from __future__ import annotations

from typing import Any

from ragmon.sinks.errors import StoreError

from ragmon.pipeline.decisions import DecisionSink
from ragmon.sampling import DecidedTrace, Decision


class RecordingStore:
    def __init__(self) -> None:
        self.copies: list[list[str]] = []
        self.conversation_asks: list[list[str]] = []
        self.fail_next = False

    def copy_payloads(self, kept: list[dict[str, Any]]) -> None:
        if self.fail_next:
            self.fail_next = False
            raise StoreError("store down", retryable=True)
        self.copies.append([row["trace_id"] for row in kept])

    def copy_conversation_turns(self, kept: list[dict[str, Any]]) -> int:
        self.conversation_asks.append([row["trace_id"] for row in kept])
        return 0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _decided(trace_id: str, decision: Decision = Decision.KEEP, seq: int = 0) -> DecidedTrace:
    return DecidedTrace("acme", trace_id, decision, ("error",), 1.0, "complete", 0.0, first_ingest_seq=seq)


def test_copies_once_per_interval_and_when_a_batch_is_full() -> None:
    store, clock = RecordingStore(), Clock()
    sink = DecisionSink(store, copy_interval_s=1.0, copy_batch=3, clock=clock)
    sink([_decided("a")])  # nothing copied yet: the first copy goes out at once
    assert store.copies == [["a"]]
    clock.now += 0.5
    sink([_decided("b"), _decided("s", Decision.SKIP)])
    assert store.copies == [["a"]] and sink.waiting == 1  # within the interval: waits; skipped ones never wait
    clock.now += 0.2
    sink([])  # a tick with nothing decided: still within the interval
    assert sink.waiting == 1
    clock.now += 0.4
    sink([])  # the interval has passed: the waiting trace is copied without a new decision
    assert store.copies == [["a"], ["b"]]
    sink([_decided("c"), _decided("d"), _decided("e")])  # a full batch does not wait for the interval
    assert store.copies[-1] == ["c", "d", "e"]
    assert sink.counts["keep:complete"] == 5 and sink.counts["skip:complete"] == 1
    assert sink.counts["payloads_copied"] == 5


def test_flush_copies_everything_and_a_retryable_failure_keeps_traces_waiting() -> None:
    store, clock = RecordingStore(), Clock()
    sink = DecisionSink(store, copy_interval_s=60.0, copy_batch=1_000, clock=clock)
    sink([_decided("a")])
    sink([_decided("b"), _decided("c")])
    assert store.copies == [["a"]] and sink.waiting == 2
    store.fail_next = True
    sink.flush()
    assert sink.waiting == 2 and sink.counts["payload_copy_retries"] == 1  # nothing lost
    sink.flush()
    assert store.copies == [["a"], ["b", "c"]] and sink.waiting == 0


def test_the_oldest_kept_trace_waiting_for_its_copy_holds_the_sampler_cursor_back() -> None:
    store, clock = RecordingStore(), Clock()
    sink = DecisionSink(store, copy_interval_s=1.0, clock=clock)
    sink([_decided("first", seq=3)])  # copied at once: the next copy is an interval away
    assert store.copies == [["first"]] and sink.low_water_seq() is None
    sink([_decided("a", seq=40), _decided("b", seq=25), _decided("s", Decision.SKIP, seq=7)])
    assert sink.low_water_seq() == 25  # a skipped trace has nothing to lose
    clock.now += 1.0
    sink([])
    assert store.copies == [["first"], ["a", "b"]] and sink.low_water_seq() is None
    store.fail_next = True  # a retryable failure: still waiting, still holding
    clock.now += 1.0
    sink([_decided("c", seq=50)])
    assert sink.low_water_seq() == 50


def test_the_earlier_turns_of_what_was_copied_are_asked_for_after_the_copy() -> None:
    store, clock = RecordingStore(), Clock()
    sink = DecisionSink(store, copy_interval_s=1.0, copy_batch=10, clock=clock)
    sink([_decided("a"), _decided("b")])
    assert store.copies == [["a", "b"]] and store.conversation_asks == [["a", "b"]]
    store.fail_next = True
    clock.now += 2
    sink([_decided("c")])
    assert store.conversation_asks == [["a", "b"]]  # nothing copied, nothing asked
    off = DecisionSink(store, copy_interval_s=1.0, clock=clock, keep_conversations=False)
    off([_decided("d")])
    assert store.copies[-1] == ["d"] and store.conversation_asks == [["a", "b"]]
