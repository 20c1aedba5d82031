"""Back-evaluation reads kept traces from a real store: the time window, the feature and eval-run filters, the eval
row ids from span attributes, paging — through the store's read-only query path, as `ragmon backeval` does."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ragmon.sinks import Store, open_store

from ragmon import attributes as attr
from ragmon.evaluation.backeval_source import Selection, StoreTraceSource, select_with
from tests.support.span_rows import insert_spans
from tests.support.synth import make_batch

DAY_NS = 86400 * 10**9


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
