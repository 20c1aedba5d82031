"""Evaluation traffic apart from production in the store (schema v7): the report reads production unless asked for
an eval run (or every one), per trace and through the hourly rollup; a v6 store migrates with its rows as
production and keeps eval minutes apart from then on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from ragmon.sinks import Retention, Store, Topology, open_store
from ragmon.sinks.arrow import to_table
from ragmon.sinks.chdb_backend import ChdbBackend
from ragmon.sinks.migrations import migrations
from ragmon.sinks.schema import ROLLUP_ORDER, SAMPLING_ORDER, SCHEMA_VERSION, SCORE_COLUMNS
from ragmon.sinks.traffic import EVALUATION, PRODUCTION, Traffic

from ragmon.model import SPAN_COLUMNS
from tests.support.span_rows import SpanBatch, insert_spans
from tests.support.synth import make_batch


def _requests(report: list[dict[str, Any]], stage: str = "request") -> int:
    return sum(row["requests"] for row in report if row["stage"] == stage)


def _traffic_mix(start_ns: int) -> tuple[SpanBatch, SpanBatch, SpanBatch]:
    production = make_batch(30, seed=1, start_ns=start_ns, features=("qa",), error_rate=0.0)
    nightly = make_batch(20, seed=2, start_ns=start_ns, features=("qa",), eval_run="nightly")
    # Another service's spans in an eval run's trace come without the marker: only the root has it here, and the
    # whole trace still counts as the run's.
    weekly = make_batch(10, seed=3, start_ns=start_ns, features=("qa",), eval_run="weekly")
    weekly.eval_run = ["weekly" if stage == "request" else "" for stage in weekly.stage]
    return production, nightly, weekly


@pytest.mark.parametrize("since_s", [1800, 4 * 3600])  # edge minutes only, and whole hours from `spans_1h`
def test_the_report_reads_production_unless_asked(store: Store, since_s: int) -> None:
    now_s = int(time.time())
    start_s = now_s // 3600 * 3600 - 2 * 3600 if since_s > 3600 else now_s // 60 * 60 - 1200
    for batch in _traffic_mix(start_s * 10**9):
        insert_spans(store, batch)
    store.roll_up(0, 0)

    production = store.report(since_s)
    assert store.report(since_s, traffic=PRODUCTION) == production
    assert _requests(production) == 30 and _requests(production, "search") == 30
    nightly = store.report(since_s, traffic=Traffic.of(eval_run="nightly"))
    assert _requests(nightly) == 20 and _requests(nightly, "search") == 20
    weekly = store.report(since_s, traffic=Traffic.of(eval_run="weekly"))
    assert _requests(weekly) == 10 and _requests(weekly, "search") == 10  # the unmarked spans came along
    assert _requests(store.report(since_s, traffic=EVALUATION), "generate") == 30
    assert store.report(since_s, traffic=Traffic.of(eval_run="no-such-run")) == []


def test_quality_and_kept_share_read_production_unless_asked(store: Store) -> None:
    """Scores written without an eval_run (as before schema v9: they read '') are found through their payloads."""
    from datetime import UTC, datetime, timedelta

    from ragmon.sinks.kept_share import kept_share_sql, summarise

    now = datetime.now(UTC) - timedelta(minutes=1)  # inside the window, which ends at a whole second
    payload = {"feature": "qa", "start_time": now, "question": "q", "answer": "a", "passages": []}
    payload |= {"sampling_reason": "baseline", "sampling_reasons": ["baseline"], "inclusion_probability": 1.0}
    store.insert_payloads(
        [
            {**payload, "tenant": "acme", "trace_id": "a" * 32, "eval_run": ""},
            {**payload, "tenant": "acme", "trace_id": "b" * 32, "eval_run": "nightly"},
        ]
    )
    score = {"tenant": "acme", "feature": "qa", "metric": "faithfulness", "judge_version": "v1", "status": "ok"}
    score |= {"run_name": "", "scored_at": now, "inclusion_probability": 1.0}
    store.insert_scores([{**score, "trace_id": "a" * 32, "value": 1.0}, {**score, "trace_id": "b" * 32, "value": 0.0}])
    means = {
        name: [row["kept"]["mean"] for row in store.quality(3600, traffic=traffic)]
        for name, traffic in (("production", PRODUCTION), ("nightly", Traffic.of(eval_run="nightly")))
    }
    assert means == {"production": [1.0], "nightly": [0.0]}

    minute = datetime.fromtimestamp(int(time.time()) // 60 * 60, UTC)
    counts = {"minute": minute, "tenant": "acme", "feature": "qa", "outcome": "keep", "reason": "baseline"}
    store.insert_sampling_counts(
        [{**counts, "eval_run": "", "traces": 3}, {**counts, "eval_run": "nightly", "traces": 5}]
    )
    end_s = int(time.time()) + 60
    decided = {
        name: summarise(store.query(*kept_share_sql(end_s - 3600, end_s, traffic=traffic)))["decided"]
        for name, traffic in (("production", PRODUCTION), ("evaluation", EVALUATION))
    }
    assert decided == {"production": 3, "evaluation": 5}


def test_an_eval_runs_scores_stay_apart_after_its_payloads_expired(store: Store) -> None:
    """Issue 20: payloads keep 14 days, scores 180. A score carries its trace's eval run (schema v9), so with no
    payload left it still counts under its run — in the report's quality and the drift reads — never as production's."""
    from datetime import UTC, datetime, timedelta

    from ragmon.sinks.drift_sql import DriftSql

    now = datetime.now(UTC) - timedelta(minutes=1)
    score = {"tenant": "acme", "feature": "qa", "metric": "faithfulness", "judge_version": "v1", "status": "ok"}
    score |= {"run_name": "", "scored_at": now, "inclusion_probability": 1.0}
    store.insert_scores(
        [
            {**score, "trace_id": "a" * 32, "eval_run": "", "value": 1.0},
            {**score, "trace_id": "b" * 32, "eval_run": "nightly", "value": 0.0},
            {**score, "trace_id": "c" * 32, "eval_run": "weekly", "value": 0.5},
        ]
    )
    assert store.query(f"SELECT count() AS n FROM {store.topology.database}.payloads") == [{"n": 0}]
    traffics = {
        "production": PRODUCTION,
        "nightly": Traffic.of(eval_run="nightly"),
        "evaluation": EVALUATION,
        "none": Traffic.of(eval_run="no-such-run"),
    }
    means = {name: [row["kept"]["mean"] for row in store.quality(3600, traffic=t)] for name, t in traffics.items()}
    assert means == {"production": [1.0], "nightly": [0.0], "evaluation": [0.25], "none": []}

    scored = {"start_ns": int((now.timestamp() - 60) * 1e9), "end_ns": int((now.timestamp() + 60) * 1e9)}
    judged = {
        name: [
            row["trace_id"]
            for row in store.read(
                *DriftSql(store.topology, traffic).judged_scores("faithfulness", tenant="acme", feature="qa", **scored)
            )
        ]
        for name, traffic in traffics.items()
    }
    assert {name: sorted(ids) for name, ids in judged.items()} == {
        "production": ["a" * 32],
        "nightly": ["b" * 32],
        "evaluation": ["b" * 32, "c" * 32],
        "none": [],
    }


def test_a_v8_store_migrates_its_scores_as_production_and_keeps_finding_eval_ones_by_payload(
    engine_dir: Path, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime, timedelta

    topology = Topology(database)
    db = database
    monkeypatch.setattr("ragmon.sinks.store.migrations", lambda t, r: migrations(t, r)[:8])
    old = Store(ChdbBackend(engine_dir), topology)
    old.migrate()
    old.backend.execute(f"ALTER TABLE {db}.scores DROP COLUMN eval_run")  # v1 makes it with today's columns
    now = datetime.now(UTC) - timedelta(minutes=1)
    # a v8 agent judged a production trace and an eval run's, whose payload is still there (v8's payload columns)
    for trace_id, eval_run in (("a" * 32, ""), ("b" * 32, "nightly")):
        old.backend.execute(
            f"INSERT INTO {db}.payloads (tenant, trace_id, feature, eval_run, start_time, inclusion_probability)"
            " VALUES ('acme', {trace_id:String}, 'qa', {eval_run:String}, {start:DateTime64(9)}, 1.0)",
            {"trace_id": trace_id, "eval_run": eval_run, "start": now.replace(tzinfo=None)},
        )
    for trace_id, value in (("a" * 32, 1.0), ("b" * 32, 0.0)):
        old.backend.execute(
            f"INSERT INTO {db}.scores (tenant, trace_id, feature, metric, judge_version, value, status, scored_at,"
            " inclusion_probability) VALUES ('acme', {trace_id:String}, 'qa', 'faithfulness', 'v1',"
            " {value:Float64}, 'ok', now64(3) - INTERVAL 1 MINUTE, 1.0)",
            {"trace_id": trace_id, "value": value},
        )
    old.close()
    monkeypatch.undo()

    store = open_store(str(engine_dir), database=database)
    try:
        store.migrate()  # re-running changes nothing
        columns = store.query(
            "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = 'scores' ORDER BY position",
            {"db": db},
        )
        assert [(c["name"], c["type"]) for c in columns] == list(SCORE_COLUMNS)  # the order of a fresh table
        assert store.query(f"SELECT trace_id, eval_run FROM {db}.scores ORDER BY trace_id") == [
            {"trace_id": "a" * 32, "eval_run": ""},
            {"trace_id": "b" * 32, "eval_run": ""},
        ]
        versions = store.query(f"SELECT version FROM {db}.schema_migrations FINAL ORDER BY version")
        assert [r["version"] for r in versions] == list(range(1, SCHEMA_VERSION + 1))  # 9 on, each once
        # the old eval score is still the run's while its payload lasts (the fallback through payloads)
        nightly = Traffic.of(eval_run="nightly")
        means = {
            name: [r["kept"]["mean"] for r in store.quality(3600, traffic=t)]
            for name, t in (("production", PRODUCTION), ("nightly", nightly))
        }
        assert means == {"production": [1.0], "nightly": [0.0]}
    finally:
        store.close()


def test_a_v6_store_migrates_with_its_rows_as_production(
    engine_dir: Path, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topology = Topology(database)
    monkeypatch.setattr("ragmon.sinks.store.migrations", lambda t, r: migrations(t, r)[:6])
    old = Store(ChdbBackend(engine_dir), topology)
    old.migrate()
    db = database
    for table in ("spans", "payloads"):  # v1 makes them with today's columns; a real v6 store had no eval_run
        old.backend.execute(f"ALTER TABLE {db}.{table} DROP COLUMN eval_run")
    v10 = ("release", "environment", "retrieved_sources")  # nor what v10 added
    columns = [(name, kind) for name, kind in SPAN_COLUMNS if name != "eval_run" and name not in v10]
    start_ns = (int(time.time()) // 3600 * 3600 - 2 * 3600) * 10**9
    batch = make_batch(40, seed=11, start_ns=start_ns, features=("qa",))
    old.backend.insert(f"{db}.spans", to_table(batch.columns(), columns), {"optimize_on_insert": 0})
    # v6 rolled up with the agent's SQL of its day: the same aggregation without eval_run
    v1_view = next(s for s in migrations(topology, Retention())[0].statements if "spans_1m_mv" in str(s))
    old.backend.execute(f"INSERT INTO {db}.spans_1m {str(v1_view).split(' AS' + chr(10), 1)[1]}")
    old.backend.execute(
        f"INSERT INTO {db}.sampling_1m (minute, tenant, feature, outcome, reason, traces)"
        " VALUES (toStartOfMinute(now()), 'acme', 'qa', 'keep', 'error', 2)"
    )
    per_stage = "SELECT feature, stage, sum(spans) AS n FROM {db}.{table} GROUP BY feature, stage ORDER BY stage"
    before = old.backend.select(per_stage.format(db=db, table="spans_1m")).to_pylist()
    assert old.backend.select(per_stage.format(db=db, table="spans_1h")).to_pylist() == before
    assert {row["n"] for row in before} == {40}
    old.close()
    monkeypatch.undo()

    store = open_store(str(engine_dir), database=database)
    try:
        report = store.report(4 * 3600)
        # every old row is production ...
        assert [{"feature": r["feature"], "stage": r["stage"], "n": r["requests"]} for r in report] == before
        assert store.report(4 * 3600, traffic=EVALUATION) == []  # ... none is an eval run's
        assert store.query(f"SELECT DISTINCT eval_run FROM {db}.spans") == [{"eval_run": ""}]
        assert store.query(f"SELECT eval_run, sum(traces) AS n FROM {db}.sampling_1m GROUP BY eval_run") == [
            {"eval_run": "", "n": 2}
        ]
        keys = store.query(
            "SELECT name, sorting_key FROM system.tables WHERE database = {db:String}"
            " AND name IN ('spans_1m', 'spans_1h', 'sampling_1m')",
            {"db": db},
        )
        assert {r["name"]: r["sorting_key"] for r in keys} == {
            "spans_1m": ROLLUP_ORDER,
            "spans_1h": ROLLUP_ORDER.replace("minute", "hour"),
            "sampling_1m": SAMPLING_ORDER,
        }
        store.migrate()  # re-running changes nothing

        # From now on an eval run's minutes stay apart, in the minute rollup and through the hourly view.
        later = make_batch(15, seed=12, start_ns=start_ns, features=("qa",), eval_run="nightly", ingest_seq=1)
        insert_spans(store, later)
        store.roll_up(1, 1)  # the new spans only: the old ones were rolled up by v6
        assert store.report(4 * 3600) == report
        assert _requests(store.report(4 * 3600, traffic=Traffic.of(eval_run="nightly"))) == 15
        hours = store.query(f"SELECT eval_run, sum(spans) AS n FROM {db}.spans_1h GROUP BY eval_run ORDER BY eval_run")
        assert hours == [{"eval_run": "", "n": 200}, {"eval_run": "nightly", "n": 75}]
    finally:
        store.close()


def test_the_samplers_recent_p95_figures_are_production_only(store: Store) -> None:
    """What a restarted sampler seeds the request p95 with, and the stage p95 of the opt-in stage rule."""
    start_ns = (int(time.time()) // 60 * 60 - 300) * 10**9
    production = make_batch(20, seed=21, start_ns=start_ns, spread_s=120, features=("qa",), ingest_seq=1)
    slow_run = make_batch(20, seed=22, start_ns=start_ns, spread_s=120, features=("qa",), eval_run="x", ingest_seq=1)
    slow_run.duration_ms = [d * 100 for d in slow_run.duration_ms]
    insert_spans(store, production)
    insert_spans(store, slow_run)
    store.roll_up(1, 1)

    roots = sorted(d for d, stage in zip(production.duration_ms, production.stage, strict=True) if stage == "request")
    seeded = store.recent_request_durations(3600, 100)
    assert sorted(seeded[("acme", "qa")]) == pytest.approx(roots)
    p95 = store.recent_p95(3600)
    assert p95[("qa", "request")] <= max(roots) * 1.01  # the eval run's requests are 100x longer
