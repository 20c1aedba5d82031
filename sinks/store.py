"""The store: migrations at start-up, deduplicated columnar inserts, the report and the read-only query helper.

Insert policy (the same on both backends, sent with every insert):

- one request per batch, columnar (Arrow), never row by row;
- `async_insert = 0`: the agent already batches, and async inserts would ignore the deduplication token;
- `insert_deduplicate = 1` with `insert_deduplication_token` = a hash of the batch's (trace_id, span_id) keys
  (or the caller's token, e.g. its write-ahead-log position). A batch re-sent after a crash carries the same
  token and is dropped by the engine — in `spans` and, with
  `deduplicate_blocks_in_dependent_materialized_views = 1`, in the per-minute rollup, so report counts stay
  exact. Raw tables are ReplacingMergeTree as a backstop (see `schema.py`).

Errors surface as `StoreError` with `retryable` set; nothing is swallowed.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ragmon.model import SPAN_COLUMNS, SpanBatch
from sinks.arrow import to_rows, to_table
from sinks.backend import Backend
from sinks.errors import StoreError
from sinks.queries import assemble_report, report_sql, tenant_filter_settings
from sinks.schema import (
    ALERT_COLUMNS,
    PAYLOAD_COLUMNS,
    SCHEMA_VERSION,
    SCORE_COLUMNS,
    TTL_COLUMNS,
    Ddl,
    Retention,
    Topology,
    bootstrap_statements,
    migrations,
    retention_statement,
    ttl_expression,
)
from sinks.sqlguard import normalise_and_check

INSERT_SETTINGS: dict[str, int] = {
    "async_insert": 0,
    "insert_deduplicate": 1,
    "deduplicate_blocks_in_dependent_materialized_views": 1,
}


def batch_token(batch: SpanBatch) -> str:
    """A deterministic token for a span batch: the same spans in the same order give the same token."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update("\n".join(batch.tenant).encode())
    digest.update(b"\0")
    digest.update("\n".join(batch.trace_id).encode())
    digest.update(b"\0")
    digest.update("\n".join(batch.span_id).encode())
    return f"spans:{len(batch)}:{digest.hexdigest()}"


def rows_token(kind: str, rows: Sequence[Mapping[str, Any]]) -> str:
    text = json.dumps(list(rows), sort_keys=True, default=str, ensure_ascii=False)
    return f"{kind}:{len(rows)}:{hashlib.blake2b(text.encode(), digest_size=16).hexdigest()}"


def _default(ch_type: str) -> Any:
    if ch_type.startswith("Nullable"):
        return None
    if ch_type.startswith("Array"):
        return []
    if ch_type.startswith("Map"):
        return {}
    if ch_type.startswith("DateTime"):
        return datetime.now(UTC)
    if "String" in ch_type:
        return ""
    return 0


def _time_value(value: Any, ch_type: str) -> Any:
    """Integers are unix nanoseconds everywhere (as in SpanBatch); Arrow wants the column's own unit."""
    if isinstance(value, int) and not isinstance(value, bool):
        if ch_type == "DateTime64(3)":
            return value // 1_000_000
        if ch_type == "DateTime":
            return value // 1_000_000_000
    return value


def rows_to_columns(rows: Sequence[Mapping[str, Any]], columns: tuple[tuple[str, str], ...]) -> dict[str, list[Any]]:
    """Row dicts → columns; a missing key takes the type's default, an unknown key is an error (typos)."""
    known = {name for name, _ in columns}
    for row in rows:
        unknown = set(row) - known
        if unknown:
            raise StoreError(f"unknown columns {sorted(unknown)}", retryable=False)
    out: dict[str, list[Any]] = {}
    for name, ch_type in columns:
        values = [row[name] if name in row else _default(ch_type) for row in rows]
        if ch_type.startswith("DateTime"):
            values = [_time_value(v, ch_type) for v in values]
        out[name] = values
    return out


class Store:
    """ragmon's ClickHouse store over one backend (chDB embedded or a ClickHouse server)."""

    def __init__(self, backend: Backend, topology: Topology | None = None, retention: Retention | None = None):
        self.backend = backend
        self.topology = topology or Topology()
        self.retention = retention or Retention()
        self._ddl = Ddl(self.topology)

    # --- schema -----------------------------------------------------------------------------------------

    def migrate(self) -> int:
        """Apply pending migrations in order, record each in `schema_migrations`, align TTLs. Returns the version."""
        for statement in bootstrap_statements(self.topology):
            self.backend.execute(statement)
        ledger = self._ddl.table("schema_migrations")
        applied = {row["version"] for row in self._select(f"SELECT version FROM {ledger} FINAL")}
        for migration in migrations(self.topology, self.retention):
            if migration.version in applied:
                continue
            for statement in migration.statements:
                self.backend.execute(statement)
            self.backend.execute(
                f"INSERT INTO {ledger} (version, description) VALUES ({{v:UInt32}}, {{d:String}})",
                {"v": migration.version, "d": migration.description},
            )
        self._apply_retention()
        return max(applied | {SCHEMA_VERSION})

    def _apply_retention(self) -> None:
        rows = self._select(
            "SELECT name, engine_full FROM system.tables WHERE database = {db:String}",
            {"db": self.topology.database},
        )
        engines = {row["name"]: row["engine_full"] for row in rows}
        for table, _, _ in TTL_COLUMNS:
            if ttl_expression(table, self.retention) not in engines.get(table, ""):
                # Metadata only: old parts expire on their next merge instead of a rewrite of the table now.
                self.backend.execute(
                    retention_statement(self.topology, table, self.retention),
                    settings={"materialize_ttl_after_modify": 0},
                )

    # --- inserts ----------------------------------------------------------------------------------------

    def insert_spans(self, batch: SpanBatch, dedup_token: str | None = None) -> str:
        """Insert every span of `batch` in one request; returns the deduplication token used."""
        if not len(batch):
            return ""
        token = dedup_token or batch_token(batch)
        table = to_table(batch.columns(), SPAN_COLUMNS)
        self.backend.insert(self._ddl.table("spans"), table, {**INSERT_SETTINGS, "insert_deduplication_token": token})
        return token

    def _insert_rows(
        self, name: str, columns: tuple[tuple[str, str], ...], rows: Iterable[Mapping[str, Any]], token: str | None
    ) -> str:
        rows = list(rows)
        if not rows:
            return ""
        token = token or rows_token(name, rows)
        table = to_table(rows_to_columns(rows, columns), columns)
        self.backend.insert(self._ddl.table(name), table, {**INSERT_SETTINGS, "insert_deduplication_token": token})
        return token

    def insert_payloads(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str:
        """Kept traces' text, one dict per trace with keys from `schema.PAYLOAD_COLUMNS`."""
        return self._insert_rows("payloads", PAYLOAD_COLUMNS, rows, dedup_token)

    def insert_scores(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str:
        """Judge results, one dict per (trace, metric, judge version) with keys from `schema.SCORE_COLUMNS`."""
        return self._insert_rows("scores", SCORE_COLUMNS, rows, dedup_token)

    def insert_alerts(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str:
        """Alert state changes with keys from `schema.ALERT_COLUMNS`."""
        return self._insert_rows("alerts", ALERT_COLUMNS, rows, dedup_token)

    # --- reads ------------------------------------------------------------------------------------------

    def _select(self, sql: str, params: Mapping[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
        return to_rows(self.backend.select(sql, params, **kwargs))

    def report(
        self, since_s: float, *, feature: str | None = None, tenant: str | None = None, now_s: float | None = None
    ) -> list[dict[str, Any]]:
        """Latency, errors, tokens and cost per (feature, stage), with a per-model breakdown, over the last
        `since_s` seconds (whole minutes) — read from the per-minute rollup only."""
        end_s = int(time.time() if now_s is None else now_s)
        sql, params = report_sql(self.topology, end_s - int(since_s), end_s, feature, tenant)
        return assemble_report(self._select(sql, params))

    def query(
        self, sql: str, params: Mapping[str, Any] | None = None, *, tenant: str | None = None, max_rows: int = 10_000
    ) -> list[dict[str, Any]]:
        """Run a user's read-only SELECT (`ragmon query`). Raises QueryRejected for anything else.

        With `tenant`, the engine filters every tenant-bearing table to that tenant (`additional_table_filters`).
        """
        params = dict(params or {})

        def run_text(text: str, text_params: dict[str, Any]) -> str:
            table = self.backend.select(text, text_params, readonly=True)
            return "\n".join(str(v) for v in table.column(0).to_pylist())

        checked = normalise_and_check(sql, run_text, params)
        settings: dict[str, Any] = {"max_result_rows": max_rows, "result_overflow_mode": "throw"}
        if tenant is not None:
            settings.update(tenant_filter_settings(self.topology, tenant))
        return self._select(checked, params, settings=settings, readonly=True)

    def close(self) -> None:
        self.backend.close()


def open_store(
    target: Any,
    *,
    database: str = "ragmon",
    retention: Retention | None = None,
    migrate: bool = True,
) -> Store:
    """Open (and by default migrate) a store.

    `target`: a ClickHouse URL (`http(s)://user:pass@host:8123`) for a server, a directory for the embedded engine,
    or ragmon `Settings`/`AgentSettings` (their `clickhouse_url` if set, else `<data_dir>/chdb`).
    """
    agent = getattr(target, "agent", target)
    if hasattr(agent, "data_dir"):
        target = agent.clickhouse_url or Path(agent.data_dir) / "chdb"
    backend: Backend
    if isinstance(target, str) and target.startswith(("http://", "https://", "clickhouse://", "clickhouses://")):
        from sinks.server_backend import ClickHouseServerBackend

        backend = ClickHouseServerBackend(target)
    else:
        from sinks.chdb_backend import ChdbBackend

        backend = ChdbBackend(Path(target))
    store = Store(backend, Topology(database=database), retention)
    if migrate:
        try:
            store.migrate()
        except BaseException:
            store.close()
            raise
    return store
