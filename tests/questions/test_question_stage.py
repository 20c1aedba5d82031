"""The agent's question stage over a real embedded store: each decided range's questions grouped and written once,
groups that keep their ids across a restart, a journaled range grouped again after a crash without a second row,
and traces without a question counted, not written."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ragmon.sinks import Store, envelope, open_store, otlp_views

from ragmon.health import HealthRegistry, State
from ragmon.pipeline.intake import IngestSeq
from ragmon.pipeline.question_thread import QuestionThread
from ragmon.pipeline.questions import QuestionStage
from ragmon.pipeline.wal import Position
from ragmon.questions import LexicalEncoder, QuestionGrouper
from tests.sinks.test_store_questions import Trace, ragmon_trace
from tests.support.synth import encode_otlp_request

SEQ = IngestSeq()


@pytest.fixture
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    opened = open_store(str(chdb_engine_dir), database=f"t_{uuid.uuid4().hex[:12]}")
    otlp_views.install(opened)
    yield opened
    opened.close()


def _send(store: Store, traces: list[Trace], offset: int) -> int:
    seq = SEQ.of(Position(0, offset))
    spans = [span for t in traces for span in t.spans]
    store.insert_otlp([envelope.seal(encode_otlp_request(spans), "acme", seq)], dedup_token=f"b{seq}")
    return seq


def _stage(store: Store, state: Path) -> QuestionStage:
    grouper = QuestionGrouper(LexicalEncoder())
    return QuestionStage(store, grouper, state, SEQ, "log1", interval_s=0.0)


def _rows(store: Store) -> list[dict[str, object]]:
    db = store.topology.database
    return store.query(f"SELECT trace_id, group_id, question, similarity FROM {db}.trace_questions ORDER BY trace_id")


def test_ranges_are_grouped_once_and_groups_survive_a_restart(store: Store, tmp_path: Path) -> None:
    stage = _stage(store, tmp_path)
    stage.recover(None, 0)
    silent = Trace(9)
    silent.span("request", **{"ragmon.stage": "request"})
    first = _send(
        store, [ragmon_trace(1, "How do I reset my password?"), ragmon_trace(2, "password reset"), silent], 10
    )
    stage.seen(first, first)
    assert stage.group(first)
    rows = _rows(store)
    assert [r["trace_id"] for r in rows] == [f"{n:032x}" for n in (1, 2)]
    assert rows[0]["group_id"] == rows[1]["group_id"] and rows[0]["similarity"] == 1.0
    assert stage.counts["traces_without_question"] == 1 and stage.counts["traces_grouped"] == 2
    assert not stage.group(first)  # nothing new
    (group,) = store.question_groups_held(10)
    assert (group["group_id"], group["label"], group["members"]) == (
        rows[0]["group_id"],
        "How do I reset my password?",
        2,
    )
    # a restart: a new grouper holds the stored group, and a paraphrase joins it
    restarted = _stage(store, tmp_path)
    restarted.recover(SEQ.position(first), first)
    assert restarted.counts["groups_loaded"] == 1 and restarted.grouped_to == first
    second = _send(store, [ragmon_trace(3, "Reset password?!")], 20)
    assert restarted.group(second)
    assert _rows(store)[-1]["group_id"] == rows[0]["group_id"]


def test_a_journaled_range_is_grouped_again_after_a_crash_without_a_second_row(store: Store, tmp_path: Path) -> None:
    stage = _stage(store, tmp_path)
    stage.recover(None, 0)
    seq = _send(store, [ragmon_trace(4, "Where is my order?"), ragmon_trace(5, "Can I get a refund?")], 30)
    assert stage.group(seq)
    before = _rows(store)
    # killed after its inserts, before the cursor moved: the journal names the range, the cursor is behind it
    stage.cursor.save(Position(0, 0))
    stage.journal.save(SEQ.position(seq))
    again = _stage(store, tmp_path)
    again.recover(SEQ.position(seq), 0)
    assert again.grouped_to == seq and again.journal.load() is None
    assert _rows(store) == before  # the same token: the store dropped the repeat


def _until(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        time.sleep(0.05)


def test_on_its_own_thread_a_refused_write_is_retried_with_its_rows_and_token(store: Store, tmp_path: Path) -> None:
    health = HealthRegistry()
    component = health.component("questions", stall_after_s=120.0)
    stage = _stage(store, tmp_path)
    stage.recover(None, 0)
    thread = QuestionThread(stage, health=component).start()
    db = store.topology.database
    # the store refuses every trace_questions insert (a real server-side refusal, not a fake): the groups are
    # written, the traces' rows are not
    store.backend.execute(f"ALTER TABLE {db}.trace_questions ADD CONSTRAINT store_down CHECK trace_id = 'none'")
    try:
        seq = _send(store, [ragmon_trace(11, "Where is my parcel?"), ragmon_trace(12, "where is my parcel")], 40)
        stage.seen(seq, seq)
        thread.offer(seq, seq)  # returns at once: the sampling loop never waits for grouping
        _until(lambda: stage.failed_pending and component.snapshot().state == State.FAILING, "the write failing")
        assert _rows(store) == [] and stage.grouped_to != seq
        store.backend.execute(f"ALTER TABLE {db}.trace_questions DROP CONSTRAINT store_down")
        _until(lambda: stage.grouped_to == seq, "the range grouped once the store takes writes again")
        _until(lambda: component.snapshot().state == State.OK, "the component healthy again")
    finally:
        assert thread.stop()
    rows = _rows(store)
    assert [r["trace_id"] for r in rows] == [f"{n:032x}" for n in (11, 12)]
    assert rows[0]["group_id"] == rows[1]["group_id"]
    # grouped once: the retry wrote the rows the first try made, it did not group the range again
    assert stage.counts["traces_grouped"] == 2 and thread.errors >= 1
    (group,) = store.question_groups_held(10)
    assert group["members"] == 2


def test_a_stage_too_far_behind_gives_the_oldest_ranges_up_and_counts_them(store: Store, tmp_path: Path) -> None:
    grouper = QuestionGrouper(LexicalEncoder())
    stage = QuestionStage(store, grouper, tmp_path, SEQ, "log1", interval_s=0.0, ranges_per_run=1,
                          max_behind_ranges=2)  # fmt: skip
    stage.recover(None, 0)
    thread = QuestionThread(stage)  # driven by hand, one step at a time
    ends = []
    for i in range(4):
        ends.append(_send(store, [ragmon_trace(20 + i, f"Question number {'abcd'[i]}?")], 50 + i))
        stage.seen(ends[-1], ends[-1])
    thread.offer(ends[-1], ends[-1])
    assert thread.run_once()  # four behind, two allowed: the oldest two given up, the third grouped (one per run)
    assert stage.counts["ranges_skipped"] == 2 and stage.grouped_to == ends[2]
    assert thread.run_once() and stage.grouped_to == ends[3]
    assert not thread.run_once()
    assert [r["trace_id"] for r in _rows(store)] == [f"{n:032x}" for n in (22, 23)]
