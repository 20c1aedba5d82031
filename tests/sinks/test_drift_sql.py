"""The drift reads (`ragmon.sinks.drift_sql`) carry every value as a bound parameter: a tenant, feature, stage,
metric or eval run name that looks like SQL reaches the engine as a value and selects exactly its own rows, and an
unknown signal is a KeyError rather than a column name in the text — at the source, which finds no such signal, and
in the reads, which write only the tables' own column names. (What the reads compute is checked against an oracle
in tests/drift/test_store_source.py.)"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ragmon.sinks import Store, Topology
from ragmon.sinks.drift_sql import DriftSql, Query, Scope, production_minutes
from ragmon.sinks.traffic import EVALUATION, PRODUCTION, Traffic

from ragmon.drift import SampleQuery, ScopeKey, SeriesQuery, StoreSignalSource
from tests.support.span_rows import insert_spans
from tests.support.synth import make_batch

HOSTILE_FEATURE = "qa' OR 1 = 1 OR feature = '"
HOSTILE_RUN = "nightly'); DROP TABLE spans; --"
HOSTILE_TENANT = "acme\\' OR '1"


def _every_query(sql: DriftSql, scope: Scope) -> dict[str, Query]:
    window = {"start_ns": 0, "end_ns": 60 * 10**9}
    minutes = {"start_s": 0, "end_s": 60, "step_s": 60}
    return {
        "judged_scopes": sql.judged_scopes("faithfulness", **window),
        "rollup_scopes": sql.rollup_scopes(start_s=0, end_s=60),
        "span_scopes": sql.span_scopes("top1_score", **window),
        "sample": sql.sample("duration_ms", scope, **window, max_values=10),
        "rollup_quantile_series": sql.rollup_quantile_series(0.95, scope, **minutes),
        "rollup_ratio_series": sql.rollup_ratio_series(("input_tokens", "output_tokens"), "spans", scope, **minutes),
        "sla_series": sql.sla_series(scope, **window, step_ns=60 * 10**9, step_s=60.0, sla_ms=500.0),
        "span_mean_series": sql.span_mean_series("similarity_gap", scope, **window, step_ns=60 * 10**9),
        "worst_examples": sql.worst_examples(
            ("norm_deviation",), scope, **window, step_ns=60 * 10**9, examples=3, finite="norm_deviation"
        ),
        "failed_examples": sql.failed_examples(scope, **window, step_ns=60 * 10**9, examples=3),
        "judged_scores": sql.judged_scores(
            "relevance", tenant=scope.tenant, feature=scope.feature, start_ns=0, end_ns=60 * 10**9
        ),
    }


def test_no_value_is_part_of_the_sql_text() -> None:
    scope = Scope(HOSTILE_TENANT, HOSTILE_FEATURE, "rerank' --")
    for name, (text, params) in _every_query(DriftSql(Topology("db"), Traffic.of(eval_run=HOSTILE_RUN)), scope).items():
        for value in (HOSTILE_TENANT, HOSTILE_FEATURE, "rerank' --", HOSTILE_RUN):
            assert value not in text, name
        assert params["eval_run"] == HOSTILE_RUN, name
        if name not in ("judged_scopes", "rollup_scopes", "span_scopes"):
            assert params["tenant"] == HOSTILE_TENANT and params["feature"] == HOSTILE_FEATURE, name
    for traffic in (PRODUCTION, EVALUATION):  # neither has a name to bind
        queries = _every_query(DriftSql(Topology(), traffic), scope)
        assert all("eval_run" not in params for _, params in queries.values())
    assert production_minutes() == ("SELECT uniqExact(minute) AS minutes FROM spans_1m WHERE eval_run = ''", {})


@pytest.mark.parametrize("signal", ["top1_score; DROP TABLE spans", "duration_ms"])
def test_an_unknown_signal_is_a_key_error_not_a_column(store: Store, signal: str) -> None:
    source, scope = StoreSignalSource(store), ScopeKey("acme", "qa", "search")
    with pytest.raises(KeyError):
        source.scopes(signal, 0, 60)
    with pytest.raises(KeyError):
        source.sample(SampleQuery(signal, scope, 0, 60))
    with pytest.raises(KeyError):
        source.series(SeriesQuery(signal, scope, 0, 60, 60))


@pytest.mark.parametrize("column", ["top1_score; DROP TABLE spans", "top1_score)) OR 1 = 1 --", "errors"])
def test_a_name_that_is_not_a_column_of_spans_is_a_key_error(column: str) -> None:
    sql, scope, window = DriftSql(Topology()), Scope("acme", "qa", "search"), {"start_ns": 0, "end_ns": 1}
    with pytest.raises(KeyError):
        sql.span_scopes(column, **window)
    with pytest.raises(KeyError):
        sql.sample(column, scope, **window, max_values=1)
    with pytest.raises(KeyError):
        sql.span_mean_series(column, scope, **window, step_ns=1)
    with pytest.raises(KeyError):
        sql.worst_examples(("duration_ms", column), scope, **window, step_ns=1, examples=1)
    with pytest.raises(KeyError):
        sql.worst_examples(("duration_ms",), scope, **window, step_ns=1, examples=1, finite=column)


@pytest.mark.parametrize("column", ["errors; DROP TABLE spans", "duration_ms", "duration_q"])
def test_a_name_that_is_not_a_sum_of_the_rollup_is_a_key_error(column: str) -> None:
    sql, scope = DriftSql(Topology()), Scope("acme", "qa", "search")
    with pytest.raises(KeyError):
        sql.rollup_ratio_series(("errors", column), "spans", scope, **_MINUTES)
    with pytest.raises(KeyError):
        sql.rollup_ratio_series(("errors",), column, scope, **_MINUTES)
    with pytest.raises(ValueError):  # a level the rollup's sketches do not keep
        sql.rollup_quantile_series(0.9, scope, **_MINUTES)


_MINUTES = {"start_s": 0, "end_s": 60, "step_s": 60}


def _read(store: Store, query: Query) -> list[dict[str, Any]]:
    return store.read(*query)


def test_hostile_names_select_their_own_rows(store: Store) -> None:
    """Spans and scores of a feature and an eval run whose names are SQL fragments: each read finds them under
    their own names, and production (another feature, no run) stays apart."""
    start_s = (int(time.time()) // 3600 - 1) * 3600
    start_ns = start_s * 10**9
    run = make_batch(6, seed=1, start_ns=start_ns, spread_s=300, features=(HOSTILE_FEATURE,), eval_run=HOSTILE_RUN)
    production = make_batch(4, seed=2, start_ns=start_ns, spread_s=300, features=("qa",))
    for batch in (run, production):
        batch.ingest_seq = [1] * len(batch)
        insert_spans(store, batch)
    store.roll_up(1, 1)
    window = {"start_ns": start_ns, "end_ns": (start_s + 600) * 10**9}
    minutes = {"start_s": start_s, "end_s": start_s + 600}
    scope = Scope("acme", HOSTILE_FEATURE, "request")
    of_run, of_production = DriftSql(store.topology, Traffic.of(eval_run=HOSTILE_RUN)), DriftSql(store.topology)

    assert {r["feature"] for r in _read(store, of_run.rollup_scopes(**minutes))} == {HOSTILE_FEATURE}
    assert {r["feature"] for r in _read(store, of_production.rollup_scopes(**minutes))} == {"qa"}
    assert {r["feature"] for r in _read(store, of_run.span_scopes("top1_score", **window))} == {HOSTILE_FEATURE}
    requests = _read(store, of_run.rollup_quantile_series(0.95, scope, **minutes, step_s=600))
    assert [int(r["count"]) for r in requests] == [6]  # the run's six requests, one window
    assert len(_read(store, of_run.sample("duration_ms", scope, **window, max_values=100))) == 6
    assert _read(store, of_production.sample("duration_ms", scope, **window, max_values=100)) == []

    # a judged trace of the run, found through its payload's eval_run
    trace_id = run.trace_id[run.stage.index("request")]
    now = datetime.now(UTC) - timedelta(seconds=30)
    store.insert_payloads(
        [
            {
                "tenant": "acme",
                "trace_id": trace_id,
                "feature": HOSTILE_FEATURE,
                "eval_run": HOSTILE_RUN,
                "start_time": now,
                "inclusion_probability": 0.5,
            }
        ]
    )
    score = {"tenant": "acme", "trace_id": trace_id, "feature": HOSTILE_FEATURE, "metric": "faithfulness"}
    score |= {"judge_version": "v1", "status": "ok", "run_name": "", "scored_at": now, "value": 0.25}
    store.insert_scores([score])
    scored = {"start_ns": int((now.timestamp() - 60) * 1e9), "end_ns": int((now.timestamp() + 60) * 1e9)}
    judged = {"tenant": "acme", "feature": HOSTILE_FEATURE, **scored}
    rows = _read(store, of_run.judged_scores("faithfulness", **judged))
    assert [(r["trace_id"], r["value"], r["probability"]) for r in rows] == [(trace_id, 0.25, 0.5)]
    assert _read(store, of_production.judged_scores("faithfulness", **judged)) == []
    assert _read(store, of_run.judged_scopes("faithfulness", **scored)) == [
        {"tenant": "acme", "feature": HOSTILE_FEATURE, "stage": ""}
    ]
