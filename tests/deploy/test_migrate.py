"""`ragmon migrate`: the cluster DDL comes from the same schema source as the embedded store's, and the single-node
variant of that source runs on the embedded engine."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from ragmon.sinks import Store, open_store
from ragmon.sinks.migrations import Step, migrations
from ragmon.sinks.schema import (
    CONTENT_TABLE,
    DEDUP_WINDOW_BLOCKS,
    LOCAL_SUFFIX,
    SHARDING_KEYS,
    TENANT_TABLES,
    TTL_COLUMNS,
    Retention,
    Topology,
    retention_statement,
    ttl_expression,
)

from ragmon.commands.migrate import add_migrate_arguments, migrate, schema_sql
from tests.deploy.cluster_sim import executable, to_engine_variant
from tests.deploy.conftest import REPO

CLUSTER = "prod_cluster"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ragmon migrate")
    add_migrate_arguments(parser)
    return parser.parse_args(argv)


def creates_of(sql: list[str]) -> dict[str, str]:
    """CREATE TABLE statements by the table they create."""
    out = {}
    for statement in sql:
        match = re.match(r"CREATE TABLE IF NOT EXISTS `ragmon`\.`(\w+)`", statement)
        if match:
            assert match.group(1) not in out, f"{match.group(1)} created twice"
            out[match.group(1)] = statement
    return out


def test_cluster_ddl_is_replicated_and_on_cluster() -> None:
    sql = executable(schema_sql(CLUSTER, "ragmon"))
    for statement in sql:
        if statement.startswith(("CREATE", "ALTER", "DROP", "EXCHANGE", "TRUNCATE")):
            assert f" ON CLUSTER `{CLUSTER}`" in statement, statement.splitlines()[0]
    storage = {name: text for name, text in creates_of(sql).items() if "ENGINE = Distributed" not in text}
    assert set(storage) == {f"{name}{LOCAL_SUFFIX}" for name in SHARDING_KEYS} | {"schema_migrations"}
    for table, create in storage.items():
        engine = re.search(r"ENGINE = (\w+)\((.*)\)", create)
        assert engine is not None
        assert engine.group(1).startswith("Replicated") and engine.group(1).endswith("MergeTree")
        # One replica set per shard for the sharded tables; the migration ledger is one replica set for the
        # whole cluster, so an agent on any node sees what was applied.
        shard = "" if table == "schema_migrations" else "{shard}/"
        assert engine.group(2).startswith(f"'/clickhouse/tables/{shard}ragmon/{table}', '{{replica}}'"), create
        assert "non_replicated_deduplication_window" not in create
    # TTLs from the same retention source, on every local table that has one (the rows live there).
    for table, _, _ in TTL_COLUMNS:
        assert f"TTL {ttl_expression(table, Retention())}" in storage[table + LOCAL_SUFFIX], table


def test_cluster_ddl_has_distributed_tables_sharded_by_trace_id() -> None:
    sql = "\n".join(schema_sql(CLUSTER))
    assert re.search(rf"ENGINE = Distributed\(`?{CLUSTER}`?, .*spans.*, cityHash64\(trace_id\)\)", sql)


def test_every_data_table_is_distributed_over_its_local_table() -> None:
    creates = creates_of(executable(schema_sql(CLUSTER, "ragmon")))
    with_trace_id = {"spans", CONTENT_TABLE, "payloads", "scores"}
    for name, key in SHARDING_KEYS.items():
        create = creates[name]
        assert create == (
            f"CREATE TABLE IF NOT EXISTS `ragmon`.`{name}` ON CLUSTER `{CLUSTER}` AS `ragmon`.`{name}_local`\n"
            f"ENGINE = Distributed(`{CLUSTER}`, `ragmon`, `{name}_local`, {key})"
        )
        # The local table comes first (AS copies its columns), and no TTL sits on the Distributed table.
        assert list(creates).index(f"{name}_local") < list(creates).index(name)
        assert "TTL" not in create
        if name in with_trace_id:
            assert key == "cityHash64(trace_id)", name
    assert SHARDING_KEYS["alerts"] == "cityHash64(alert_id)"  # deterministic: a re-sent alert meets its copy
    assert "schema_migrations_local" not in creates and "Distributed" not in creates["schema_migrations"]


def test_cluster_views_read_and_write_local_tables() -> None:
    sql = executable(schema_sql(CLUSTER, "ragmon"))
    views = {}
    for statement in sql:
        match = re.match(
            r"CREATE MATERIALIZED VIEW IF NOT EXISTS `ragmon`\.`(\w+)` ON CLUSTER `\w+` TO `ragmon`\.`(\w+)`", statement
        )
        if match:
            views[match.group(1)] = (match.group(2), re.findall(r"FROM `ragmon`\.`(\w+)`", statement))
    assert views == {
        "spans_1m_mv": ("spans_1m_local", ["spans_local"]),
        "spans_1h_mv": ("spans_1h_local", ["spans_1m_local"]),
        # a label and its audit row land on one shard (both by trace id): each shard copies its own writes
        "labels_mv": ("labels_local", ["label_writes_local"]),
        # v11: a feedback and its audit row, likewise
        "feedback_mv": ("feedback_local", ["feedback_writes_local"]),
        # v12: document minutes land by document on a shard, which adds them up per hour
        "documents_1h_mv": ("documents_1h_local", ["documents_1m_local"]),
        # v13: a trace's question row lands by trace id; each shard adds its own up per hour and group
        "trace_questions_1h_mv": ("trace_questions_1h_local", ["trace_questions_local"]),
    }
    # v5 hands the minute rollup to the agent (sinks/rollup_sql.py): v1's minute view goes on every node
    assert f"DROP VIEW IF EXISTS `ragmon`.`spans_1m_mv` ON CLUSTER `{CLUSTER}`" in sql
    # The hourly backfill is one statement over the whole cluster: Distributed in, Distributed out.
    (backfill,) = [s for s in sql if s.startswith("INSERT INTO `ragmon`.`spans_1h`")]
    assert backfill.startswith("INSERT INTO `ragmon`.`spans_1h`\n")
    assert "FROM `ragmon`.`spans_1m` AS m" in backfill


def test_cluster_column_changes_reach_both_layers() -> None:
    sql = executable(schema_sql(CLUSTER, "ragmon"))
    for table, column in (("spans", "ingest_seq"), ("payloads", "sampling_reasons")):
        for name in (table, f"{table}_local"):
            assert any(
                s.startswith(f"ALTER TABLE `ragmon`.`{name}` ON CLUSTER `{CLUSTER}` ADD COLUMN IF NOT EXISTS {column} ")
                for s in sql
            ), (name, column)
    # Indexes and TTLs exist only where the rows are.
    assert all("ADD INDEX" not in s or "`spans_local`" in s for s in sql)
    for table, _, _ in TTL_COLUMNS:
        statement = retention_statement(Topology(cluster=CLUSTER), table, Retention())
        assert statement.startswith(f"ALTER TABLE `ragmon`.`{table}_local` ON CLUSTER `{CLUSTER}` MODIFY TTL ")


def test_cluster_and_single_node_ddl_come_from_one_source() -> None:
    """The cluster's local tables and views are the single-node DDL under `_local` names, replicated."""
    distributed = set(SHARDING_KEYS)
    cluster = []
    for statement in executable(schema_sql(CLUSTER, "ragmon")):
        target = re.match(r"(?:CREATE TABLE IF NOT EXISTS|ALTER TABLE) `ragmon`\.`(\w+)`", statement)
        if target and target.group(1) in distributed and not statement.startswith("INSERT"):
            continue  # the Distributed layer: no single-node counterpart
        single = to_engine_variant(statement, CLUSTER).replace(
            f"non_replicated_deduplication_window = {DEDUP_WINDOW_BLOCKS}, ", ""
        )
        cluster.append(re.sub(r"`(\w+)_local`", r"`\1`", single))
    # The single node's v2 also rebuilds a key-first minute rollup of a v1 store, which a cluster never had.
    single_node = migrations(Topology(), Retention())
    rebuild = [s.sql for m in single_node if m.version == 2 for s in m.statements if isinstance(s, Step)]
    statements = executable(schema_sql(None))
    for step in rebuild:  # each guarded step once: v5's plain DROP of the minute view has the text of v2's step
        statements.remove(step)
    single = [
        s.replace(f"non_replicated_deduplication_window = {DEDUP_WINDOW_BLOCKS}, ", "")
        for s in statements
        if "_rebuilt" not in s
    ]
    assert list(dict.fromkeys(cluster)) == list(dict.fromkeys(single))
    assert all("ON CLUSTER" not in s and "Replicated" not in s and "_local" not in s for s in schema_sql(None))


def test_tenant_filter_covers_the_local_tables() -> None:
    for name in SHARDING_KEYS:
        assert name in TENANT_TABLES and f"{name}_local" in TENANT_TABLES


@pytest.mark.slow
def test_agent_path_and_queries_on_the_cluster_layout(tmp_path: Path) -> None:
    """The cluster DDL (minus Keeper) on the embedded engine with a one-shard cluster in its configuration; the
    agent's ingest path, sampler, report, judges' and alerts' inserts and the query helper run against the names
    a cluster deployment reads from (see cluster_sim.py)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.deploy.cluster_sim", str(tmp_path), CLUSTER, "obs"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    assert seen["clusters"] == [{"cluster": CLUSTER, "shard_num": 1, "is_local": 1}]
    for name, key in SHARDING_KEYS.items():
        assert seen["engines"][name] == f"Distributed('{CLUSTER}', 'obs', '{name}_local', {key})"
        assert re.match(r"\w*MergeTree\b", seen["engines"][f"{name}_local"]), name
    assert seen["retention_already_aligned"]
    sent = seen["sent_spans"]
    counts = seen["counts"]
    # Through the Distributed tables into the local ones, once — a re-sent batch (same token) stays invisible.
    assert counts["spans"] == counts["spans_local"] == counts["spans_after_resend"] == sent
    assert counts["span_content"] == counts["span_content_local"] > 0
    # The rollup views on the local tables saw every span, minute and hour.
    assert counts["spans_1m_local_spans"] == counts["spans_1h_local_spans"] == sent
    assert sum(seen["report_requests"].values()) == sent
    assert seen["fragments"] == {"traces": seen["sent_traces"], "span_counts": [sent // seen["sent_traces"]]}
    assert seen["payloads_copied"] == seen["payloads_local"] == seen["payloads_with_answer"] == 10
    assert seen["recent_p95_keys"] == len(seen["report_requests"])
    assert seen["scores_local"] == 10 and seen["alerts_local"] == 1
    assert seen["tenant_query"] == {"acme": sent, "x": 0}


def test_print_writes_the_cluster_ddl(capsys: pytest.CaptureFixture[str]) -> None:
    assert migrate(parse("--cluster", CLUSTER, "--database", "obs", "--print")) == 0
    out = capsys.readouterr().out
    assert f"CREATE DATABASE IF NOT EXISTS `obs` ON CLUSTER `{CLUSTER}`;" in out
    assert "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/obs/spans_local', '{replica}')" in out
    assert f"ENGINE = Distributed(`{CLUSTER}`, `obs`, `spans_local`, cityHash64(trace_id));" in out
    assert "-- migration 2:" in out


def test_bad_combinations_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert migrate(parse("--cluster", CLUSTER)) == 2
    assert migrate(parse("--cluster", CLUSTER, "--data-dir", str(tmp_path))) == 2
    assert "needs --clickhouse-url" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse("--data-dir", str(tmp_path), "--clickhouse-url", "http://x:8123")


def _tables(store: object, database: str) -> dict[str, str]:
    rows = store.backend.select(  # type: ignore[attr-defined]
        f"SELECT name, engine FROM system.tables WHERE database = '{database}' ORDER BY name"
    ).to_pylist()
    return {row["name"]: row["engine"] for row in rows}


def test_single_node_ddl_runs_on_the_embedded_engine(chdb_engine_dir: Path) -> None:
    migrated = f"deploy_migrated_{uuid.uuid4().hex[:8]}"
    printed = f"deploy_printed_{uuid.uuid4().hex[:8]}"
    store = open_store(chdb_engine_dir, database=migrated)
    try:
        # The printed single-node DDL, run statement by statement as an operator would.
        for statement in executable(schema_sql(None, printed)):
            store.backend.execute(statement)
        expected = _tables(store, migrated)
        assert {"spans", "span_content", "payloads", "scores", "alerts", "spans_1m", "spans_1h"} <= set(expected)
        assert _tables(store, printed) == expected
        # And the printed schema takes rows like the migrated one: a span row, rolled up, lands in the rollups.
        store.backend.execute(
            f"INSERT INTO `{printed}`.spans"
            " (tenant, trace_id, span_id, stage, feature, start_time, duration_ms, ingest_seq)"
            " VALUES ('t', 'a1', 'b1', 'generate', 'qa', now64(9), 12.5, 1)"
        )
        Store(store.backend, Topology(database=printed)).roll_up(1, 1)
        rows = store.backend.select(f"SELECT sum(spans) AS n FROM `{printed}`.spans_1h").to_pylist()
        assert rows == [{"n": 1}]
    finally:
        store.close()
