"""The schema's two doors agree: a store created from the definition (`ragmon.sinks.schema`) and one created at v1
and migrated (`ragmon.sinks.migrations`) have the same tables, columns, engines, keys, TTLs and views — on the
embedded engine and through a server (a cluster's: tests/deploy/test_cluster_schema.py). A new store is recorded
at the current version, so no migration runs on it again."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from ragmon.sinks import Store
from ragmon.sinks.migrations import migrations
from ragmon.sinks.schema import SCHEMA_VERSION, TABLES, VIEWS, Retention, Topology, bootstrap_statements

from tests.support.chhttp import ClickHouseHttpServer
from tests.support.schema_layout import layout

FIRST_RELEASE_V1 = Path(__file__).with_name("schema_v1_first_release.sql")


def _at_v1(store: Store, first_release: bool) -> None:
    """The store's database as v1 made it: the first release's tables, or migration 1's as it runs today."""
    topology = store.topology
    quoted = f"`{topology.database}`"
    if first_release:
        text = "\n".join(line for line in FIRST_RELEASE_V1.read_text().splitlines() if not line.startswith("--"))
        statements = [s.strip().replace("{database}", quoted) for s in text.split(";") if s.strip()]
    else:
        (v1, *_) = migrations(topology, Retention())
        statements = [str(s) for s in v1.statements]
    for statement in (*bootstrap_statements(topology), *statements):
        store.backend.execute(statement)
    store.backend.execute(f"INSERT INTO {quoted}.schema_migrations (version, description) VALUES (1, 'v1')")


@pytest.mark.parametrize("first_release", [True, False], ids=["first-release-v1", "todays-v1"])
def test_a_store_migrated_from_v1_is_the_schema_a_new_store_is_created_with(store: Store, first_release: bool) -> None:
    new = layout(store.backend, store.topology.database)
    assert {t["name"] for t in new["tables"]} == {t.name for t in TABLES} | {v.name for v in VIEWS} | {
        "schema_migrations"
    }
    old = Store(store.backend, Topology(store.topology.database + "_v1"))  # the same backend: chDB or the server
    _at_v1(old, first_release)
    assert old.migrate() == SCHEMA_VERSION
    assert layout(old.backend, old.topology.database) == new


def test_a_new_store_is_recorded_at_every_version_and_migrated_no_more(store: Store) -> None:
    db = store.topology.database
    ledger = store.query(f"SELECT version, description FROM {db}.schema_migrations FINAL ORDER BY version")
    assert ledger == [{"version": m.version, "description": m.description} for m in migrations(Topology(), Retention())]
    assert ledger[-1]["version"] == SCHEMA_VERSION
    # v9 adds scores.eval_run: taken away by hand, it stays away, so no migration ran on the second start
    store.backend.execute(f"ALTER TABLE {db}.scores DROP COLUMN eval_run")
    assert store.migrate() == SCHEMA_VERSION
    columns = store.query(
        "SELECT name FROM system.columns WHERE database = {db:String} AND table = 'scores'", {"db": db}
    )
    assert "eval_run" not in {c["name"] for c in columns}


def test_a_creation_cut_short_is_finished_by_the_migrations(store: Store) -> None:
    """A new store whose creation stopped before its ledger was written runs every migration on the next start:
    each is a no-op on the tables the definition made, and the ones missing are made."""
    db = store.topology.database
    before = layout(store.backend, db)
    store.backend.execute(f"TRUNCATE TABLE {db}.schema_migrations")
    store.backend.execute(f"DROP TABLE {db}.labels_mv")
    store.backend.execute(f"DROP TABLE {db}.labels")
    assert store.migrate() == SCHEMA_VERSION
    assert layout(store.backend, db) == before


def test_ragmon_migrate_through_a_server_creates_a_new_store_and_upgrades_an_old_one(
    chdb_store: Store, http_server: ClickHouseHttpServer, database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragmon.sinks.server_backend import ClickHouseServerBackend

    from ragmon.commands.migrate import add_migrate_arguments, migrate

    def run(db: str) -> int:
        parser = argparse.ArgumentParser()
        add_migrate_arguments(parser)
        return migrate(parser.parse_args(["--clickhouse-url", http_server.url, "--database", db]))

    new, old = f"{database}_new", f"{database}_old"
    older = Store(ClickHouseServerBackend(http_server.url), Topology(old))
    _at_v1(older, first_release=True)
    older.close()
    assert run(new) == 0 and run(old) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"schema version {SCHEMA_VERSION} in database {db} (single node)" for db in (new, old)
    ]
    assert layout(chdb_store.backend, old) == layout(chdb_store.backend, new) == layout(chdb_store.backend, database)


def test_ragmon_schema_lists_every_table_of_the_definition_with_its_columns() -> None:
    from ragmon.sinks.schema_doc import NOT_LISTED, tables

    listed = {doc.name: doc for doc in tables()}
    assert set(listed).isdisjoint(NOT_LISTED)
    assert set(listed) | set(NOT_LISTED) == {table.name for table in TABLES}
    for table in TABLES:
        if table.name in listed:
            assert listed[table.name].columns == table.columns, table.name
            assert set(listed[table.name].notes) <= {name for name, _ in table.columns}, table.name
