"""Schema: generated from SPAN_COLUMNS, versioned migrations, TTLs everywhere, a cluster variant, engine logs off."""

from __future__ import annotations

from pathlib import Path

from ragmon.model import SPAN_COLUMNS
from sinks import Retention, Store, Topology, open_store
from sinks.chhttp import ClickHouseHttpServer
from sinks.schema import TTL_COLUMNS, bootstrap_statements, migrations


def test_spans_columns_come_from_the_model(store: Store) -> None:
    rows = store.query(
        "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = 'spans' ORDER BY position",
        {"db": store.topology.database},
    )
    assert [(r["name"], r["type"]) for r in rows] == list(SPAN_COLUMNS)


def test_migrations_are_recorded_once_and_rerun_safely(store: Store) -> None:
    db = store.topology.database
    assert store.migrate() == 1
    store.migrate()
    ledger = store.query(f"SELECT version, description FROM {db}.schema_migrations FINAL")
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
    statements = bootstrap_statements(topology) + list(migrations(topology, Retention())[0].statements)
    assert all(" ON CLUSTER `main`" in s for s in statements)
    creates = [s for s in statements if s.startswith("CREATE TABLE")]
    assert creates and all("ENGINE = Replicated" in s for s in creates)
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
