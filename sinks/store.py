"""The store: `Store`, ragmon's one door into ClickHouse, its methods grouped by who calls them — each group a
module that also states, as a Protocol, what its reader depends on:

    for_writer.py     the write path: OTLP envelopes through the normalising views; payload rows (tools, tests)
    for_sampler.py    the sampling stage: trace fragments, roll-ups, payload copies, decision counts, recent latency
    for_judge.py      the judges: payloads to judge, score rows, the queue's catch-up
    for_report.py     the report commands and the demo: report, quality, what a run stored, the alerts it fired
    for_review.py     the review queue and `ragmon calibrate --from-store`: labels, and the scores beside them
    for_alerting.py   drift alerting: its signals' SQL and the alert rows it writes
    for_conversations.py  the conversation view: a session's turns, the sessions active lately, their scores
    for_feedback.py   end users' feedback: the receiver's writes, and the reads that use it
    for_questions.py  recurring questions: each decided trace's question, its groups, the question-group view
    dashboard_queries.py  the dashboard: the report, and its views' SQL through `query`

`store_base.py` holds what they all ride on: the backend, callers' reads under their budgets (`query`, `reading`,
`cancel`), `close`; how rows are inserted is `inserts.py`. This module adds the schema's migrations and `open_store`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragmon.sinks.backend import Backend
from ragmon.sinks.for_alerting import AlertingMethods
from ragmon.sinks.for_conversations import ConversationMethods
from ragmon.sinks.for_documents import DocumentMethods
from ragmon.sinks.for_feedback import FeedbackMethods
from ragmon.sinks.for_judge import JudgeMethods
from ragmon.sinks.for_questions import QuestionMethods
from ragmon.sinks.for_report import ReportMethods
from ragmon.sinks.for_review import ReviewMethods
from ragmon.sinks.for_sampler import SamplerMethods
from ragmon.sinks.for_writer import WriterMethods
from ragmon.sinks.migrations import Step, migrations
from ragmon.sinks.read_budget import QueryBudgets
from ragmon.sinks.schema import (
    SCHEMA_VERSION,
    TTL_COLUMNS,
    Retention,
    Topology,
    bootstrap_statements,
    create_statements,
    retention_statement,
    ttl_expression,
)
from ragmon.sinks.store_base import StoreBase

from ragmon.data_dir import embedded_store


class Store(
    WriterMethods,
    SamplerMethods,
    JudgeMethods,
    ReportMethods,
    ReviewMethods,
    AlertingMethods,
    ConversationMethods,
    DocumentMethods,
    FeedbackMethods,
    QuestionMethods,
    StoreBase,
):
    """ragmon's ClickHouse store over one backend (chDB embedded or a ClickHouse server): each base class is one
    reader's methods (see the module), `StoreBase` what they share."""

    def migrate(self) -> int:
        """Bring the store to the current schema, record it in `schema_migrations`, align TTLs. Returns the version.

        A new store (nothing recorded, no table yet) is created from the schema's definition and recorded at every
        version; any other runs the migrations its ledger lacks, in order (`ragmon.sinks.migrations`)."""
        for statement in bootstrap_statements(self.topology):
            self.backend.execute(statement)
        self.backend.use_database(self.topology.database)
        ledger = self._ddl.table("schema_migrations")
        applied = {row["version"] for row in self._select(f"SELECT version FROM {ledger} FINAL")}
        pending = migrations(self.topology, self.retention)
        # The definition is the schema the whole list builds (a shorter one, a test's, builds its own).
        new = not applied and pending[-1].version == SCHEMA_VERSION and not self._has_tables()
        if new:
            for statement in create_statements(self.topology, self.retention):
                self.backend.execute(statement)
        for migration in pending:
            if migration.version in applied:
                continue
            if not new:
                self._run(migration.statements)
            self.backend.execute(
                f"INSERT INTO {ledger} (version, description) VALUES ({{v:UInt32}}, {{d:String}})",
                {"v": migration.version, "d": migration.description},
            )
        self._apply_retention()
        return max(applied | {SCHEMA_VERSION})

    def _has_tables(self) -> bool:
        """Whether the database holds a table besides the ledger (a store made by an older ragmon, or one whose
        creation was cut short: the migrations bring either here, their statements being no-ops where done)."""
        rows = self._select(
            "SELECT count() AS n FROM system.tables WHERE database = {db:String} AND name != 'schema_migrations'",
            {"db": self.topology.database},
        )
        return bool(rows[0]["n"])

    def _run(self, statements: Sequence[str | Step]) -> None:
        for step in statements:
            if isinstance(step, Step):
                if not self.backend.select(step.only_if).column(0)[0].as_py():
                    continue
                step = step.sql
            self.backend.execute(step)

    def _apply_retention(self) -> None:
        rows = self._select(
            "SELECT name, engine_full FROM system.tables WHERE database = {db:String}",
            {"db": self.topology.database},
        )
        engines = {row["name"]: row["engine_full"] for row in rows}
        for table, _, _ in TTL_COLUMNS:
            engine = engines.get(self._ddl.storage_name(table))
            if engine is None:  # a migration list that stops short of the table's (an older ragmon's, a test's)
                continue
            if ttl_expression(table, self.retention) not in engine:
                # Metadata only: old parts expire on their next merge instead of a rewrite of the table now.
                self.backend.execute(
                    retention_statement(self.topology, table, self.retention),
                    settings={"materialize_ttl_after_modify": 0},
                )


def open_store(
    target: Any,
    *,
    database: str = "ragmon",
    retention: Retention | None = None,
    migrate: bool = True,
    cluster: str | None = None,
    engine_memory_bytes: int | None = None,
    read_connections: int | None = None,
    read_wait_s: float | None = None,
) -> Store:
    """Open (and by default migrate) a store.

    `target`: a ClickHouse URL (`http(s)://user:pass@host:8123`) for a server, a directory for the embedded engine,
    or ragmon `Settings`/`AgentSettings` (their `clickhouse_url` if set, else `<data_dir>/chdb`).
    `engine_memory_bytes` caps the embedded engine's memory (ignored for a server, whose memory is its own).
    `read_connections`: how many callers' reads run at once (default 4); `read_wait_s`: how long a read waits for
    one of them (default 5 s). Given `Settings`, the store takes these and the query budgets from them
    (`agent.read_connections`, `agent.read_wait_s`, `agent.query_budget`, `agent.query_budgets`).
    """
    agent = getattr(target, "agent", target)
    budgets: QueryBudgets | None = None
    if hasattr(agent, "data_dir"):
        target = agent.clickhouse_url or embedded_store(agent.data_dir)
        cluster = cluster or (agent.clickhouse_cluster if agent.clickhouse_url else None)
        budgets = QueryBudgets(agent.query_budget, agent.query_budgets)
        read_connections = read_connections or agent.read_connections
        read_wait_s = read_wait_s or agent.read_wait_s
    connections = read_connections or 4
    read_wait_s = read_wait_s or 5.0
    backend: Backend
    if isinstance(target, str) and target.startswith(("http://", "https://", "clickhouse://", "clickhouses://")):
        from ragmon.sinks.server_backend import ClickHouseServerBackend

        backend = ClickHouseServerBackend(target, read_connections=connections, read_wait_s=read_wait_s)
    else:
        from ragmon.sinks.chdb_backend import ChdbBackend

        backend = ChdbBackend(
            Path(target),
            max_server_memory_bytes=engine_memory_bytes,
            read_connections=connections,
            read_wait_s=read_wait_s,
        )
    store = Store(backend, Topology(database=database, cluster=cluster), retention)
    if budgets is not None:
        store.query_budgets = budgets
    try:
        if migrate:
            store.migrate()
        else:
            backend.use_database(database)  # `ragmon query "SELECT … FROM spans"` reads this store's tables
    except BaseException:
        store.close()
        raise
    return store
