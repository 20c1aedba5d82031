"""A firing drift alert says where (`ragmon.drift.where.Locator`): the release that came in around the change and the
recurring question its example traces asked — on the embedded store and through a server.

The store holds a day of release 1.4 and, from 20 minutes ago, release 1.5 beside it; `trace_questions` puts the
traces into two question groups. An alert whose examples are 1.5's traces of one group names 1.5 and that question;
one with no new release and examples spread over groups names neither, and says nothing extra.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from ragmon.sinks import Store
from ragmon.sinks.arrow import to_table
from ragmon.sinks.schema import TRACE_QUESTION_COLUMNS, TRACE_QUESTIONS_TABLE, Ddl

from ragmon.drift import AlertRecord, Locator, RuleConfig
from tests.support.span_rows import SpanBatch, insert_spans
from tests.support.synth import make_batch

NOW_S = int(time.time()) // 60 * 60
RESET = "how do I reset my password"
REFUND = "can I get a refund for my order"


def _release(batch: SpanBatch, release: str) -> SpanBatch:
    batch.release.extend([release] * len(batch))
    return batch


def _traces(batch: SpanBatch) -> list[tuple[str, int]]:
    """(trace id, start ns) of each root span."""
    return [(t, s) for t, p, s in zip(batch.trace_id, batch.parent_span_id, batch.start_time, strict=True) if p == ""]


def _questions(store: Store, rows: list[tuple[str, int, str, str]]) -> None:
    """(trace id, start ns, release, question) → trace_questions rows of feature 'support', grouped by question."""
    columns = {name: [] for name, _ in TRACE_QUESTION_COLUMNS}  # type: ignore[var-annotated]
    for trace_id, start_ns, release, question in rows:
        values = {
            "tenant": "acme",
            "trace_id": trace_id,
            "feature": "support",
            "eval_run": "",
            "release": release,
            "environment": "",
            "start_time": start_ns,
            "group_id": "q-reset" if question == RESET else "q-refund",
            "question": question,
            "similarity": 1.0,
            "failed": 0,
            "duration_ms": 10.0,
        }
        for name in columns:
            columns[name].append(values[name])
    store.backend.insert(
        Ddl(store.topology).table(TRACE_QUESTIONS_TABLE), to_table(columns, TRACE_QUESTION_COLUMNS), {}
    )


def _store_with_two_releases(store: Store) -> tuple[list[str], list[str]]:
    """Release 1.4 over the last day, 1.5 beside it over the last 20 minutes; returns 1.5's reset-question traces
    and two of 1.4's traces of the last half hour, one per question."""
    old = _release(
        make_batch(
            400, seed=1, start_ns=(NOW_S - 86_000) * 10**9, spread_s=86_000 - 60, features=("support",), ingest_seq=1
        ),
        "1.4",
    )
    new = _release(
        make_batch(200, seed=2, start_ns=(NOW_S - 1_200) * 10**9, spread_s=1_140, features=("support",), ingest_seq=2),
        "1.5",
    )
    new_traces = _traces(new)
    rows = [(t, s, "1.4", RESET if i % 2 else REFUND) for i, (t, s) in enumerate(_traces(old))]
    recent = {q: t for t, s, _, q in rows if s >= (NOW_S - 1_800) * 10**9}
    assert len(recent) == 2
    rows += [(t, s, "1.5", RESET if i % 3 == 0 else REFUND) for i, (t, s) in enumerate(new_traces)]
    # the paragraph each answer was built on: 1.5's new chunking finds p40 instead of p12 for the reset question
    question_of = {t: q for t, _, _, q in rows}
    for batch, reset_paragraph in ((old, "handbook.md#p12"), (new, "handbook.md#p40")):
        batch.retrieved_sources.extend(
            [reset_paragraph if question_of[trace_id] == RESET else "refunds.md#p3"] * len(ids)
            for trace_id, ids in zip(batch.trace_id, batch.retrieved_ids, strict=True)
        )
    insert_spans(store, old)
    insert_spans(store, new)
    store.roll_up(1, 2)
    _questions(store, rows)
    reset_new = [t for i, (t, _) in enumerate(new_traces) if i % 3 == 0]
    return reset_new, list(recent.values())


def _alert(trace_ids: list[str]) -> AlertRecord:
    return AlertRecord(
        alert_id="a1",
        state="firing",
        rule="faithfulness_drop",
        severity="warning",
        tenant="acme",
        feature="support",
        stage="",
        metric="faithfulness",
        detector="cusum",
        fired_at_s=float(NOW_S),
        detected_at_s=float(NOW_S),
        value=5.0,
        threshold=4.0,
        message="faithfulness fell from 0.91 to 0.62.",
        trace_ids=tuple(trace_ids),
    )


RULE = RuleConfig.model_validate(
    {"name": "faithfulness_drop", "signal": "faithfulness", "detector": {"type": "cusum"}, "baseline_minutes": 360}
)


def test_an_alert_names_the_new_release_and_the_question_its_examples_asked(store: Store) -> None:
    reset_new, _ = _store_with_two_releases(store)
    placed = Locator(store)(_alert(reset_new[:3]), RULE)
    assert placed.labels["release"] == "1.5"
    assert placed.labels["question_group"] == "q-reset"
    assert placed.labels["question"] == RESET
    assert placed.message.startswith("faithfulness fell from 0.91 to 0.62. Where: release 1.5 (first seen ")
    assert f"question «{RESET}» (3 of 3 example traces; " in placed.message
    assert placed.labels["documents"] == "handbook.md#p12"
    assert placed.message.endswith("; no longer retrieved for it since 1.4: handbook.md#p12 (100% → 0%).")
    first_seen = datetime.strptime(placed.message.split("first seen ")[1][:16], "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
    assert NOW_S - 1_200 - 60 <= first_seen.timestamp() <= NOW_S - 1_200 + 60


def test_no_new_release_and_scattered_examples_name_nothing(store: Store) -> None:
    _, old_recent = _store_with_two_releases(store)
    rule = RULE.model_copy(update={"baseline_minutes": 10, "baseline_lag_minutes": 5})  # 1.5 came before it began
    alert = _alert(old_recent[:2])
    placed = Locator(store)(alert, rule)
    assert "release" not in placed.labels
    # two examples, one per question: no group holds both
    assert "question_group" not in placed.labels
    assert placed == alert


def test_a_resolved_record_or_one_placed_already_is_left_as_it_is(store: Store) -> None:
    reset_new, _ = _store_with_two_releases(store)
    from dataclasses import replace

    resolved = replace(_alert(reset_new[:3]), state="resolved")
    assert Locator(store)(resolved, RULE) is resolved
    canary = replace(_alert(reset_new[:3]), labels={"release": "1.5", "question_group": "q-x"})
    assert Locator(store)(canary, RULE) is canary
