"""The cluster schema's layout on the embedded engine: a one-shard "cluster" defined in chDB's configuration.

No ClickHouse Keeper or second server runs here, so `ON CLUSTER` and the `Replicated*` engines cannot run. What
can: everything else of `ragmon migrate --cluster NAME`'s output — the `<name>_local` tables, the `Distributed`
tables over them (the very `ENGINE = Distributed(NAME, db, <name>_local, key)` text), the rollup views attached
to the local tables, the column changes on both layers and the backfill through the `Distributed` tables. chDB
reads a `remote_servers` section from a config file, and a shard whose host is 127.0.0.1 on the configured
`tcp_port` is *local* (`is_local = 1`): reads and inserts through the `Distributed` table run in-process.

`to_engine_variant` undoes only what needs a Keeper (`ON CLUSTER`, a replicated engine's path and replica
arguments) and gives the plain MergeTrees the deduplication window the replicated ones have by default.

chDB runs one engine per process, with the configuration it was started with, so this runs in a subprocess:

    python -m tests.deploy.cluster_sim WORK_DIR CLUSTER DATABASE   # prints one JSON object of observations
    python -m tests.deploy.cluster_sim WORK_DIR CLUSTER DATABASE layouts   # the schema each way of making it gives
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from ragmon.sinks.schema import DEDUP_WINDOW_BLOCKS

CONFIG = """<clickhouse>
  <tcp_port>{port}</tcp_port>
  <remote_servers>
    <{cluster}>
      <shard><replica><host>127.0.0.1</host><port>{port}</port></replica></shard>
    </{cluster}>
  </remote_servers>
</clickhouse>
"""
# Never listened on: a local shard is recognised by address and port and queried in-process.
TCP_PORT = 9000


def executable(sql: list[str]) -> list[str]:
    """`schema_sql` output without its comment lines (a guarded step's guard, migration headers)."""
    out = []
    for text in sql:
        lines = [line for line in text.splitlines() if not line.startswith("--")]
        if lines:
            out.append("\n".join(lines))
    return out


def to_engine_variant(statement: str, cluster: str) -> str:
    """The statement as one node without a Keeper runs it: no ON CLUSTER, plain engines with a dedup window."""
    statement = statement.replace(f" ON CLUSTER `{cluster}`", "")
    replicated = re.sub(
        r"Replicated(\w+)\('/clickhouse/tables/(\{shard\}/)?[^']+', '\{replica\}'(, )?",
        r"\1(",
        statement,
    )
    if replicated != statement:
        replicated = replicated.replace(
            "SETTINGS ", f"SETTINGS non_replicated_deduplication_window = {DEDUP_WINDOW_BLOCKS}, "
        )
    return replicated


class KeeperlessBackend:
    """The embedded engine, running each statement as one node without a Keeper runs it (`to_engine_variant`): so
    `Store.migrate` can run with a cluster `Topology`, as the agent and `ragmon migrate --cluster` run it."""

    def __init__(self, backend: Any, cluster: str) -> None:
        self._backend = backend
        self._cluster = cluster

    def execute(self, sql: str, params: Any = None, settings: Any = None) -> None:
        self._backend.execute(to_engine_variant(sql, self._cluster), params, settings)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


def _engine(work: Path, cluster: str) -> Any:
    """The embedded engine started with a one-shard cluster in its configuration: its backend."""
    from chdb import state
    from ragmon.sinks.chdb_backend import ChdbBackend

    engine = work / "chdb"
    config = work / "cluster.xml"
    config.write_text(CONFIG.format(cluster=cluster, port=TCP_PORT))
    # The first connection starts the engine with the cluster configuration; the store's own connections join it.
    starter = state.connect(f"{engine}?config-file={config}")
    backend = ChdbBackend(engine)
    starter.close()
    return backend


def _store(work: Path, cluster: str, database: str) -> Any:
    from ragmon.sinks.schema import Topology
    from ragmon.sinks.store import Store

    from ragmon.commands.migrate import schema_sql

    store = Store(_engine(work, cluster), Topology(database=database))
    for statement in executable(schema_sql(cluster, database)):
        store.backend.execute(to_engine_variant(statement, cluster))
    store.backend.use_database(database)  # as `open_store` does: `ragmon query` names tables unqualified
    return store


def layouts(work: Path, cluster: str, database: str) -> dict[str, Any]:
    """The cluster schema made three ways, each database's layout: `Store.migrate` on a new cluster (created from
    the schema's definition), `Store.migrate` on a cluster at v1 (migrated), and `ragmon migrate --cluster --print`'s
    DDL run statement by statement (every migration in turn)."""
    from ragmon.sinks.migrations import migrations
    from ragmon.sinks.schema import Retention, Topology, bootstrap_statements
    from ragmon.sinks.store import Store

    from tests.support.schema_layout import layout

    printed = _store(work, cluster, f"{database}_printed")
    backend = KeeperlessBackend(printed.backend, cluster)
    new = Store(backend, Topology(database=f"{database}_new", cluster=cluster))
    new.migrate()
    old = Store(backend, Topology(database=f"{database}_v1", cluster=cluster))
    (v1, *_) = migrations(old.topology, Retention())
    for statement in (*bootstrap_statements(old.topology), *v1.statements):
        backend.execute(str(statement))
    backend.execute(f"INSERT INTO `{database}_v1`.schema_migrations (version, description) VALUES (1, 'v1')")
    old.migrate()
    out = {name: layout(printed.backend, f"{database}_{name}") for name in ("new", "v1", "printed")}
    printed.close()
    return out


def observe(work: Path, cluster: str, database: str) -> dict[str, Any]:
    """Run the agent's write path and queries against the names a cluster deployment uses; report what was seen."""
    from ragmon.sinks import envelope, otlp_views

    from tests.support.synth import encode_otlp_request, otlp_traces

    store = _store(work, cluster, database)
    db = f"`{database}`"

    def scalar(sql: str) -> Any:
        return store.backend.select(sql).column(0)[0].as_py()

    out: dict[str, Any] = {
        "clusters": store.backend.select(
            "SELECT cluster, shard_num, is_local FROM system.clusters WHERE cluster = {c:String}", {"c": cluster}
        ).to_pylist(),
        "engines": {
            row["name"]: row["engine_full"]
            for row in store.backend.select(
                "SELECT name, engine_full FROM system.tables WHERE database = {db:String}", {"db": database}
            ).to_pylist()
        },
    }
    # An agent started with agent.clickhouse_cluster finds the retention TTLs on the local tables and alters
    # nothing (an ALTER … ON CLUSTER would fail here: no Keeper).
    from ragmon.sinks.schema import Topology
    from ragmon.sinks.store import Store

    Store(store.backend, Topology(database=database, cluster=cluster))._apply_retention()
    out["retention_already_aligned"] = True
    # The agent's ingest path, unchanged: otlp_in (Null), the normalising view and the views behind it, which
    # write into `spans` and `span_content` — the Distributed tables.
    otlp_views.install(store)
    traces = otlp_traces(40, seed=8)
    bodies = [traces[i : i + 50] for i in range(0, len(traces), 50)]
    envelopes = [envelope.seal(encode_otlp_request(body), "acme", seq) for seq, body in enumerate(bodies)]
    store.insert_otlp(envelopes, "batch-1")
    out["sent_spans"] = len(traces)
    out["sent_traces"] = len({span["trace_id"] for span in traces})
    counts = {}
    for table in ("spans", "spans_local", "span_content", "span_content_local"):
        counts[table] = scalar(f"SELECT count() FROM {db}.`{table}`")
    store.insert_otlp(envelopes, "batch-1")  # a re-sent batch: its token reaches the local tables
    counts["spans_after_resend"] = scalar(f"SELECT count() FROM {db}.spans")
    # The agent's roll-up of the range (once the sampler has decided it): reads through the Distributed `spans`,
    # writes through the Distributed `spans_1m`; rolled up again with its token (a crash), it is dropped.
    store.roll_up(0, len(envelopes) - 1, "rollup-1")
    store.roll_up(0, len(envelopes) - 1, "rollup-1")
    counts["spans_1m_local_spans"] = scalar(f"SELECT sum(spans) FROM {db}.spans_1m_local")
    counts["spans_1h_local_spans"] = scalar(f"SELECT sum(spans) FROM {db}.spans_1h_local")
    out["counts"] = counts
    # The agent's reads.
    report = store.report(7 * 86400)
    out["report_requests"] = {f"{row['feature']}/{row['stage']}": row["requests"] for row in report}
    fragments = store.trace_fragments(0, len(envelopes))
    out["fragments"] = {"traces": len(fragments), "span_counts": sorted({row["span_count"] for row in fragments})}
    kept = [{"tenant": row["tenant"], "trace_id": row["trace_id"], "reasons": ["baseline"]} for row in fragments[:10]]
    store.copy_payloads(kept)
    out["payloads_copied"] = store.kept_payload_count([(row["tenant"], row["trace_id"]) for row in kept])
    out["payloads_local"] = scalar(f"SELECT count() FROM {db}.payloads_local")
    out["payloads_with_answer"] = scalar(f"SELECT countIf(answer != '') FROM {db}.payloads")
    out["recent_p95_keys"] = len(store.recent_p95(7 * 86400))
    store.insert_scores(
        [{"tenant": "acme", "trace_id": row["trace_id"], "metric": "faithfulness", "value": 1.0} for row in kept]
    )
    store.insert_alerts([{"tenant": "acme", "alert_id": "a1", "rule": "p95", "state": "firing"}])
    out["scores_local"] = scalar(f"SELECT count() FROM {db}.scores_local")
    out["alerts_local"] = scalar(f"SELECT count() FROM {db}.alerts_local")
    # The read-only helper's tenant filter covers the per-shard tables too.
    out["tenant_query"] = {
        tenant: store.query("SELECT count() AS n FROM spans_local", tenant=tenant)[0]["n"] for tenant in ("acme", "x")
    }
    store.close()
    return out


if __name__ == "__main__":
    work_dir, cluster_name, database_name = sys.argv[1:4]
    run = layouts if sys.argv[4:] == ["layouts"] else observe
    print(json.dumps(run(Path(work_dir), cluster_name, database_name), default=str))
