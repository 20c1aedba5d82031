"""The agent's question stage over a real embedded store: each decided range's questions grouped and written once,
groups that keep their ids across a restart, a journaled range grouped again after a crash without a second row,
and traces without a question counted, not written."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ragmon.sinks import Store, envelope, open_store, otlp_views

from ragmon.pipeline.intake import IngestSeq
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
