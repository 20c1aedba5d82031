"""Inserts through both backends: round trip, deduplication of re-sent batches, verbatim strings, typed errors."""

from __future__ import annotations

import math

import pytest
from ragmon.sinks import Store, StoreError

from tests.support.span_rows import SpanBatch, insert_spans
from tests.support.synth import make_batch

HOSTILE = "x'); DROP TABLE spans; --"


def _count(store: Store, table: str = "spans") -> int:
    db = store.topology.database
    return store.query(f"SELECT count() AS n FROM {db}.{table}")[0]["n"]


def test_round_trip_keeps_every_value(store: Store) -> None:
    batch = make_batch(20, seed=1)
    insert_spans(store, batch)
    db = store.topology.database
    rows = store.query(
        f"SELECT span_id, toUnixTimestamp64Nano(start_time) AS ns, duration_ms, cost_usd, ttft_ms, retrieved_ids,"
        f" retrieved_scores, attributes, parent_span_id FROM {db}.spans ORDER BY span_id"
    )
    expected = sorted(range(len(batch)), key=lambda i: batch.span_id[i])
    assert [r["span_id"] for r in rows] == [batch.span_id[i] for i in expected]
    for row, i in zip(rows, expected, strict=True):
        assert row["ns"] == batch.start_time[i]
        assert row["duration_ms"] == batch.duration_ms[i]
        assert row["cost_usd"] == batch.cost_usd[i]
        assert row["parent_span_id"] == batch.parent_span_id[i]
        if batch.ttft_ms[i] is None:
            assert row["ttft_ms"] is None
        else:
            assert math.isclose(row["ttft_ms"], batch.ttft_ms[i], rel_tol=1e-6)  # Float32 column
        assert row["retrieved_ids"] == batch.retrieved_ids[i]
        assert row["retrieved_scores"] == pytest.approx(batch.retrieved_scores[i], rel=1e-6)
        assert row["attributes"] == batch.attributes[i]


def test_resent_batch_is_invisible_in_spans_and_report(store: Store) -> None:
    batch = make_batch(300, seed=2, ingest_seq=1)
    token = insert_spans(store, batch)
    assert insert_spans(store, batch) == token  # the same batch derives the same token
    insert_spans(store, batch)
    assert _count(store) == len(batch)
    store.roll_up(1, 1)
    before = store.report(7200)
    assert sum(r["requests"] for r in before) == len(batch)
    store.roll_up(1, 1)  # the same range again (an agent that crashed before saving its cursor): dropped
    assert store.report(7200) == before


def test_distinct_batches_all_count(store: Store) -> None:
    first, second = make_batch(50, seed=3, ingest_seq=1), make_batch(50, seed=4, ingest_seq=2)
    insert_spans(store, first)
    store.roll_up(1, 1)
    insert_spans(store, second)
    store.roll_up(2, 2)
    assert _count(store) == len(first) + len(second)
    assert sum(r["requests"] for r in store.report(7200)) == len(first) + len(second)


def test_caller_token_wins(store: Store) -> None:
    """A write-ahead log can pass its own position as the token; a replay with that token is dropped."""
    batch = make_batch(10, seed=5)
    insert_spans(store, batch, dedup_token="wal:7:0")
    insert_spans(store, batch.take(list(range(5))), dedup_token="wal:7:0")
    assert _count(store) == len(batch)


def test_hostile_strings_are_stored_and_queried_verbatim(store: Store) -> None:
    batch = make_batch(4, seed=6, features=(HOSTILE,), tenants=(HOSTILE,))
    batch.attributes[0] = {HOSTILE: "a\tb\nc\\d"}
    insert_spans(store, batch)
    store.roll_up(0, 0)
    db = store.topology.database
    rows = store.query(
        f"SELECT count() AS n FROM {db}.spans WHERE feature = {{f:String}} AND tenant = {{t:String}}",
        {"f": HOSTILE, "t": HOSTILE},
    )
    assert rows == [{"n": len(batch)}]
    attrs = store.query(f"SELECT attributes FROM {db}.spans WHERE span_id = {{s:String}}", {"s": batch.span_id[0]})
    assert attrs[0]["attributes"] == {HOSTILE: "a\tb\nc\\d"}
    report = store.report(7200, feature=HOSTILE, tenant=HOSTILE)
    assert {r["feature"] for r in report} == {HOSTILE}
    assert sum(r["requests"] for r in report) == len(batch)
    assert _count(store) == len(batch)  # still there: nothing was dropped


def test_empty_batch_is_a_no_op(store: Store) -> None:
    assert insert_spans(store, SpanBatch()) == ""
    assert _count(store) == 0


def test_payloads_scores_alerts(store: Store) -> None:
    db = store.topology.database
    payload = {
        "tenant": "acme",
        "trace_id": "a" * 32,
        "feature": "support",
        "start_time": make_batch(1).start_time[0],
        "question": "What is the refund window?",
        "answer": "30 days.",
        "passages": [
            {"id": "doc-1", "score": 0.9, "text": "Refunds within 30 days."},
            {"id": "doc-2", "score": None, "text": HOSTILE},
        ],
        "tool_calls": [{"name": "lookup", "arguments": '{"id": 1}', "result": "ok"}],
        "sampling_reason": "slow",
        "inclusion_probability": 1.0,
    }
    store.insert_payloads([payload])
    store.insert_payloads([payload])  # re-sent: dropped
    rows = store.query(
        f"SELECT trace_id, passages, tool_calls, sampling_reason, inclusion_probability FROM {db}.payloads"
    )
    assert len(rows) == 1
    assert rows[0]["passages"][1] == {"id": "doc-2", "score": None, "text": HOSTILE}
    assert rows[0]["tool_calls"] == [{"name": "lookup", "arguments": '{"id": 1}', "result": "ok"}]

    score = {
        "tenant": "acme",
        "trace_id": "a" * 32,
        "metric": "faithfulness",
        "judge_version": "v1",
        "value": None,
        "status": "error",
        "explanation": "judge reply unparseable",
        "claims": [{"claim": "30 days", "verdict": "supported", "reason": "passage doc-1"}],
        "judge_model": "gpt-4o-mini",
        "prompt_version": "p3",
        "input_tokens": 812,
        "output_tokens": 40,
        "cost_usd": 0.00014,
    }
    store.insert_scores([score, {**score, "metric": "answer_relevance", "value": 0.75, "status": "ok"}])
    scores = store.query(f"SELECT metric, value, status, claims FROM {db}.scores ORDER BY metric")
    assert [(s["metric"], s["value"], s["status"]) for s in scores] == [
        ("answer_relevance", 0.75, "ok"),
        ("faithfulness", None, "error"),  # NULL, never a silent 0
    ]
    store.insert_alerts([{"tenant": "acme", "alert_id": "al-1", "rule": "p95", "state": "firing", "value": 2100.0}])
    assert _count(store, "alerts") == 1


def test_unknown_row_key_is_a_permanent_error(store: Store) -> None:
    with pytest.raises(StoreError) as info:
        store.insert_scores([{"tenant": "acme", "metrik": "typo"}])
    assert info.value.retryable is False
