"""A new cluster gets the schema `ragmon migrate --cluster` makes of an older one: the definition's cluster DDL
(what `Store.migrate` runs on a new cluster) against every migration's, as text (replicated engines and their Keeper
paths, ON CLUSTER, the Distributed tables, the views) and as the tables the cluster simulation builds each way
(tests/deploy/cluster_sim.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ragmon.sinks.schema import SHARDING_KEYS, Retention, Topology, bootstrap_statements, create_statements

from ragmon.commands.migrate import schema_sql
from tests.deploy.cluster_sim import executable
from tests.deploy.conftest import REPO

CLUSTER = "prod_cluster"
_CREATE = re.compile(r"CREATE (TABLE|MATERIALIZED VIEW) IF NOT EXISTS `ragmon`\.`(\w+)`")


def _engines(sql: list[str]) -> dict[str, str]:
    """What the statements, run in order, leave: each table's engine clause, each view's target and sources."""
    out = {}
    for statement in sql:
        if dropped := re.match(r"DROP (?:VIEW|TABLE) IF EXISTS `ragmon`\.`(\w+)`", statement):
            out.pop(dropped.group(1), None)
        elif (created := _CREATE.match(statement)) and created.group(1) == "TABLE":
            out[created.group(2)] = next(line for line in statement.splitlines() if line.startswith("ENGINE = "))
        elif created:
            view = " ".join((statement.splitlines()[0].split(" TO ")[1], *re.findall(r"FROM `\S+`", statement)))
            out[created.group(2)] = view
    return out


def test_a_new_clusters_ddl_has_the_engines_and_keeper_paths_the_migrations_give() -> None:
    topology = Topology(database="ragmon", cluster=CLUSTER)
    new = [*bootstrap_statements(topology), *create_statements(topology, Retention())]
    assert all(f" ON CLUSTER `{CLUSTER}`" in statement for statement in new)
    migrated = executable(schema_sql(CLUSTER, "ragmon"))
    engines = _engines(new)
    assert engines == _engines(migrated)
    assert {name for name in engines if "ENGINE = Distributed(" in engines[name]} == set(SHARDING_KEYS)
    assert engines["spans_local"] == (
        "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/ragmon/spans_local', '{replica}')"
    )


@pytest.mark.slow
def test_a_new_cluster_a_migrated_one_and_the_printed_ddl_are_one_schema(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.deploy.cluster_sim", str(tmp_path), CLUSTER, "obs", "layouts"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    names = {table["name"] for table in seen["new"]["tables"]}
    assert {f"{name}_local" for name in SHARDING_KEYS} | set(SHARDING_KEYS) <= names
    assert seen["v1"] == seen["new"]
    assert seen["printed"] == seen["new"]
