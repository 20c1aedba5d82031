"""The store: migrations at start-up, deduplicated inserts (OTLP envelopes normalised in the engine; payloads,
scores, sampling counts, alerts and labels as rows), the sampler's queries, the report and the read-only query
helper.

Insert policy (the same on both backends, sent with every insert):

- one request per batch (rows go columnar, as Arrow), never row by row;
- `async_insert = 0`: the agent already batches, and async inserts would ignore the deduplication token;
- `insert_deduplicate = 1` with `insert_deduplication_token` = the caller's token (the agent's: its write-ahead-log
  position) or else a hash of the rows. A batch re-sent after a crash carries the same token and is dropped by
  the engine — in `spans` and, with `deduplicate_blocks_in_dependent_materialized_views = 1`, in the per-minute
  rollup, so report counts stay exact. Raw tables are ReplacingMergeTree as a backstop (see `schema.py`);
- `optimize_on_insert = 0`: by default a ReplacingMergeTree runs a merge pass over every inserted block, which
  cannot find anything here (the sorting key ends in (trace_id, span_id)) and cost several times the rest of
  the insert (docs/results.md).

Callers' reads — `query` (a user's SQL, the dashboard's), `report`, `quality`, the label reads — run on the backend's
read pool under the caller's query budget (`query_budgets`, `read_budget.py`), each cancellable (`reading(tag)`,
`cancel(tag)`, `cancel_reads()`; `close()` cancels what runs before it closes). The store's own reads (the
sampler's, the writer's, drift's `read`) keep their own connection and carry no caller's budget.

Errors surface as `StoreError` with `retryable` set; nothing is swallowed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from ragmon.sinks import otlp_views
from ragmon.sinks.activity_sql import span_activity_sql
from ragmon.sinks.alerts_sql import alert_rows_sql
from ragmon.sinks.arrow import to_rows, to_table
from ragmon.sinks.backend import Backend, Settings
from ragmon.sinks.envelope import frame
from ragmon.sinks.errors import (
    PartlyStored,
    QueryBudgetExceeded,
    QueryCancelled,
    QueryRejected,
    ReadersBusy,
    StoreError,
)
from ragmon.sinks.labels_sql import (
    kept_trace_sql,
    labelled_scores_sql,
    review_queue_sql,
    reviewer_label_count_sql,
    trace_labels_sql,
)
from ragmon.sinks.quality import assemble_quality, quality_sql
from ragmon.sinks.queries import assemble_report, report_sql, tenant_filter_settings
from ragmon.sinks.read_budget import (
    QUERY_WAS_CANCELLED,
    QueryBudgets,
    budget_limit,
    budget_settings,
    exceeded,
    scrubbed,
)
from ragmon.sinks.rollup_sql import rollup_sql
from ragmon.sinks.sampler_sql import (
    copy_payloads_sql,
    kept_count_sql,
    payloads_for_judging_sql,
    recent_p95_sql,
    recent_request_durations_sql,
    trace_fragments_sql,
    unjudged_payloads_sql,
)
from ragmon.sinks.schema import (
    ALERT_COLUMNS,
    LABEL_COLUMNS,
    LABEL_WRITES_TABLE,
    PAYLOAD_COLUMNS,
    SAMPLING_COLUMNS,
    SAMPLING_TABLE,
    SCHEMA_VERSION,
    SCORE_COLUMNS,
    TTL_COLUMNS,
    Ddl,
    Retention,
    Step,
    Topology,
    bootstrap_statements,
    migrations,
    retention_statement,
    ttl_expression,
)
from ragmon.sinks.schema_doc import described_with_notes
from ragmon.sinks.sqlguard import metadata_select, normalise_and_check
from ragmon.sinks.traffic import PRODUCTION, Traffic

from ragmon.data_dir import embedded_store

INSERT_SETTINGS: dict[str, int] = {
    "async_insert": 0,
    "insert_deduplicate": 1,
    "deduplicate_blocks_in_dependent_materialized_views": 1,
    "optimize_on_insert": 0,
    # The normalised OTLP rows feed two views (spans, span_content): run them side by side on both cores instead
    # of one after the other.
    "parallel_view_processing": 1,
    # Every INSERT plans the normalising views again (paid per insert whatever its size): merging their expression
    # steps into one is a good part of that and made the views no faster to run (docs/results.md).
    "query_plan_merge_expressions": 0,
}


# A part of a split OTLP batch carries at least this many request bytes: each INSERT plans the views once.
MIN_INSERT_PART_BYTES = 4 * 1024 * 1024


def split_envelopes(envelopes: Sequence[bytes], parts: int, min_part_bytes: int) -> list[Sequence[bytes]]:
    """`envelopes` cut into at most `parts` consecutive runs of about equal bytes, each of at least
    `min_part_bytes` (one run when the batch is too small to split)."""
    total = sum(len(e) for e in envelopes)
    count = max(1, min(parts, len(envelopes), total // min_part_bytes))
    if count == 1:
        return [envelopes]
    out: list[Sequence[bytes]] = []
    start, seen = 0, 0
    for i, envelope in enumerate(envelopes):
        seen += len(envelope)
        if len(out) < count - 1 and seen >= total * (len(out) + 1) / count:
            out.append(envelopes[start : i + 1])
            start = i + 1
    out.append(envelopes[start:])
    return [part for part in out if part]


def _json(values: Any) -> str:
    """A JSON text parameter (why not ``Array`` parameters: `ragmon.sinks.sampler_sql.copy_payloads_sql`)."""
    return json.dumps(values, ensure_ascii=False)


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
    """Integers are unix nanoseconds everywhere (as in OTLP); Arrow wants the column's own unit."""
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
        self._otlp_settings: dict[str, str] | None = None  # set by install_otlp_views
        self.insert_streams = 2  # concurrent INSERTs per large OTLP batch (`insert_otlp`)
        self.min_insert_part_bytes = MIN_INSERT_PART_BYTES
        self._insert_pool: ThreadPoolExecutor | None = None
        # Callers' reads (`_caller_read`): their budgets, and what runs now — read tag → its `reading` scope.
        self.query_budgets = QueryBudgets()
        self._reads_changed = threading.Condition()
        self._running: dict[str, _ReadScope | None] = {}
        self._scopes: dict[str, list[_ReadScope]] = {}
        self._closing = False

    # --- schema -----------------------------------------------------------------------------------------

    def migrate(self) -> int:
        """Apply pending migrations in order, record each in `schema_migrations`, align TTLs. Returns the version."""
        for statement in bootstrap_statements(self.topology):
            self.backend.execute(statement)
        self.backend.use_database(self.topology.database)
        ledger = self._ddl.table("schema_migrations")
        applied = {row["version"] for row in self._select(f"SELECT version FROM {ledger} FINAL")}
        for migration in migrations(self.topology, self.retention):
            if migration.version in applied:
                continue
            for step in migration.statements:
                if isinstance(step, Step):
                    if not self.backend.select(step.only_if).column(0)[0].as_py():
                        continue
                    step = step.sql
                self.backend.execute(step)
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
            engine = engines.get(self._ddl.storage_name(table))
            if engine is None:  # a migration list that stops short of the table's (an older ragmon's, a test's)
                continue
            if ttl_expression(table, self.retention) not in engine:
                # Metadata only: old parts expire on their next merge instead of a rewrite of the table now.
                self.backend.execute(
                    retention_statement(self.topology, table, self.retention),
                    settings={"materialize_ttl_after_modify": 0},
                )

    # --- inserts ----------------------------------------------------------------------------------------

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

    def insert_sampling_counts(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str:
        """Sampling decisions per (minute, tenant, feature, outcome, reason): keys of `schema.SAMPLING_COLUMNS`."""
        return self._insert_rows(SAMPLING_TABLE, SAMPLING_COLUMNS, rows, dedup_token)

    def insert_alerts(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str:
        """Alert state changes with keys from `schema.ALERT_COLUMNS`."""
        return self._insert_rows("alerts", ALERT_COLUMNS, rows, dedup_token)

    def insert_labels(self, rows: Iterable[Mapping[str, Any]]) -> str:
        """People's labels with keys from `schema.LABEL_COLUMNS`, into the audit log `label_writes`; its view puts
        them in `labels`, where each replaces the reviewer's earlier label of that trace and metric. No caller's
        token: two writes of the same label at different times are two audit rows."""
        return self._insert_rows(LABEL_WRITES_TABLE, LABEL_COLUMNS, rows, None)

    # --- labels: reads --------------------------------------------------------------------------------

    def _tenant_settings(self, tenant: str | None) -> dict[str, Any] | None:
        return tenant_filter_settings(self.topology, tenant) if tenant is not None else None

    def is_kept_trace(self, tenant: str, trace_id: str) -> bool:
        """Whether `tenant` has a kept trace `trace_id` (its payload): what may be labelled."""
        rows = self._caller_rows(kept_trace_sql(self._ddl), {"tenant": tenant, "trace_id": trace_id}, tenant=tenant)
        return bool(rows and rows[0]["kept"])

    def review_queue(
        self, metric: str, *, since_s: float, per_bin: int, bins: int, reviewer: str, tenant: str | None
    ) -> list[dict[str, Any]]:
        """Traces to label for `metric`, `per_bin` per score bin (`labels_sql.review_queue_sql`)."""
        params = {
            "metric": metric,
            "since_s": int(since_s),
            "per_bin": int(per_bin),
            "bins": int(bins),
            "reviewer": reviewer,
        }
        return self._caller_rows(review_queue_sql(self._ddl), params, tenant=tenant, tenant_filter=True)

    def reviewer_label_count(self, metric: str, reviewer: str, *, tenant: str | None) -> int:
        """Traces `reviewer` has labelled for `metric`."""
        params = {"metric": metric, "reviewer": reviewer}
        sql = reviewer_label_count_sql(self._ddl)
        return int(self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)[0]["n"])

    def trace_labels(self, trace_id: str, *, tenant: str | None) -> list[dict[str, Any]]:
        """A trace's current labels, every metric and reviewer."""
        return self._caller_rows(trace_labels_sql(self._ddl), {"trace_id": trace_id}, tenant=tenant, tenant_filter=True)

    def labelled_scores(
        self, since_s: float, *, judge_version: str | None = None, tenant: str | None = None
    ) -> list[dict[str, Any]]:
        """Labels of the last `since_s` seconds beside the judge's score of the same trace and metric, per judge
        version (`labels_sql.labelled_scores_sql`): what `ragmon calibrate --from-store` measures agreement on."""
        params: dict[str, Any] = {"since_s": int(since_s)}
        if judge_version is not None:
            params["judge_version"] = judge_version
        sql = labelled_scores_sql(self._ddl, one_version=judge_version is not None)
        rows = self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)
        for row in rows:
            row["label"] = bool(row["label"])
        return rows

    # --- the OTLP path --------------------------------------------------------------------------------

    @property
    def otlp_input_table(self) -> str:
        """The qualified `otlp_in` table the normalising SELECTs read from."""
        return self._ddl.table(otlp_views.INPUT_TABLE)

    def install_otlp_views(
        self,
        proto_schema: str,
        message: str,
        input_columns: Sequence[tuple[str, str]],
        normalise_select: otlp_views.SelectSql,
        spans_select: otlp_views.SelectSql,
        content_select: otlp_views.SelectSql,
    ) -> None:
        """Create (or replace, when the SQL changed) `otlp_in`, the view that normalises it into `otlp_norm`, and
        the views from there into `spans` and `span_content`.

        The SELECTs may be text or functions of the table they read (`otlp_input_table` for `normalise_select`,
        the normalised table for the others). Idempotent; run it at start-up before receivers accept traffic.
        See `otlp_views.py` for where the Protobuf schema lives.
        """
        pipeline = otlp_views.build_pipeline(
            self._ddl, proto_schema, message, input_columns, normalise_select, spans_select, content_select
        )
        rows = self._select(
            "SELECT name, comment FROM system.tables WHERE database = {db:String}", {"db": self.topology.database}
        )
        if not otlp_views.is_installed(otlp_views.installed_digests(rows), pipeline):
            for statement in otlp_views.install_statements(self._ddl, pipeline):
                self.backend.execute(statement)
        self._otlp_settings = self._schema_settings(pipeline)

    def _schema_settings(self, pipeline: otlp_views.OtlpPipeline) -> dict[str, str]:
        path = getattr(self.backend, "path", None)
        if self.backend.kind == "chdb" and path is not None:
            written = otlp_views.write_schema_file(Path(path) / "format_schemas", pipeline)
            return otlp_views.file_schema_settings(str(written), pipeline.message)
        inline = self._select("SELECT count() AS n FROM system.settings WHERE name = 'format_schema_source'")
        if inline and inline[0]["n"]:
            return otlp_views.inline_schema_settings(pipeline)
        # An older server: the file must already be in its format_schema_path (see otlp_views.py).
        return otlp_views.file_schema_settings(otlp_views.schema_file_name(pipeline), pipeline.message)

    def insert_otlp(self, envelopes: Sequence[bytes], dedup_token: str) -> None:
        """Store many envelopes through the views; a re-sent `dedup_token` (with the same envelopes) is invisible in
        `spans`, `span_content` and the rollups.

        One INSERT parses and normalises on one core, so a large batch goes as `insert_streams` INSERTs at once,
        each with its own token derived from `dedup_token` (the split depends only on the envelopes, so a re-send
        splits the same way). Each part pays the views' planning (~0.15 s), hence the minimum part size."""
        if self._otlp_settings is None:
            raise StoreError("insert_otlp before install_otlp_views", retryable=False)
        if not envelopes:
            return
        parts = split_envelopes(envelopes, self.insert_streams, self.min_insert_part_bytes)
        if len(parts) == 1:
            self._insert_envelopes(envelopes, dedup_token)
            return
        if self._insert_pool is None:
            self._insert_pool = ThreadPoolExecutor(self.insert_streams - 1, thread_name_prefix="ragmon-insert")
        others = [
            self._insert_pool.submit(self._insert_envelopes, part, f"{dedup_token}/{i}")
            for i, part in enumerate(parts[1:], start=2)
        ]
        errors: list[BaseException | None] = []
        try:
            self._insert_envelopes(parts[0], f"{dedup_token}/1")
            errors.append(None)
        except BaseException as exc:
            errors.append(exc)
        errors.extend(other.exception() for other in others)  # every part has finished before this returns
        failed = [i for i, error in enumerate(errors) if error is not None]
        if not failed:
            return
        first = errors[failed[0]]
        assert first is not None
        if len(failed) == len(parts) or not isinstance(first, StoreError):
            raise first
        starts = [sum(len(p) for p in parts[:i]) for i in range(len(parts))]
        raise PartlyStored(first, [(starts[i], starts[i] + len(parts[i])) for i in failed]) from first

    def _insert_envelopes(self, envelopes: Sequence[bytes], dedup_token: str) -> None:
        assert self._otlp_settings is not None
        settings: Settings = {**INSERT_SETTINGS, "insert_deduplication_token": dedup_token, **self._otlp_settings}
        self.backend.insert_raw(self.otlp_input_table, "Protobuf", frame(envelopes), settings)

    # --- the sampler's queries --------------------------------------------------------------------------

    def trace_fragment_table(self, seq_from: int, seq_to: int) -> pa.Table:
        """One summary per (tenant, trace_id) among the spans with ingest_seq in [seq_from, seq_to], as a table (the
        sampler's hot path reads it as arrays). `stage_max_ms` is a Map(stage, ms)."""
        params = {"seq_from": int(seq_from), "seq_to": int(seq_to)}
        # the read connection: on the embedded engine the sampler's query then runs beside the next insert
        return self.backend.select(trace_fragments_sql(self._ddl), params, readonly=True)

    def trace_fragments(self, seq_from: int, seq_to: int) -> list[dict[str, Any]]:
        """The same summaries as rows (for tools and tests)."""
        rows = to_rows(self.trace_fragment_table(seq_from, seq_to))
        for row in rows:
            row["root_seen"] = bool(row["root_seen"])
            row["stage_max_ms"] = dict(row["stage_max_ms"] or ())
        return rows

    def roll_up(
        self, seq_from: int, seq_to: int, dedup_token: str | None = None, *, context_to: int | None = None
    ) -> None:
        """Add the spans with ingest_seq in [seq_from, seq_to] to the minute rollup (and through it the hourly
        one), one call per nested run of a stage (`rollup_sql.py`), their ancestors looked up among the spans of
        [seq_from, context_to] (default: everything stored since). Roll a range up once, after its traces are
        whole: the agent does it when the sampler has decided them; a re-run with the same token is dropped."""
        token = dedup_token or f"rollup:{int(seq_from)}-{int(seq_to)}"
        # a trace is whole on one shard: the subquery that finds the range's traces runs shard by shard
        settings: Settings = {
            **INSERT_SETTINGS,
            "insert_deduplication_token": token,
            "distributed_product_mode": "local",
        }
        params = {"seq_from": int(seq_from), "seq_to": int(seq_to), "context_to": context_to or 2**64 - 1}
        self.backend.execute(rollup_sql(self._ddl), params, settings)

    def copy_payloads(self, kept: Sequence[Mapping[str, Any]]) -> None:
        """Copy the kept traces' captured text from `span_content` into `payloads` (in the engine), with their
        sampling reasons and inclusion probability. Idempotent.

        A row's `first_ingest_seq` (the sampler's: its spans were all stored at or after it) bounds what the copy
        reads to recent parts; without it the copy reads every stored span's trace id, which grows with the store."""
        unique: dict[tuple[str, str], Mapping[str, Any]] = {}
        for row in kept:
            unique[(str(row["tenant"]), str(row["trace_id"]))] = row
        if not unique:
            return
        lists = {
            "tenants": [tenant for tenant, _ in unique],
            "trace_ids": [trace_id for _, trace_id in unique],
            "reasons": [[str(r) for r in row.get("reasons", ())] for row in unique.values()],
            "probabilities": [float(row.get("probability", 1.0)) for row in unique.values()],
        }
        params: dict[str, Any] = {name: _json(values) for name, values in lists.items()}
        params["min_seq"] = min(int(row.get("first_ingest_seq") or 0) for row in unique.values())
        # the params say all there is to copy: hashing them is cheaper than hashing the rows one by one
        digest = hashlib.blake2b(json.dumps(params, ensure_ascii=False).encode(), digest_size=16).hexdigest()
        token = f"payloads:{len(unique)}:{digest}"
        self.backend.execute(
            copy_payloads_sql(self._ddl), params, settings={**INSERT_SETTINGS, "insert_deduplication_token": token}
        )

    def kept_payload_count(self, traces: Sequence[tuple[str, str]]) -> int:
        """How many of `traces` ((tenant, trace_id) pairs) have a payload row (for tools and tests: the agent's
        copies do not ask, the count reads the payloads table)."""
        if not traces:
            return 0
        params = {"tenants": _json([t for t, _ in traces]), "trace_ids": _json([i for _, i in traces])}
        return int(self._select(kept_count_sql(self._ddl), params, readonly=True)[0]["n"])

    def payloads_for_judging(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """trace_id → its payload's question, answer, passage_texts, feature, eval_run, sampling_reason and
        inclusion_probability, for those of `trace_ids` (of `tenant`) that have one: one query for many traces."""
        if not trace_ids:
            return {}
        params = {"tenant": tenant, "trace_ids": list(trace_ids)}
        rows = self._select(payloads_for_judging_sql(self._ddl), params, readonly=True)
        return {row["trace_id"]: row for row in rows}

    def unjudged_payloads(self, since_s: float = 7 * 86400, limit: int = 100_000) -> list[dict[str, Any]]:
        """Kept traces of the last `since_s` seconds with no online score yet (tenant, trace_id, feature,
        sampling_reason, inclusion_probability), oldest first, at most `limit`: the judge queue's start-up
        catch-up."""
        rows = self._select(
            unjudged_payloads_sql(self._ddl),
            {"since_s": int(since_s), "limit": int(limit)},
            settings={"distributed_product_mode": "local"},
            readonly=True,
        )
        return rows

    def recent_p95(self, window_s: int = 900) -> dict[tuple[str, str], float]:
        """(feature, stage) → p95 duration in ms over the last `window_s` seconds, from the per-minute rollup."""
        rows = self._select(recent_p95_sql(self._ddl), {"window_s": int(window_s)}, readonly=True)
        return {(r["feature"], r["stage"]): float(r["p95_ms"]) for r in rows if r["p95_ms"] == r["p95_ms"]}

    def recent_request_durations(self, window_s: int, per_feature: int) -> dict[tuple[str, str], list[float]]:
        """(tenant, feature) → the durations (ms) of its latest `per_feature` root spans of the last `window_s`
        seconds, oldest first (`sampler_sql.recent_request_durations_sql`)."""
        params = {"window_s": int(window_s), "per_feature": int(per_feature)}
        rows = self._select(recent_request_durations_sql(self._ddl), params, readonly=True)
        return {(r["tenant"], r["feature"]): [float(d) for d in r["durations_ms"]] for r in rows}

    def span_activity(
        self, start_s: float, end_s: float | None = None, *, service: str | None = None
    ) -> dict[str, int]:
        """{spans, traces, last_s} of the spans that started in [start_s, end_s) (of `service` when named):
        `activity_sql.span_activity_sql`."""
        sql, params = span_activity_sql(self._ddl, int(start_s), None if end_s is None else int(end_s), service=service)
        rows = self._select(sql, params, readonly=True)
        row = rows[0] if rows else {}
        return {name: int(row.get(name) or 0) for name in ("spans", "traces", "last_s")}

    def alert_rows(self, alert_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Every stored row (state change) of the alerts `alert_ids` (`alerts_sql.alert_rows_sql`)."""
        if not alert_ids:
            return []
        sql, params = alert_rows_sql(self._ddl, list(alert_ids))
        return self._select(sql, params, readonly=True)

    # --- reads ------------------------------------------------------------------------------------------

    def _select(self, sql: str, params: Mapping[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
        return to_rows(self.backend.select(sql, params, **kwargs))

    def read(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Rows of ragmon's own read-side SQL (the drift signals in `ragmon.drift.store_source`) — trusted
        text, unlike a user's `query` — on the read-only connection, so on the embedded engine it never waits
        behind the writer's inserts."""
        return self._select(sql, params, readonly=True)

    def report(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
    ) -> list[dict[str, Any]]:
        """Latency, errors, tokens and cost per (feature, stage), with a per-model breakdown, over the last
        `since_s` seconds (whole minutes) of `traffic` (production unless asked) — read from the rollups only
        (whole hours from `spans_1h`, the edges from `spans_1m`)."""
        end_s = int(time.time() if now_s is None else now_s)
        sql, params = report_sql(self.topology, end_s - int(since_s), end_s, feature, tenant, traffic)
        # the tenant is a condition of the report's own SQL (`report_sql`): the rollups are read through no filter
        return assemble_report(self._caller_rows(sql, params, tenant=tenant))

    def quality(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
    ) -> list[dict[str, Any]]:
        """Judged quality per (feature, day, metric, judge version) over the last `since_s` seconds: over the kept
        traces and weighted back to all traffic, with 95 % intervals (`ragmon.sinks.quality`)."""
        end_s = int(time.time() if now_s is None else now_s)
        sql, params = quality_sql(
            end_s - int(since_s), end_s, feature, self._ddl.table("scores"), traffic, self._ddl.table("payloads")
        )
        return assemble_quality(self._caller_rows(sql, params, tenant=tenant, tenant_filter=True))

    def query(
        self,
        sql: str,
        params: Mapping[str, Any] | None = None,
        *,
        tenant: str | None = None,
        max_rows: int = 10_000,
        cut_at_max_rows: bool = False,
        query_tag: str | None = None,
    ) -> list[dict[str, Any]]:
        """Run a user's read-only SELECT (`ragmon query`; `DESCRIBE t` and `SHOW TABLES` read as their SELECTs
        over `system`). Raises QueryRejected for anything else.

        Past `max_rows` result rows (or the budget's `max_result_rows`, if fewer) the engine stops: an error by
        default, or with `cut_at_max_rows` the first `max_rows + 1` rows, the extra one telling the caller there
        were more. With `tenant`, the engine filters every tenant-bearing table to that tenant
        (`additional_table_filters`), and the query may name only this store's tables (no `system.*`).
        Runs under the tenant's query budget; `query_tag` is `reading(query_tag)` for this one read.
        """
        if query_tag is not None:
            with self.reading(query_tag):
                return self.query(
                    sql, params, tenant=tenant, max_rows=max_rows, cut_at_max_rows=cut_at_max_rows, query_tag=None
                )
        metadata = metadata_select(sql)
        allowed_database = self.topology.database if tenant is not None else None
        if metadata is not None:
            if tenant is not None and metadata.database not in (None, self.topology.database):
                raise QueryRejected(f"database {metadata.database} is not allowed: this store's is {allowed_database}")
            sql = metadata.sql
            allowed_database = None  # ragmon's own SELECT over system.tables/columns, of one database (above)
        params = dict(params or {})

        def run_text(text: str, text_params: dict[str, Any]) -> str:
            # No settings on these two: `EXPLAIN AST <text> SETTINGS …` would explain them as the user's own.
            table = self._caller_read(text, text_params, tenant=tenant, budgeted=False)
            return "\n".join(str(v) for v in table.column(0).to_pylist())

        checked = normalise_and_check(sql, run_text, params, allowed_database=allowed_database)
        budget = self.query_budgets.for_tenant(tenant)
        cap_rows = min(max_rows, budget.max_result_rows)
        settings: dict[str, Any] = {"max_result_rows": cap_rows}
        if cut_at_max_rows:
            # `limit` is an outer LIMIT (subqueries keep their rows); the cap's extra row says there were more.
            settings = {"limit": cap_rows + 1, "max_result_rows": cap_rows + 1}
        rows = to_rows(
            self._caller_read(checked, params, tenant=tenant, tenant_filter=True, settings=settings, max_rows=max_rows)
        )
        if cut_at_max_rows and len(rows) > cap_rows and cap_rows < max_rows:
            raise exceeded("max_result_rows", self.query_budgets, tenant)  # a cut at the budget would look whole
        if metadata is not None and metadata.table is not None:
            rows = described_with_notes(metadata.table, rows)
        return rows

    # --- callers' reads: budgets, the read pool, cancellation ----------------------------------------------

    @contextmanager
    def reading(self, tag: str | None = None) -> Iterator[str]:
        """Run the reads inside the block (in this thread) as one cancellable unit: `cancel(tag)` from any thread
        stops the one running and fails the ones after it (`QueryCancelled`). Yields the tag (a new one if None).
        For a request that makes several reads (a dashboard view), or one read (`query(..., query_tag=…)`)."""
        scope = _ReadScope(tag if tag is not None else uuid.uuid4().hex, self)
        with self._reads_changed:
            self._scopes.setdefault(scope.tag, []).append(scope)
        token = _CURRENT_SCOPE.set(scope)
        try:
            yield scope.tag
        finally:
            _CURRENT_SCOPE.reset(token)
            with self._reads_changed:
                scopes = self._scopes[scope.tag]
                scopes.remove(scope)
                if not scopes:
                    del self._scopes[scope.tag]

    def cancel(self, tag: str, timeout_s: float = 5.0) -> bool:
        """Cancel the reads of `reading(tag)`: the running one in the engine, later ones before they start.
        Returns once the running read has ended (True) or after `timeout_s` (False). Safe from any thread; a tag
        with no reads is a no-op (True)."""
        with self._reads_changed:
            scopes = list(self._scopes.get(tag, ()))
            for scope in scopes:
                scope.cancelled = True
            reads = [read for read, scope in self._running.items() if scope is not None and scope in scopes]
        return self._stop(reads, timeout_s)

    def cancel_reads(self, timeout_s: float = 5.0) -> bool:
        """Cancel every caller's read running now (at shutdown; `close` does it first). True when all ended."""
        with self._reads_changed:
            reads = list(self._running)
        return self._stop(reads, timeout_s)

    def running_reads(self) -> int:
        """Callers' reads out now (waiting for a connection or running): a gauge for `/metrics`."""
        with self._reads_changed:
            return len(self._running)

    def _stop(self, reads: list[str], timeout_s: float) -> bool:
        """Cancel the engine reads `reads` until they have all returned: a kill can reach the engine before the
        read does (it then finds nothing), so it is sent again every 0.1 s while the read is still out."""
        deadline_s = time.monotonic() + timeout_s
        while True:
            with self._reads_changed:
                live = [read for read in reads if read in self._running]
            if not live:
                return True
            if time.monotonic() >= deadline_s:
                return False
            for read in live:
                with contextlib.suppress(StoreError):  # the store closing under us: the loop's deadline decides
                    self.backend.cancel(read)
            with self._reads_changed:
                if any(read in self._running for read in live):
                    self._reads_changed.wait(0.1)

    def _caller_rows(
        self, sql: str, params: Mapping[str, Any] | None, *, tenant: str | None, tenant_filter: bool = False
    ) -> list[dict[str, Any]]:
        return to_rows(self._caller_read(sql, params, tenant=tenant, tenant_filter=tenant_filter))

    def _caller_read(
        self,
        sql: str,
        params: Mapping[str, Any] | None,
        *,
        tenant: str | None,
        tenant_filter: bool = False,
        settings: Mapping[str, Any] | None = None,
        budgeted: bool = True,
        max_rows: int | None = None,
    ) -> pa.Table:
        """One read for a caller: on the backend's read pool, under `tenant`'s budget (unless not `budgeted`: the
        guard's parse-only reads), with the tenant filter if asked, cancellable (`reading`, `cancel_reads`).
        Errors come back scrubbed of the settings sent, budget hits as QueryBudgetExceeded."""
        scope = _CURRENT_SCOPE.get()
        if scope is not None and scope.store is not self:
            scope = None
        sent: dict[str, Any] = budget_settings(self.query_budgets.for_tenant(tenant)) if budgeted else {}
        sent.update(settings or {})
        if tenant_filter and tenant is not None:
            sent.update(tenant_filter_settings(self.topology, tenant))
        read = uuid.uuid4().hex
        with self._reads_changed:
            if self._closing:
                raise QueryCancelled("the read was not run: the store is closing", retryable=True, code=394)
            if scope is not None and scope.cancelled:
                raise QueryCancelled("the read was cancelled", retryable=False, code=394)
            self._running[read] = scope
        try:
            return self.backend.read(sql, params, sent, tag=read)
        except StoreError as exc:
            raise self._read_error(exc, sent, tenant, scope, max_rows) from exc
        finally:
            with self._reads_changed:
                del self._running[read]
                self._reads_changed.notify_all()

    def _read_error(
        self,
        exc: StoreError,
        sent: Mapping[str, Any],
        tenant: str | None,
        scope: _ReadScope | None,
        max_rows: int | None,
    ) -> StoreError:
        if isinstance(exc, QueryRejected | ReadersBusy):
            return exc
        if exc.code == QUERY_WAS_CANCELLED:
            if self._closing:
                return QueryCancelled("the read was cancelled: the store is closing", retryable=True, code=exc.code)
            why = "by its caller" if scope is not None and scope.cancelled else "in the engine"
            return QueryCancelled(f"the read was cancelled {why}", retryable=False, code=exc.code)
        limit = budget_limit(exc.code, str(exc))
        if (
            limit == "max_result_rows"
            and max_rows is not None
            and max_rows < self.query_budgets.for_tenant(tenant).max_result_rows
        ):
            return QueryBudgetExceeded(
                f"query stopped: its result has more than {max_rows:,} rows (the request's max_rows)",
                limit="max_rows",
                setting="max_rows",
                code=exc.code,
            )
        if limit is not None and "max_execution_time" in sent:
            return exceeded(limit, self.query_budgets, tenant, exc.code)
        return scrubbed(exc, sent)

    def close(self, timeout_s: float = 5.0) -> None:
        """Refuse new reads, cancel the running ones (waiting at most `timeout_s` for them to end), then close."""
        with self._reads_changed:
            self._closing = True
        self.cancel_reads(timeout_s)
        if self._insert_pool is not None:
            self._insert_pool.shutdown(wait=True)
        self.backend.close()


class _ReadScope:
    """The reads of one `Store.reading` block: its tag, whether it was cancelled."""

    __slots__ = ("cancelled", "store", "tag")

    def __init__(self, tag: str, store: Store) -> None:
        self.tag = tag
        self.store = store
        self.cancelled = False


# The `Store.reading` block this thread (or task) is in: how a read learns its caller's tag without every read
# method taking one.
_CURRENT_SCOPE: ContextVar[_ReadScope | None] = ContextVar("ragmon_read_scope", default=None)


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
