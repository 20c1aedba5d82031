"""Back-evaluation reads kept traces from a real store: the time window, the feature and eval-run filters, the eval
row ids from span attributes, paging — through the store's read-only query path, as `ragmon backeval` does."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ragmon.judges.types import MetricResult, RagSample, Status
from ragmon.sinks import Store, open_store

from ragmon import attributes as attr
from ragmon.evaluation.backeval import score_traces
from ragmon.evaluation.backeval_cli import _store_scores
from ragmon.evaluation.backeval_journal import RunJournal
from ragmon.evaluation.backeval_source import Selection, StoreTraceSource, select_with
from tests.support.span_rows import insert_spans
from tests.support.synth import make_batch

DAY_NS = 86400 * 10**9
METRICS = ("faithfulness", "context_relevance")


@pytest.fixture
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    opened = open_store(chdb_engine_dir, database=f"backeval_{uuid.uuid4().hex[:8]}")
    yield opened
    opened.close()


def trace(i: int) -> str:
    return f"{i:032x}"


def seed(store: Store) -> None:
    now = time.time_ns()
    layout = [  # (trace, feature, started, eval row id)
        (1, "docs-qa", now - 3600 * 10**9, "q01"),
        (2, "docs-qa", now - 7200 * 10**9, "q02"),
        (3, "billing", now - 60 * 10**9, ""),
        (4, "docs-qa", now - 10 * DAY_NS, "q04"),  # outside a 7-day window
    ]
    store.insert_payloads(
        {
            "tenant": "default",
            "trace_id": trace(i),
            "feature": feature,
            "start_time": started,
            "question": f"question {i}?",
            "answer": f"answer {i}.",
            "passages": [{"id": f"d{i}", "score": 0.5, "text": f"passage {i}"}],
            "sampling_reason": "baseline",
            "inclusion_probability": 0.25,
        }
        for i, feature, started, _ in layout
    )
    batch = make_batch(len(layout), seed=3, start_ns=now - DAY_NS)
    for row, (i, feature, _, row_id) in enumerate(layout):
        batch.tenant[row], batch.trace_id[row], batch.feature[row] = "default", trace(i), feature
        batch.attributes[row] = (
            {attr.RAGMON_EVAL_RUN: "nightly", attr.RAGMON_EVAL_ROW_ID: row_id} if row_id else {"other": "x"}
        )
    insert_spans(store, batch)


def test_selection_filters_and_row_ids(store: Store) -> None:
    seed(store)
    source = StoreTraceSource(store, owns_store=False)
    db = store.topology.database
    week = Selection(since_s=7 * 86400, database=db)
    traces = source.select(week)
    # Oldest first, the 10-day-old trace left out.
    assert [t.trace_id for t in traces] == [trace(2), trace(1), trace(3)]
    first = {t.trace_id: t for t in traces}[trace(1)]
    assert (first.question, first.answer, first.passages) == ("question 1?", "answer 1.", ("passage 1",))
    assert (first.feature, first.sampling_reason, first.inclusion_probability) == ("docs-qa", "baseline", 0.25)
    assert {t.trace_id: t.eval_row_id for t in traces} == {trace(1): "q01", trace(2): "q02", trace(3): ""}

    assert [t.trace_id for t in source.select(Selection(since_s=7 * 86400, feature="billing", database=db))] == [
        trace(3)
    ]
    nightly = source.select(Selection(since_s=30 * 86400, eval_run="nightly", database=db))
    assert sorted(t.eval_row_id for t in nightly) == ["q01", "q02", "q04"]
    assert source.select(Selection(since_s=30 * 86400, eval_run="it's-none", database=db)) == []  # quoted safely
    assert len(source.select(Selection(since_s=30 * 86400, limit=2, database=db))) == 2


def test_pages_cover_the_selection_once(store: Store) -> None:
    seed(store)
    queries: list[str] = []

    def query(sql: str, params: dict[str, object]) -> list[dict[str, object]]:
        queries.append(sql)
        return store.query(sql, params)

    selection = Selection(since_s=30 * 86400, database=store.topology.database)
    paged = select_with(query, selection, page_rows=1)
    assert [t.trace_id for t in paged] == [trace(4), trace(2), trace(1), trace(3)]
    assert sum("OFFSET" in q for q in queries) == 5  # four full pages of one, then an empty one


def test_selection_is_production_unless_eval_traffic_is_asked_for(store: Store) -> None:
    """From schema v7 a payload carries its trace's eval run: a back-evaluation of production quality leaves the
    eval runs' traces out; `--eval` takes every run's, `--eval-run NAME` one run's."""
    now = time.time_ns()
    store.insert_payloads(
        {"tenant": "default", "trace_id": trace(i), "feature": "docs-qa", "start_time": now - i * 10**9}
        | {"question": "q?", "answer": "a.", "sampling_reason": "baseline", "eval_run": run}
        for i, run in ((1, ""), (2, "nightly"), (3, "weekly"), (4, ""))
    )
    source = StoreTraceSource(store, owns_store=False)
    db = store.topology.database
    production = source.select(Selection(since_s=86400, database=db))
    assert sorted(t.trace_id for t in production) == [trace(1), trace(4)]
    evaluation = source.select(Selection(since_s=86400, evaluation=True, database=db))
    assert sorted(t.trace_id for t in evaluation) == [trace(2), trace(3)]
    assert {t.trace_id: t.eval_run for t in [*production, *evaluation]} == {
        trace(1): "",
        trace(2): "nightly",
        trace(3): "weekly",
        trace(4): "",
    }


class _ConstantJudge:
    name = "constant"
    version = "constant:1"
    faithfulness_threshold = 0.5

    async def score(self, metric: str, sample: RagSample) -> MetricResult:
        return MetricResult(metric=metric, value=1.0, status=Status.OK)

    async def aclose(self) -> None:
        return None


def test_backeval_scores_carry_their_traces_eval_run_into_the_store(store: Store, tmp_path: Path) -> None:
    """The rows `ragmon backeval` writes back carry the trace's eval run, so a re-judged eval run stays apart from
    production after its payloads expire; a payload copied before schema v7 (eval_run '') selected by its spans'
    run marker takes the run's name from the selection."""
    seed(store)  # traces 1, 2, 4: payloads without eval_run, spans of `nightly`; trace 3: production
    store.insert_payloads(
        [{"tenant": "default", "trace_id": trace(5), "start_time": time.time_ns(), "eval_run": "weekly"}]
    )
    source = StoreTraceSource(store, owns_store=False)
    db = store.topology.database
    traces = [
        *source.select(Selection(since_s=30 * 86400, eval_run="nightly", database=db)),
        *source.select(Selection(since_s=86400, database=db)),
        *source.select(Selection(since_s=86400, evaluation=True, database=db)),
    ]
    journal = RunJournal(tmp_path / "rejudge.journal.jsonl", run="rejudge", judge_version="constant:1", metrics=METRICS)
    journal.open()
    try:
        asyncio.run(score_traces(traces, _ConstantJudge(), journal, run_name="rejudge", metrics=METRICS))
        _store_scores(store, list(journal.state.entries.values()))
    finally:
        journal.close()
    rows = store.query(
        f"SELECT trace_id, eval_run FROM {db}.scores WHERE run_name = 'rejudge' AND metric = 'faithfulness'"
    )
    assert {r["trace_id"]: r["eval_run"] for r in rows} == {
        trace(1): "nightly",
        trace(2): "nightly",
        trace(4): "nightly",
        trace(3): "",
        trace(5): "weekly",
    }


def test_backeval_scores_carry_their_traces_release_into_the_store(store: Store, tmp_path: Path) -> None:
    """The rows `ragmon backeval` writes back carry the release of the trace they re-judge (its payload's), as the
    online judge's do: a release judged again compares with the online scores of the same release."""
    now = time.time_ns()
    store.insert_payloads(
        [
            {"tenant": "default", "trace_id": trace(1), "start_time": now, "question": "q?", "release": "2.3.1"},
            {"tenant": "default", "trace_id": trace(2), "start_time": now, "question": "q?"},
        ]
    )
    traces = StoreTraceSource(store, owns_store=False).select(
        Selection(since_s=86400, database=store.topology.database)
    )
    journal = RunJournal(tmp_path / "rejudge.journal.jsonl", run="rejudge", judge_version="constant:1", metrics=METRICS)
    journal.open()
    try:
        asyncio.run(score_traces(traces, _ConstantJudge(), journal, run_name="rejudge", metrics=METRICS))
        _store_scores(store, list(journal.state.entries.values()))
    finally:
        journal.close()
    rows = store.query(
        f"SELECT trace_id, release FROM {store.topology.database}.scores WHERE run_name = 'rejudge'"
        " AND metric = 'faithfulness'"
    )
    assert {r["trace_id"]: r["release"] for r in rows} == {trace(1): "2.3.1", trace(2): ""}
