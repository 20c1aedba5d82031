"""The store's schema: every table, view and TTL, generated in one place, and the versioned migrations.

`spans` columns come from `ragmon.model.SPAN_COLUMNS`; the other tables are declared here as (name, type) tuples
so inserts (`arrow.py`) and DDL share one definition. DDL is produced for a `Topology`: today a single node (chDB
or one ClickHouse server); with `cluster` set, the same source yields `ON CLUSTER` statements and `Replicated*`
engines (a `Distributed` layer on top is future work).

Re-sent batches. The writer passes a deterministic `insert_deduplication_token` per batch (see `store.py`), so a
batch the agent re-sends after a crash is dropped by the engine. That needs `non_replicated_deduplication_window`
on *every* MergeTree a span reaches — the `spans` table and the rollup behind each materialised view: measured on
ClickHouse 26.9 (chDB), a deduplicated source block is still pushed into the views
(`deduplicate_blocks_in_dependent_materialized_views=1` is the default) and only the view's own target table,
with a window, drops it again. As a backstop for re-sends that are *not* the same batch (say, regrouped), raw
tables are `ReplacingMergeTree` keyed so duplicates of a span collapse on merge (or at once with `FINAL`); the
per-minute rollups can only be protected by the token, which is why the token derives from the batch content.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragmon.model import SPAN_COLUMNS

SCHEMA_VERSION = 1

# Blocks remembered per table for insert deduplication (one block ≈ one batch per day-partition it touches).
DEDUP_WINDOW_BLOCKS = 10_000

# DDSketch relative accuracy of the per-minute latency states. 0.01 measured up to 0.95% off the exact p95 on a
# bimodal stream (too close to the 1% goal); 0.005 stays under 0.5% with states ~1.7x larger; 0.001 ~4x larger.
# TDigest was as accurate on those streams but guarantees nothing after merges; DDSketch merges are lossless.
QUANTILE_ACCURACY = 0.005
DURATION_LEVELS = (0.5, 0.95, 0.99)
TTFT_LEVELS = (0.95,)


@dataclass(frozen=True, slots=True)
class Retention:
    """Days each table keeps rows (TTL). Applied at migrate() time; changing them alters TTLs in place."""

    spans_days: int = 30
    payloads_days: int = 14
    scores_days: int = 180
    alerts_days: int = 365
    rollups_days: int = 400


@dataclass(frozen=True, slots=True)
class Topology:
    """Where the DDL goes: a database, and optionally a cluster (Replicated engines, ON CLUSTER)."""

    database: str = "ragmon"
    cluster: str | None = None


PAYLOAD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "LowCardinality(String)"),
    ("trace_id", "String"),
    ("feature", "LowCardinality(String)"),
    ("start_time", "DateTime64(9)"),
    ("question", "String"),
    ("answer", "String"),
    ("passages", "Array(Tuple(id String, score Nullable(Float32), text String))"),
    ("tool_calls", "Array(Tuple(name String, arguments String, result String))"),
    ("content", "Map(String, String)"),  # any other captured text, by span/attribute key
    ("sampling_reason", "LowCardinality(String)"),  # error | slow | baseline | forced ...
    ("inclusion_probability", "Float64"),  # P(trace kept); weight = 1 / p
)

SCORE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "LowCardinality(String)"),
    ("trace_id", "String"),
    ("feature", "LowCardinality(String)"),
    ("metric", "LowCardinality(String)"),
    ("judge_version", "LowCardinality(String)"),
    ("value", "Nullable(Float64)"),  # NULL when undefined or the judge failed: never a silent 0
    ("status", "LowCardinality(String)"),  # ok | error | unsupported | skipped
    ("explanation", "String"),
    ("claims", "Array(Tuple(claim String, verdict String, reason String))"),
    ("judge_model", "LowCardinality(String)"),
    ("prompt_version", "LowCardinality(String)"),
    ("input_tokens", "UInt32"),
    ("output_tokens", "UInt32"),
    ("cost_usd", "Nullable(Float64)"),
    ("run_name", "LowCardinality(String)"),  # '' for online judging; a name for back-evaluation runs
    ("scored_at", "DateTime64(3)"),
)

ALERT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "LowCardinality(String)"),
    ("alert_id", "String"),
    ("fired_at", "DateTime64(3)"),
    ("rule", "LowCardinality(String)"),
    ("severity", "LowCardinality(String)"),
    ("state", "LowCardinality(String)"),  # firing | resolved
    ("feature", "LowCardinality(String)"),
    ("stage", "LowCardinality(String)"),
    ("metric", "LowCardinality(String)"),
    ("value", "Nullable(Float64)"),
    ("threshold", "Nullable(Float64)"),
    ("message", "String"),
    ("labels", "Map(String, String)"),
)

# The per-minute rollup the report reads (never raw spans).
ROLLUP_TABLE = "spans_1m"
_levels = ", ".join(str(level) for level in DURATION_LEVELS)
_ttft_levels = ", ".join(str(level) for level in TTFT_LEVELS)
DURATION_STATE = f"quantilesDD({QUANTILE_ACCURACY}, {_levels})"
TTFT_STATE = f"quantilesDD({QUANTILE_ACCURACY}, {_ttft_levels})"

ROLLUP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "LowCardinality(String)"),
    ("feature", "LowCardinality(String)"),
    ("stage", "LowCardinality(String)"),
    ("model", "LowCardinality(String)"),
    ("minute", "DateTime"),
    ("spans", "SimpleAggregateFunction(sum, UInt64)"),
    ("errors", "SimpleAggregateFunction(sum, UInt64)"),
    ("duration_q", f"AggregateFunction({DURATION_STATE}, Float64)"),
    ("ttft_q", f"AggregateFunction({TTFT_STATE}, Nullable(Float32))"),
    ("input_tokens", "SimpleAggregateFunction(sum, UInt64)"),
    ("output_tokens", "SimpleAggregateFunction(sum, UInt64)"),
    ("cached_input_tokens", "SimpleAggregateFunction(sum, UInt64)"),
    ("cost_usd", "SimpleAggregateFunction(sum, Float64)"),
    ("cost_known", "SimpleAggregateFunction(sum, UInt64)"),  # spans whose cost was known (coverage)
)

# Tables whose rows carry a tenant: the read-only query helper filters each of them.
TENANT_TABLES = ("spans", "payloads", "scores", "alerts", ROLLUP_TABLE, f"{ROLLUP_TABLE}_mv")


def quote_identifier(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


class Ddl:
    """DDL text for one topology."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.db = quote_identifier(topology.database)
        self.on_cluster = f" ON CLUSTER {quote_identifier(topology.cluster)}" if topology.cluster else ""

    def table(self, name: str) -> str:
        return f"{self.db}.{quote_identifier(name)}"

    def engine(self, kind: str, table: str, *args: str) -> str:
        if self.topology.cluster:
            path = f"'/clickhouse/tables/{{shard}}/{self.topology.database}/{table}'"
            replica = "'{replica}'"
            return f"Replicated{kind}({', '.join((path, replica, *args))})"
        return f"{kind}({', '.join(args)})"

    def dedup_settings(self) -> str:
        # Replicated tables deduplicate by default (replicated_deduplication_window); plain MergeTree needs a window.
        return "" if self.topology.cluster else f"non_replicated_deduplication_window = {DEDUP_WINDOW_BLOCKS}, "

    def create_database(self) -> str:
        return f"CREATE DATABASE IF NOT EXISTS {self.db}{self.on_cluster}"

    def create_table(
        self,
        name: str,
        columns: tuple[tuple[str, str], ...],
        *,
        engine: str,
        order_by: str,
        partition_by: str | None,
        ttl: str | None,
        extra: tuple[str, ...] = (),
        settings: str = "",
    ) -> str:
        body = ",\n    ".join((*(f"{quote_identifier(c)} {t}" for c, t in columns), *extra))
        parts = [f"CREATE TABLE IF NOT EXISTS {self.table(name)}{self.on_cluster} (\n    {body}\n)"]
        parts.append(f"ENGINE = {engine}")
        if partition_by:
            parts.append(f"PARTITION BY {partition_by}")
        parts.append(f"ORDER BY ({order_by})")
        if ttl:
            parts.append(f"TTL {ttl}")
        parts.append(f"SETTINGS {self.dedup_settings()}{settings}index_granularity = 8192")
        return "\n".join(parts)


def _ttl(column: str, days: int) -> str:
    return f"toDateTime({column}) + toIntervalDay({int(days)})"


# (table, TTL time column, Retention field) — the single list `retention_statements` walks.
TTL_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("spans", "start_time", "spans_days"),
    ("payloads", "start_time", "payloads_days"),
    ("scores", "scored_at", "scores_days"),
    ("alerts", "fired_at", "alerts_days"),
    (ROLLUP_TABLE, "minute", "rollups_days"),
)


def _v1(ddl: Ddl, r: Retention) -> list[str]:
    day_parts = "ttl_only_drop_parts = 1, "
    spans = ddl.create_table(
        "spans",
        SPAN_COLUMNS,
        engine=ddl.engine("ReplacingMergeTree", "spans"),
        partition_by="toYYYYMMDD(start_time)",
        # Everything a duplicate of a span repeats; (trace_id, span_id) last makes the key unique per span.
        order_by="tenant, feature, stage, start_time, trace_id, span_id",
        ttl=_ttl("start_time", r.spans_days),
        extra=("INDEX idx_trace_id trace_id TYPE bloom_filter(0.01) GRANULARITY 4",),
        settings=day_parts,
    )
    payloads = ddl.create_table(
        "payloads",
        (*PAYLOAD_COLUMNS, ("inserted_at", "DateTime64(3) DEFAULT now64(3)")),
        engine=ddl.engine("ReplacingMergeTree", "payloads", "inserted_at"),
        partition_by="toYYYYMMDD(start_time)",
        order_by="tenant, trace_id",
        ttl=_ttl("start_time", r.payloads_days),
        settings=day_parts,
    )
    scores = ddl.create_table(
        "scores",
        SCORE_COLUMNS,
        # A re-judged (trace, metric, judge version, run) keeps its latest score.
        engine=ddl.engine("ReplacingMergeTree", "scores", "scored_at"),
        partition_by="toYYYYMM(scored_at)",
        order_by="tenant, metric, trace_id, judge_version, run_name",
        ttl=_ttl("scored_at", r.scores_days),
    )
    alerts = ddl.create_table(
        "alerts",
        ALERT_COLUMNS,
        engine=ddl.engine("ReplacingMergeTree", "alerts"),
        partition_by="toYYYYMM(fired_at)",
        order_by="tenant, fired_at, alert_id, state",
        ttl=_ttl("fired_at", r.alerts_days),
    )
    rollup = ddl.create_table(
        ROLLUP_TABLE,
        ROLLUP_COLUMNS,
        engine=ddl.engine("AggregatingMergeTree", ROLLUP_TABLE),
        partition_by="toYYYYMM(minute)",
        order_by="tenant, feature, stage, model, minute",
        ttl=_ttl("minute", r.rollups_days),
    )
    rollup_view = (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {ddl.table(ROLLUP_TABLE + '_mv')}{ddl.on_cluster}"
        f" TO {ddl.table(ROLLUP_TABLE)} AS\n"
        # Source columns are qualified (s.) because the output aliases reuse their names.
        "SELECT s.tenant AS tenant, s.feature AS feature, s.stage AS stage, s.model AS model,\n"
        "    toStartOfMinute(toDateTime(s.start_time)) AS minute,\n"
        "    count() AS spans, countIf(s.status = 'error') AS errors,\n"
        f"    {DURATION_STATE.replace('(', 'State(', 1)}(s.duration_ms) AS duration_q,\n"
        f"    {TTFT_STATE.replace('(', 'State(', 1)}(s.ttft_ms) AS ttft_q,\n"
        "    sum(s.input_tokens) AS input_tokens, sum(s.output_tokens) AS output_tokens,\n"
        "    sum(s.cached_input_tokens) AS cached_input_tokens,\n"
        "    sum(ifNull(s.cost_usd, 0)) AS cost_usd, countIf(s.cost_usd IS NOT NULL) AS cost_known\n"
        f"FROM {ddl.table('spans')} AS s\n"
        "GROUP BY tenant, feature, stage, model, minute"
    )
    return [spans, payloads, scores, alerts, rollup, rollup_view]


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


def migrations(topology: Topology, retention: Retention) -> list[Migration]:
    """All migrations in order. Statements are idempotent (IF NOT EXISTS) so a crash mid-migration can re-run."""
    ddl = Ddl(topology)
    return [Migration(1, "spans, payloads, scores, alerts, per-minute rollup", tuple(_v1(ddl, retention)))]


def bootstrap_statements(topology: Topology) -> list[str]:
    """The database and the `schema_migrations` ledger, created before any migration runs."""
    ddl = Ddl(topology)
    ledger = ddl.create_table(
        "schema_migrations",
        (("version", "UInt32"), ("description", "String"), ("applied_at", "DateTime64(3) DEFAULT now64(3)")),
        engine=ddl.engine("ReplacingMergeTree", "schema_migrations"),
        partition_by=None,
        order_by="version",
        ttl=None,
    )
    return [ddl.create_database(), ledger]


def ttl_expression(table: str, retention: Retention) -> str:
    for name, column, field_name in TTL_COLUMNS:
        if name == table:
            return _ttl(column, getattr(retention, field_name))
    raise KeyError(table)


def retention_statement(topology: Topology, table: str, retention: Retention) -> str:
    """ALTER … MODIFY TTL for one table; metadata only (the caller sets materialize_ttl_after_modify = 0)."""
    ddl = Ddl(topology)
    return f"ALTER TABLE {ddl.table(table)}{ddl.on_cluster} MODIFY TTL {ttl_expression(table, retention)}"
