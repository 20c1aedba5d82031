"""`ragmon migrate`: print or apply the store's schema for a single node or a named ClickHouse cluster.

The statements come from the one schema source (`ragmon.sinks.schema`, the migrations beside it, for a `Topology`),
so the cluster DDL and the embedded store's DDL can never drift apart. With `--cluster NAME` every statement runs
`ON CLUSTER NAME`: each data table is a `Replicated*MergeTree` `<table>_local` on every shard, under a `Distributed`
table of the plain name sharded by `cityHash64(trace_id)`, and the rollup views are attached to the local tables
(the layout is explained in `sinks/schema.py` and `deploy/README.md`). Applying goes through `sinks.Store.migrate`,
the same ledger-guarded, re-runnable path the agent takes at start-up (a new store is created from the schema's
definition, an older one runs the migrations its ledger lacks); the server named by `--clickhouse-url` queues the
`ON CLUSTER` statements for every node (ClickHouse's distributed DDL, which needs Keeper). `--print` prints every
migration in order: run on any store, of any version or none, it gives the same schema.

Argument definitions import only the standard library; the store is imported when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_migrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        metavar="NAME",
        help="a ClickHouse cluster: ON CLUSTER, Replicated local tables, Distributed tables sharded by trace id",
    )
    parser.add_argument("--database", default="ragmon", help="database name (default ragmon)")
    parser.add_argument("--print", dest="print_only", action="store_true", help="print the DDL, apply nothing")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--clickhouse-url", help="the ClickHouse server to apply the schema through")
    target.add_argument("--data-dir", type=Path, help="the embedded store directory (no --cluster)")


def schema_sql(cluster: str | None, database: str = "ragmon") -> list[str]:
    """Every migration's statements, in order, as SQL text (guarded steps carry their guard as a comment): what
    brings a store of any version, or none, to the current schema, for an operator to run."""
    from ragmon.sinks.migrations import Step, migrations
    from ragmon.sinks.schema import Retention, Topology, bootstrap_statements

    topology = Topology(database=database, cluster=cluster)
    out = list(bootstrap_statements(topology))
    for migration in migrations(topology, Retention()):
        out.append(f"-- migration {migration.version}: {migration.description}")
        for statement in migration.statements:
            if isinstance(statement, Step):
                out.append(f"-- only if: {statement.only_if}\n{statement.sql}")
            else:
                out.append(statement)
    return out


def _open(args: argparse.Namespace) -> Any:
    from ragmon.data_dir import embedded_store
    from ragmon.sinks.schema import Topology
    from ragmon.sinks.store import Store

    topology = Topology(database=args.database, cluster=args.cluster)
    backend: Any
    if args.clickhouse_url:
        from ragmon.sinks.server_backend import ClickHouseServerBackend

        backend = ClickHouseServerBackend(args.clickhouse_url)
    else:
        from ragmon.sinks.chdb_backend import ChdbBackend

        # The agent's layout: the embedded engine lives in <data-dir>/chdb.
        backend = ChdbBackend(embedded_store(args.data_dir))
    return Store(backend, topology)


def migrate(args: argparse.Namespace) -> int:
    if args.print_only:
        for statement in schema_sql(args.cluster, args.database):
            print(statement if statement.startswith("--") else f"{statement};\n")
        return 0
    if not args.clickhouse_url and not args.data_dir:
        print("ragmon migrate: give --clickhouse-url or --data-dir (or --print)", file=sys.stderr)
        return 2
    if args.cluster and not args.clickhouse_url:
        print("ragmon migrate: --cluster needs --clickhouse-url (the embedded store is one node)", file=sys.stderr)
        return 2
    from ragmon.sinks.errors import StoreError

    try:
        store = _open(args)
    except (StoreError, OSError) as exc:
        print(f"ragmon migrate: {exc}", file=sys.stderr)
        return 1
    try:
        version = store.migrate()
    except StoreError as exc:
        print(f"ragmon migrate: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    where = f"cluster {args.cluster}" if args.cluster else "single node"
    print(f"schema version {version} in database {args.database} ({where})")
    return 0
