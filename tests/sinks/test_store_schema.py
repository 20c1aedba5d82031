"""Schema: generated from SPAN_COLUMNS, versioned migrations, TTLs everywhere, a cluster variant, engine logs off."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from ragmon.sinks import Retention, Store, Topology, open_store
from ragmon.sinks.arrow import to_table
from ragmon.sinks.migrations import Step, migrations
from ragmon.sinks.schema import (
    ROLLUP_ORDER,
    ROLLUP_ORDER_V1,
    SCHEMA_VERSION,
    TTL_COLUMNS,
    bootstrap_statements,
)

from ragmon.model import SPAN_COLUMNS
from tests.support.chhttp import ClickHouseHttpServer
from tests.support.span_rows import insert_spans


def test_spans_columns_come_from_the_model(store: Store) -> None:
    rows = store.query(
        "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = 'spans' ORDER BY position",
        {"db": store.topology.database},
    )
    assert [(r["name"], r["type"]) for r in rows] == list(SPAN_COLUMNS)


def test_migrations_are_recorded_once_and_rerun_safely(store: Store) -> None:
    db = store.topology.database
    assert store.migrate() == SCHEMA_VERSION
    views = store.query(
        "SELECT name FROM system.tables WHERE database = {db:String} AND engine = 'MaterializedView'", {"db": db}
    )
    # the minute rollup is the agent's (rollup_sql.py); labels_mv copies each label write into `labels` (v8),
    # feedback_mv each feedback write into `feedback` (v11); documents_1h_mv adds document minutes up per hour (v12);
    # trace_questions_1h_mv counts each grouped trace in its group's hour (v13)
    assert sorted(r["name"] for r in views) == [
        "documents_1h_mv", "feedback_mv", "labels_mv", "spans_1h_mv", "trace_questions_1h_mv"
    ]  # fmt: skip
    store.migrate()
    ledger = store.query(f"SELECT version, description FROM {db}.schema_migrations FINAL ORDER BY version")
    assert [r["version"] for r in ledger] == [m.version for m in migrations(Topology(db), Retention())]


def test_every_table_has_a_ttl_and_retention_changes_apply(
    engine_dir: Path, http_server: ClickHouseHttpServer, database: str
) -> None:
    first = open_store(str(engine_dir), database=database)
    first.close()
    shorter = open_store(str(engine_dir), database=database, retention=Retention(spans_days=3, scores_days=9))
    try:
        engines = {
            r["name"]: r["engine_full"]
            for r in shorter.query(
                "SELECT name, engine_full FROM system.tables WHERE database = {db:String}", {"db": database}
            )
        }
        for table, column, _ in TTL_COLUMNS:
            assert f"TTL toDateTime({column})" in engines[table], table
        assert "toIntervalDay(3)" in engines["spans"]
        assert "toIntervalDay(9)" in engines["scores"]
        assert "toIntervalDay(14)" in engines["payloads"]
    finally:
        shorter.close()


def test_cluster_variant_is_generated_from_the_same_source() -> None:
    topology = Topology(database="ragmon", cluster="main")
    steps = [step for m in migrations(topology, Retention()) for step in m.statements]
    statements = bootstrap_statements(topology) + [s.sql if isinstance(s, Step) else s for s in steps]
    assert all(" ON CLUSTER `main`" in s for s in statements if not s.startswith(("INSERT", "TRUNCATE")))
    creates = [s for s in statements if s.startswith("CREATE TABLE")]
    # Storage tables are replicated; the Distributed tables over them (sinks/schema.py) hold no rows.
    assert creates and all("ENGINE = Replicated" in s or "ENGINE = Distributed(" in s for s in creates)
    assert not any("non_replicated_deduplication_window" in s for s in statements)


def test_engine_logs_are_off(store: Store) -> None:
    if store.backend.kind != "chdb":
        return  # a server's logs are its operator's business
    settings = store.backend.select("SELECT getSetting('log_queries') AS q, getSetting('async_insert') AS a")
    assert settings.to_pylist() == [{"q": False, "a": False}]
    logs = store.query(
        "SELECT name FROM system.tables WHERE database = 'system' AND (engine LIKE '%MergeTree' OR name LIKE '%\\_log')"
    )
    # chDB keeps no MergeTree system logs; its one log table (user_query_log) lives in memory and is not fed.
    assert [r["name"] for r in logs] == ["user_query_log"]
    assert store.query("SELECT count() AS n FROM system.user_query_log") == [{"n": 0}]


def test_a_v1_store_migrates_to_v2_and_keeps_its_report(engine_dir: Path, database: str) -> None:
    """A store written by v1 (no ingest_seq, no hourly rollup, a key-first minute rollup) gains both, its minutes
    are copied into a time-first table, and the hours are backfilled."""
    from ragmon.sinks.chdb_backend import ChdbBackend

    from tests.support.synth import make_batch

    topology = Topology(database)
    old = Store(ChdbBackend(engine_dir), topology)
    for statement in bootstrap_statements(topology) + list(migrations(topology, Retention())[0].statements):
        assert isinstance(statement, str)
        old.backend.execute(
            statement.replace(f"ORDER BY ({ROLLUP_ORDER_V1})", "ORDER BY (tenant, feature, stage, model, minute)")
        )
    old.backend.execute(f"ALTER TABLE {database}.spans DROP COLUMN ingest_seq")
    old.backend.execute(f"INSERT INTO {database}.schema_migrations (version, description) VALUES (1, 'v1')")
    batch = make_batch(200, seed=31, spread_s=3 * 3600, start_ns=(int(time.time()) // 3600 - 4) * 3600 * 10**9)
    v1 = [(n, t) for n, t in SPAN_COLUMNS if n not in ("ingest_seq", "release", "environment", "retrieved_sources")]
    columns = [name for name, _ in v1]
    table = to_table(batch.columns(), v1)
    old.backend.insert(f"{database}.spans", table.select(columns), {"optimize_on_insert": 0})
    minutes = (
        "SELECT feature, stage, sum(spans) AS n, quantilesDDMerge(0.005, 0.5, 0.95, 0.99)(duration_q) AS q"
        f" FROM {database}.spans_1m GROUP BY feature, stage ORDER BY feature, stage"
    )
    before = old.query(minutes)
    old.close()

    store = open_store(str(engine_dir), database=database)
    try:
        report = {(r["feature"], r["stage"]): r for r in store.report(6 * 3600)}
        assert len(report) == len(before)
        for row in before:
            got = report[(row["feature"], row["stage"])]
            assert got["requests"] == row["n"]
            assert [got["p50_ms"], got["p95_ms"], got["p99_ms"]] == pytest.approx(row["q"], rel=1e-9)
        hours = store.query(f"SELECT sum(spans) AS n FROM {database}.spans_1h")
        assert hours == [{"n": len(batch)}]
        store.migrate()  # re-running does not backfill twice
        assert store.query(f"SELECT sum(spans) AS n FROM {database}.spans_1h") == hours
        columns_now = store.query(
            "SELECT name FROM system.columns WHERE database = {db:String} AND table = 'spans'", {"db": database}
        )
        assert [r["name"] for r in columns_now][-1] == "ingest_seq"
        keys = store.query(
            "SELECT name, sorting_key FROM system.tables WHERE database = {db:String} AND name LIKE 'spans_1_'",
            {"db": database},
        )
        assert {r["name"]: r["sorting_key"] for r in keys} == {
            "spans_1m": ROLLUP_ORDER,
            "spans_1h": ROLLUP_ORDER.replace("minute", "hour"),
        }
        insert_spans(store, make_batch(10, seed=32, ingest_seq=1))  # v5: the agent's roll-ups feed the new table
        store.roll_up(1, 1)
        assert store.query(f"SELECT sum(spans) AS n FROM {database}.spans_1m") == [{"n": len(batch) + 50}]
    finally:
        store.close()


def test_content_ttl_is_a_setting_in_hours(engine_dir: Path, database: str) -> None:
    store = open_store(str(engine_dir), database=database, retention=Retention(content_hours=6))
    try:
        engine = store.query(
            "SELECT engine_full FROM system.tables WHERE database = {db:String} AND name = 'span_content'",
            {"db": database},
        )[0]["engine_full"]
        assert "TTL toDateTime(inserted_at) + toIntervalHour(6)" in engine
    finally:
        store.close()
