"""The store's schema: every table, view and TTL, generated in one place, and the versioned migrations.

`spans` columns come from `ragmon.model.SPAN_COLUMNS`; the other tables are declared here as (name, type) tuples
so inserts (`arrow.py`) and DDL share one definition. DDL is produced for a `Topology`: a single node (chDB
or one ClickHouse server), or with `cluster` set a sharded, replicated ClickHouse cluster (below).

A cluster (`Topology(cluster=NAME)`, `ragmon migrate --cluster NAME`). Every statement runs `ON CLUSTER NAME`.
Each data table becomes two: `<name>_local`, a `Replicated*MergeTree` on every node holding that shard's rows
(Keeper path `/clickhouse/tables/{shard}/<db>/<name>_local`, replica `{replica}`: the server's macros), with the
same columns, order, partitions and TTL as the single-node table; and `<name>`, a `Distributed` table over them
that has no data of its own. Readers and writers keep using the plain names — the agent's queries, the OTLP
views (`otlp_in` → `spans`, `span_content`) and the sampler's INSERT … SELECT into `payloads` all go through the
`Distributed` tables, so no query knows whether it runs on one node or forty. Sharding keys (`SHARDING_KEYS`):
`cityHash64(trace_id)` for everything that carries a trace id (spans, span_content, payloads, scores), so a
trace's spans, its captured text, its payload and its scores live on one shard — a re-sent span meets its
duplicate on the same ReplacingMergeTree and collapses there (per-trace reads can be pruned to one shard with
`optimize_skip_unused_shards`).
Alerts shard by `cityHash64(alert_id)` (deterministic, so a re-sent alert row collapses too); the rollups by
their grouping key. The agent's minute rollup (`rollup_sql.py`) reads a range's traces through the `Distributed`
`spans` (a trace is whole on one shard, so its subquery runs shard-local: `distributed_product_mode = 'local'`) and
writes through the `Distributed` `spans_1m`; the hourly view is *local*: `spans_1h_mv` reads `spans_1m_local` and
writes `spans_1h_local`, firing on the shard a minute row lands on. Each shard thus holds partial
aggregate states; the `Distributed` `spans_1m`/`spans_1h` merge them at read time (the report merges states
anyway, and DDSketch merges are lossless), so the report is exact across shards. `schema_migrations` is the one
table without a shard: a single replica set spanning every node (no `{shard}` in its path), so an agent on any
node sees what `ragmon migrate` applied. Inserts through a `Distributed` table carry the deduplication token to
each shard's part of the batch (the split is deterministic, so a re-sent batch splits the same way; checked
here through a one-shard `Distributed` table only, `tests/deploy/cluster_sim.py`); deploy the
agents' ClickHouse user with `distributed_foreground_insert = 1` (`deploy/clickhouse/`) so an acknowledged
insert is on the shards, not in a node's forwarding queue. v2's rebuild of a key-first minute rollup has no
cluster variant: the cluster layout is created time-first from v1 on, so there is nothing to rebuild.

Re-sent batches. The writer passes a deterministic `insert_deduplication_token` per batch (see `store.py`), so a
batch the agent re-sends after a crash is dropped by the engine. That needs `non_replicated_deduplication_window`
on *every* MergeTree a span reaches — the `spans` table and the rollup behind each materialised view: measured on
ClickHouse 26.9 (chDB), a deduplicated source block is still pushed into the views
(`deduplicate_blocks_in_dependent_materialized_views=1` is the default) and only the view's own target table,
with a window, drops it again. As a backstop for re-sends that are *not* the same batch (say, regrouped), raw
tables are `ReplacingMergeTree` keyed so duplicates of a span collapse on merge (or at once with `FINAL`); the
per-minute rollups can only be protected by the token, which is why the token derives from the batch content.
The same holds for the OTLP path (`otlp_views.py`): its `otlp_in` table is `ENGINE = Null` (it stores nothing and
keeps no dedup log), and the token is honoured by each target behind it — `spans`, `span_content` (measured on
26.9: a re-sent block is dropped at every level of a view chain). The minute rollup has a token of its own: the
agent's range (`rollup_sql.py`), honoured by `spans_1m` and, one view further, `spans_1h`.

Rollups. `spans_1m` (per minute; from v5 fed by the agent once the sampler has decided a range's traces, so a
span nested in a span of its own stage is not a second call: `rollup_sql.py`; v1–v4 fed it by a view on every
inserted span) and `spans_1h` (per hour, fed from `spans_1m` by merging its states; the hourly view sees a few
hundred rows per insert). The insert-path figures for the rollups were measured with v1's view.
The report reads whole hours from `spans_1h` and the edge minutes from `spans_1m` (`queries.py`). Both are ordered
time first (`ROLLUP_ORDER`). From v7 their key ends in `eval_run` (a `ragmon eval run`'s name, '' for production), so
an eval run's minutes never merge into production's and every production view filters on it (`ragmon.sinks.traffic`).
Why these choices, measured with `benchmarks/store_insert.py` (the figures are in docs/results.md): the rollups are
ordered time first because a key-first order spread a report's edge minutes over every granule, so the report
deserialised every state of the table; the latency states are DDSketch because the state is not where an insert's time
goes, and DDSketch merges minutes → hours → report losslessly; inserts send `optimize_on_insert = 0` because
ReplacingMergeTree's merge pass over every inserted block, useless here (the sorting key ends in (trace_id, span_id)),
was most of an insert's cost; and on the OTLP path the views' cost is their SELECT, not the table writes, so that is
where ingest speed is won.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragmon.sinks.backend import quote_string

from ragmon.model import CONTENT_COLUMNS, SPAN_COLUMNS

SCHEMA_VERSION = 9

# Blocks remembered per table for insert deduplication (one block ≈ one batch per day-partition it touches).
DEDUP_WINDOW_BLOCKS = 10_000

# DDSketch relative accuracy of the per-minute latency states. 0.01 came too close to the 1% goal on a bimodal
# stream; 0.005 stays within half of it for somewhat larger states, 0.001 would cost far larger ones
# (docs/results.md).
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
    # People's labels of kept traces and the log of every label written (v8): they calibrate the judge, so they
    # outlive the scores they are compared with by half a year.
    labels_days: int = 365
    # Captured text per span (`span_content`) only has to outlive the sampler's decision window; counted from
    # arrival, not from the span's start time, so a late span is not dropped on arrival.
    content_hours: int = 24


@dataclass(frozen=True, slots=True)
class Topology:
    """Where the DDL goes: a database, and optionally a cluster (Replicated engines, ON CLUSTER)."""

    database: str = "ragmon"
    cluster: str | None = None


PAYLOAD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "LowCardinality(String)"),
    ("trace_id", "String"),
    ("feature", "LowCardinality(String)"),
    ("eval_run", "LowCardinality(String)"),  # v7: the `ragmon eval run` the trace belongs to; '' = production
    ("start_time", "DateTime64(9)"),
    ("question", "String"),
    ("answer", "String"),
    ("passages", "Array(Tuple(id String, score Nullable(Float32), text String))"),
    ("tool_calls", "Array(Tuple(name String, arguments String, result String))"),
    # v4 (PAYLOAD_COLUMNS_V4): the answering LLM call's prompt, and what the judge's context is: 'passages'
    # (retrieved), 'prompt' (no retrieval in the trace: the prompt's messages) or '' (neither was captured)
    ("messages", "Array(Tuple(role String, content String))"),
    ("context_source", "LowCardinality(String)"),
    ("content", "Map(String, String)"),  # any other captured text, by span/attribute key
    ("sampling_reason", "LowCardinality(String)"),  # the first of sampling_reasons
    ("sampling_reasons", "Array(LowCardinality(String))"),  # every policy that kept it: error, slow, baseline ...
    ("inclusion_probability", "Float64"),  # P(trace kept); weight = 1 / p
)

SCORE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "LowCardinality(String)"),
    ("trace_id", "String"),
    ("feature", "LowCardinality(String)"),
    ("eval_run", "LowCardinality(String)"),  # v9: the `ragmon eval run` the trace belongs to; '' = production
    ("metric", "LowCardinality(String)"),
    ("judge_version", "LowCardinality(String)"),
    ("value", "Nullable(Float64)"),  # NULL when undefined or the judge failed: never a silent 0
    ("status", "LowCardinality(String)"),  # ok | unscorable | parse_error | llm_error | budget_exhausted | skipped
    ("explanation", "String"),
    ("claims", "Array(Tuple(claim String, verdict String, reason String))"),
    ("judge_model", "LowCardinality(String)"),
    ("prompt_version", "LowCardinality(String)"),
    ("input_tokens", "UInt32"),
    ("output_tokens", "UInt32"),
    ("cost_usd", "Nullable(Float64)"),
    ("run_name", "LowCardinality(String)"),  # '' for online judging; a name for back-evaluation runs
    ("scored_at", "DateTime64(3)"),
    # v3 (SCORE_COLUMNS_V3): what the judge flagged and what the trace weighs.
    ("flags", "Array(LowCardinality(String))"),  # refusal | noncommittal | unparseable_verdicts
    ("judge_calls", "UInt32"),  # judge calls behind this score (a repair retry is a second call)
    ("claim_flags", "Array(LowCardinality(String))"),  # one per claim, parallel to `claims`: '' | unparseable
    ("claim_support", "Array(Nullable(Float64))"),  # one per claim: the local judge's evidence; NULL from an LLM
    ("sampling_reason", "LowCardinality(String)"),  # the first sampler policy that kept the trace
    # P(the trace was kept and judged); its score stands for 1 / p traces of all traffic. NULL when unknown.
    ("inclusion_probability", "Nullable(Float64)"),
    # v4: what the trace's answer was judged against (the payload's context_source; '' when not applicable)
    ("context_source", "LowCardinality(String)"),
)
SCORE_COLUMNS_V3 = SCORE_COLUMNS[-7:-1]
SCORE_COLUMNS_V4 = SCORE_COLUMNS[-1:]
# v9: a score carries its trace's eval run, so it stays apart from production after the payload it was found
# through has expired (payloads keep 14 days, scores 180: `ragmon.sinks.traffic`)
SCORE_COLUMNS_V9 = tuple(c for c in SCORE_COLUMNS if c[0] == "eval_run")
PAYLOAD_COLUMNS_V4 = tuple(c for c in PAYLOAD_COLUMNS if c[0] in ("messages", "context_source"))

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

# v8: people's labels of kept traces (`ragmon.dashboard` review queue), the truth the judge is calibrated on.
# Every write lands in `label_writes` (the audit: never replaced); a view copies it into `labels`, where a later
# label of the same (tenant, trace, metric, reviewer) replaces the earlier one (read with FINAL).
LABEL_WRITES_TABLE = "label_writes"
LABELS_TABLE = "labels"
LABEL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "LowCardinality(String)"),
    ("trace_id", "String"),
    ("metric", "LowCardinality(String)"),  # the judge metric labelled: faithfulness, answer_relevance ...
    ("reviewer", "String"),  # the name of the reviewer key that wrote it (`agent.reviewer_keys`)
    ("label", "Bool"),  # true: the answer is faithful / relevant (the metric's good side); false: it is not
    ("claim_labels", "Array(Tuple(claim String, label Bool))"),  # optional, per claim of the judge's: supported?
    ("note", "String"),
    ("judge_versions", "Array(LowCardinality(String))"),  # the judge versions whose scores the reviewer was shown
    ("labelled_at", "DateTime64(3)"),
)
LABEL_ORDER = "tenant, metric, trace_id, reviewer"

CONTENT_TABLE = "span_content"

# The rollups the report reads (never raw spans): per minute from `spans`, per hour from the minutes.
ROLLUP_TABLE = "spans_1m"
HOUR_ROLLUP_TABLE = "spans_1h"
_levels = ", ".join(str(level) for level in DURATION_LEVELS)
_ttft_levels = ", ".join(str(level) for level in TTFT_LEVELS)
DURATION_STATE = f"quantilesDD({QUANTILE_ACCURACY}, {_levels})"
TTFT_STATE = f"quantilesDD({QUANTILE_ACCURACY}, {_ttft_levels})"

ROLLUP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "LowCardinality(String)"),
    ("feature", "LowCardinality(String)"),
    ("stage", "LowCardinality(String)"),
    ("model", "LowCardinality(String)"),
    ("eval_run", "LowCardinality(String)"),  # v7: '' = production; else the `ragmon eval run` it counts
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

# The tail sampler's decisions per minute (when decided), so the report and the dashboard show the kept share by
# reason. A kept trace counts under its first reason (policies in configured order), so the shares add up; a
# skipped trace has reason '' ('budget' when only the budget refused it), a dropped one its drop rule's name.
SAMPLING_TABLE = "sampling_1m"
SAMPLING_COLUMNS: tuple[tuple[str, str], ...] = (
    ("minute", "DateTime"),
    ("tenant", "LowCardinality(String)"),
    ("feature", "LowCardinality(String)"),
    ("eval_run", "LowCardinality(String)"),  # v7: '' = production; else the `ragmon eval run` decided
    ("outcome", "LowCardinality(String)"),  # keep | skip | drop
    ("reason", "LowCardinality(String)"),
    ("traces", "SimpleAggregateFunction(sum, UInt64)"),
)

HOUR_ROLLUP_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    ("hour", "DateTime") if name == "minute" else (name, ch_type) for name, ch_type in ROLLUP_COLUMNS
)

# v7 keeps evaluation traffic apart: `eval_run` on spans, payloads, the rollups and the sampling counts. The rollup
# tables are created as they were before it (v1, v2, v6) and v7 adds the column and appends it to their keys: an
# AggregatingMergeTree merges rows by key, so a production minute and an eval run's minute must differ in the key.
# v9 adds it to the scores too (`SCORE_COLUMNS_V9`), outside their key.
EVAL_RUN_COLUMN = ("eval_run", "LowCardinality(String)")


def _before_v7(columns: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple(c for c in columns if c[0] != EVAL_RUN_COLUMN[0])


# A cluster's data tables: the name readers and writers use (a `Distributed` table) → its sharding key. Each has a
# `<name>_local` replicated table per shard under it. One key per trace, so a trace is whole on one shard.
LOCAL_SUFFIX = "_local"
TRACE_SHARDING_KEY = "cityHash64(trace_id)"
_ROLLUP_SHARDING_KEY = "cityHash64(tenant, feature, stage, model)"  # only the v2 backfill writes through it
SHARDING_KEYS: dict[str, str] = {
    "spans": TRACE_SHARDING_KEY,
    CONTENT_TABLE: TRACE_SHARDING_KEY,
    "payloads": TRACE_SHARDING_KEY,
    "scores": TRACE_SHARDING_KEY,
    "alerts": "cityHash64(alert_id)",
    ROLLUP_TABLE: _ROLLUP_SHARDING_KEY,
    HOUR_ROLLUP_TABLE: _ROLLUP_SHARDING_KEY,
    SAMPLING_TABLE: "cityHash64(tenant, feature)",
    LABEL_WRITES_TABLE: TRACE_SHARDING_KEY,  # a label beside its trace's scores and its own audit rows
    LABELS_TABLE: TRACE_SHARDING_KEY,
}

# Tables whose rows carry a tenant: the read-only query helper filters each of them. Materialised views are
# listed too: a SELECT from a view reads its target table under the view's name.
OTLP_NORMALISE_VIEW = "otlp_norm_mv"  # the views that normalise OTLP input (ragmon.sinks.otlp_views)
OTLP_SPANS_VIEW = "otlp_spans_mv"
OTLP_CONTENT_VIEW = "otlp_content_mv"
TENANT_TABLES = (
    OTLP_NORMALISE_VIEW,
    OTLP_SPANS_VIEW,
    OTLP_CONTENT_VIEW,
    "spans",
    CONTENT_TABLE,
    "payloads",
    "scores",
    "alerts",
    ROLLUP_TABLE,
    HOUR_ROLLUP_TABLE,
    f"{HOUR_ROLLUP_TABLE}_mv",
    SAMPLING_TABLE,
    LABEL_WRITES_TABLE,
    LABELS_TABLE,
    f"{LABELS_TABLE}_mv",
    # A cluster's per-shard tables sit in the same database: a SELECT naming one is filtered like the rest.
    *(name + LOCAL_SUFFIX for name in SHARDING_KEYS),
)


def quote_identifier(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


class Ddl:
    """DDL text for one topology."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.db = quote_identifier(topology.database)
        self.on_cluster = f" ON CLUSTER {quote_identifier(topology.cluster)}" if topology.cluster else ""

    def table(self, name: str) -> str:
        """The name readers and writers use: on a cluster, the `Distributed` table for a sharded one."""
        return f"{self.db}.{quote_identifier(name)}"

    def storage_name(self, name: str) -> str:
        """The table that holds the rows: `<name>_local` for a sharded table on a cluster, else `name`."""
        return name + LOCAL_SUFFIX if self.topology.cluster and name in SHARDING_KEYS else name

    def local(self, name: str) -> str:
        """The qualified storage table: what views attach to, TTLs and indexes live on."""
        return self.table(self.storage_name(name))

    def engine(self, kind: str, table: str, *args: str) -> str:
        if self.topology.cluster:
            # Sharded tables: one replica set per shard. The rest (the migration ledger): one for the cluster.
            shard = "{shard}/" if table in SHARDING_KEYS else ""
            path = f"'/clickhouse/tables/{shard}{self.topology.database}/{self.storage_name(table)}'"
            replica = "'{replica}'"
            return f"Replicated{kind}({', '.join((path, replica, *args))})"
        return f"{kind}({', '.join(args)})"

    def distributed(self, name: str) -> list[str]:
        """On a cluster, the `Distributed` table `name` over every shard's `<name>_local` (same columns, taken
        from the local table); nothing on a single node, where `name` is the storage table itself."""
        if not self.topology.cluster:
            return []
        cluster, database = quote_identifier(self.topology.cluster), self.db
        local = quote_identifier(self.storage_name(name))
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table(name)}{self.on_cluster} AS {self.local(name)}\n"
            f"ENGINE = Distributed({cluster}, {database}, {local}, {SHARDING_KEYS[name]})"
        ]

    def alter_columns(self, name: str, clause: str) -> list[str]:
        """A column change on the storage table and, on a cluster, on the `Distributed` table over it."""
        names = [self.local(name), *([self.table(name)] if self.topology.cluster else [])]
        return [f"ALTER TABLE {table}{self.on_cluster} {clause}" for table in names]

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
        parts = [f"CREATE TABLE IF NOT EXISTS {self.local(name)}{self.on_cluster} (\n    {body}\n)"]
        parts.append(f"ENGINE = {engine}")
        if partition_by:
            parts.append(f"PARTITION BY {partition_by}")
        parts.append(f"ORDER BY ({order_by})")
        if ttl:
            parts.append(f"TTL {ttl}")
        parts.append(f"SETTINGS {self.dedup_settings()}{settings}index_granularity = 8192")
        return "\n".join(parts)


def _ttl(column: str, amount: int, unit: str = "Day") -> str:
    return f"toDateTime({column}) + toInterval{unit}({int(amount)})"


# (table, TTL time column, Retention field) — the single list `retention_statements` walks. A field ending in
# `_hours` counts hours, every other one days.
TTL_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("spans", "start_time", "spans_days"),
    (CONTENT_TABLE, "inserted_at", "content_hours"),
    ("payloads", "start_time", "payloads_days"),
    ("scores", "scored_at", "scores_days"),
    ("alerts", "fired_at", "alerts_days"),
    (ROLLUP_TABLE, "minute", "rollups_days"),
    (HOUR_ROLLUP_TABLE, "hour", "rollups_days"),
    (SAMPLING_TABLE, "minute", "rollups_days"),
    (LABEL_WRITES_TABLE, "labelled_at", "labels_days"),
    (LABELS_TABLE, "labelled_at", "labels_days"),
)


# Time first: the report reads a time range (its edge minutes) across every key, so a key-first order made it
# read and deserialise every granule of the table: over 10M spans / 24 h, a day's report took several times as long
# with (tenant, feature, stage, model, minute), every minute's keys being spread over all granules (docs/results.md).
ROLLUP_ORDER_V1 = "minute, tenant, feature, stage, model"
ROLLUP_ORDER = f"{ROLLUP_ORDER_V1}, eval_run"
SAMPLING_ORDER_V6 = "minute, tenant, feature, outcome, reason"
SAMPLING_ORDER = f"{SAMPLING_ORDER_V6}, eval_run"


def minute_rollup_table(ddl: Ddl, r: Retention, name: str) -> str:
    """The minute rollup as v1–v6 created it (v7 adds `eval_run`)."""
    return ddl.create_table(
        name,
        _before_v7(ROLLUP_COLUMNS),
        engine=ddl.engine("AggregatingMergeTree", name),
        partition_by="toYYYYMM(minute)",
        order_by=ROLLUP_ORDER_V1,
        ttl=_ttl("minute", r.rollups_days),
    )


def _state(function: str, suffix: str) -> str:
    """`quantilesDD(a, l…)` → `quantilesDD<suffix>(a, l…)`: the State/Merge/MergeState combinator forms."""
    return function.replace("(", f"{suffix}(", 1)


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
    rollup = minute_rollup_table(ddl, r, ROLLUP_TABLE)
    rollup_view = (
        # On a cluster: attached to each shard's spans_local, writing that shard's spans_1m_local.
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {ddl.table(ROLLUP_TABLE + '_mv')}{ddl.on_cluster}"
        f" TO {ddl.local(ROLLUP_TABLE)} AS\n"
        # Source columns are qualified (s.) because the output aliases reuse their names.
        "SELECT s.tenant AS tenant, s.feature AS feature, s.stage AS stage, s.model AS model,\n"
        "    toStartOfMinute(toDateTime(s.start_time)) AS minute,\n"
        "    count() AS spans, countIf(s.status = 'error') AS errors,\n"
        f"    {_state(DURATION_STATE, 'State')}(s.duration_ms) AS duration_q,\n"
        f"    {_state(TTFT_STATE, 'State')}(s.ttft_ms) AS ttft_q,\n"
        "    sum(s.input_tokens) AS input_tokens, sum(s.output_tokens) AS output_tokens,\n"
        "    sum(s.cached_input_tokens) AS cached_input_tokens,\n"
        "    sum(ifNull(s.cost_usd, 0)) AS cost_usd, countIf(s.cost_usd IS NOT NULL) AS cost_known\n"
        f"FROM {ddl.local('spans')} AS s\n"
        "GROUP BY tenant, feature, stage, model, minute"
    )
    return [
        spans,
        *ddl.distributed("spans"),
        payloads,
        *ddl.distributed("payloads"),
        scores,
        *ddl.distributed("scores"),
        alerts,
        *ddl.distributed("alerts"),
        rollup,
        *ddl.distributed(ROLLUP_TABLE),
        rollup_view,
    ]


def hour_rollup_select(ddl: Ddl, source: str | None = None, *, eval_run: bool = True) -> str:
    """Minute rows → hour rows, merging the quantile states (lossless for DDSketch); the hourly view's query (over
    the storage table, `ddl.local`) and the v2 backfill (`source`: the whole cluster's minutes). `eval_run=False`:
    as v2–v6 had it, before the rollups had that column."""
    keep_apart = ", m.eval_run AS eval_run" if eval_run else ""
    return (
        f"SELECT m.tenant AS tenant, m.feature AS feature, m.stage AS stage, m.model AS model{keep_apart},\n"
        "    toStartOfHour(m.minute) AS hour,\n"
        "    sum(m.spans) AS spans, sum(m.errors) AS errors,\n"
        f"    {_state(DURATION_STATE, 'MergeState')}(m.duration_q) AS duration_q,\n"
        f"    {_state(TTFT_STATE, 'MergeState')}(m.ttft_q) AS ttft_q,\n"
        "    sum(m.input_tokens) AS input_tokens, sum(m.output_tokens) AS output_tokens,\n"
        "    sum(m.cached_input_tokens) AS cached_input_tokens,\n"
        "    sum(m.cost_usd) AS cost_usd, sum(m.cost_known) AS cost_known\n"
        f"FROM {source or ddl.local(ROLLUP_TABLE)} AS m\n"
        f"GROUP BY tenant, feature, stage, model{', eval_run' if eval_run else ''}, hour"
    )


@dataclass(frozen=True, slots=True)
class Step:
    """A migration statement that runs only when `only_if` (a SELECT of one 0/1 value) says 1 — for the steps
    IF [NOT] EXISTS cannot make idempotent (a copy, an EXCHANGE). `only_if` is whole text, its values (the
    database, a table, a key) quoted in: `ragmon migrate --print` prints it beside the DDL for an operator to run."""

    sql: str
    only_if: str


def _v2(ddl: Ddl, r: Retention) -> list[str | Step]:
    # A v1 store's minute rollup is key-first (see ROLLUP_ORDER): copy it into a time-first table and swap them.
    # Guarded by the live table's key, every step is safe to re-run after a crash at any point.
    old_key = (
        f"SELECT count() > 0 FROM system.tables WHERE database = {quote_string(ddl.topology.database)}"
        f" AND name = '{ROLLUP_TABLE}' AND sorting_key != '{ROLLUP_ORDER_V1}'"
    )
    minutes, rebuilt = ddl.table(ROLLUP_TABLE), ddl.table(ROLLUP_TABLE + "_rebuilt")
    # A cluster is created time-first by v1 (this layout is newer than the key-first order): nothing to rebuild.
    rebuild: list[str | Step] = (
        []
        if ddl.topology.cluster
        else [
            Step(f"DROP VIEW IF EXISTS {ddl.table(ROLLUP_TABLE + '_mv')}{ddl.on_cluster}", old_key),
            Step(minute_rollup_table(ddl, r, ROLLUP_TABLE + "_rebuilt"), old_key),
            Step(f"TRUNCATE TABLE {rebuilt}{ddl.on_cluster}", old_key),
            Step(f"INSERT INTO {rebuilt} SELECT * FROM {minutes}", old_key),  # both as v1 made them
            Step(f"EXCHANGE TABLES {minutes} AND {rebuilt}{ddl.on_cluster}", old_key),
            f"DROP TABLE IF EXISTS {rebuilt}{ddl.on_cluster}",
            _v1(ddl, r)[-1],  # the per-minute view again (CREATE … IF NOT EXISTS)
        ]
    )
    content = ddl.create_table(
        CONTENT_TABLE,
        (
            *CONTENT_COLUMNS,
            ("inserted_at", "DateTime DEFAULT now()"),
            # Computed once on insert so the sampler's per-range summary never reads the text itself.
            ("content_bytes", "UInt64 MATERIALIZED arraySum(arrayMap(v -> length(v), mapValues(content)))"),
        ),
        engine=ddl.engine("ReplacingMergeTree", CONTENT_TABLE),
        # Hourly partitions so the short TTL drops whole parts instead of rewriting them.
        partition_by="toStartOfHour(inserted_at)",
        order_by="tenant, trace_id, span_id",
        ttl=_ttl("inserted_at", r.content_hours, "Hour"),
        extra=("INDEX idx_ingest_seq ingest_seq TYPE minmax GRANULARITY 1",),
        settings="ttl_only_drop_parts = 1, ",
    )
    hours = ddl.create_table(
        HOUR_ROLLUP_TABLE,
        _before_v7(HOUR_ROLLUP_COLUMNS),
        engine=ddl.engine("AggregatingMergeTree", HOUR_ROLLUP_TABLE),
        partition_by="toYYYYMM(hour)",
        order_by=ROLLUP_ORDER_V1.replace("minute", "hour"),
        ttl=_ttl("hour", r.rollups_days),
    )
    hour_table = ddl.table(HOUR_ROLLUP_TABLE)
    # Start-up runs migrations before any insert, so backfill-then-view loses nothing; the emptiness guard makes a
    # re-run after a crash between the two statements a no-op instead of a double count. On a cluster it reads
    # every shard's minutes and writes through the Distributed hour table (one statement, not one per shard).
    backfill = (
        f"INSERT INTO {hour_table}\n{hour_rollup_select(ddl, ddl.table(ROLLUP_TABLE), eval_run=False)}\n"
        f"HAVING (SELECT count() FROM {hour_table}) = 0"
    )
    hour_view = (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {ddl.table(HOUR_ROLLUP_TABLE + '_mv')}{ddl.on_cluster}"
        f" TO {ddl.local(HOUR_ROLLUP_TABLE)} AS\n{hour_rollup_select(ddl, eval_run=False)}"
    )
    return [
        *ddl.alter_columns("spans", "ADD COLUMN IF NOT EXISTS ingest_seq UInt64"),
        # The sampler reads `WHERE ingest_seq BETWEEN a AND b` on recent data: fresh parts hold narrow seq ranges.
        f"ALTER TABLE {ddl.local('spans')}{ddl.on_cluster}"
        " ADD INDEX IF NOT EXISTS idx_ingest_seq ingest_seq TYPE minmax GRANULARITY 1",
        *ddl.alter_columns(
            "payloads",
            "ADD COLUMN IF NOT EXISTS sampling_reasons Array(LowCardinality(String)) AFTER sampling_reason",
        ),
        content,
        *ddl.distributed(CONTENT_TABLE),
        *rebuild,
        hours,
        *ddl.distributed(HOUR_ROLLUP_TABLE),
        backfill,
        hour_view,
    ]


def _added_columns(
    ddl: Ddl, table: str, added: tuple[tuple[str, str], ...], columns: tuple[tuple[str, str], ...]
) -> list[str]:
    """ALTERs that add `added` to `table`, each after the column it follows in `columns` (the table's full column
    list), so an upgraded table has the column order of a fresh one. IF NOT EXISTS: no-ops where they are."""
    names = [name for name, _ in columns]
    return [
        statement
        for name, ch_type in added
        for statement in ddl.alter_columns(
            table, f"ADD COLUMN IF NOT EXISTS {name} {ch_type} AFTER {names[names.index(name) - 1]}"
        )
    ]


def _v3(ddl: Ddl) -> list[str]:
    """The scores columns v1 lacked (a fresh store has them from v1, so these are no-ops there). Additive: older
    rows read the defaults — no flags, no claim evidence, an unknown inclusion probability (NULL)."""
    return _added_columns(ddl, "scores", SCORE_COLUMNS_V3, SCORE_COLUMNS)


def _v4(ddl: Ddl) -> list[str]:
    """The content model's payload columns and the score's context source (no-ops on a store created at v4)."""
    return [
        *_added_columns(ddl, "payloads", PAYLOAD_COLUMNS_V4, PAYLOAD_COLUMNS),
        *_added_columns(ddl, "scores", SCORE_COLUMNS_V4, SCORE_COLUMNS),
    ]


def _v5(ddl: Ddl) -> list[str]:
    """The minute rollup is fed by the agent once a range's traces are decided (`sinks/rollup_sql.py`: one call per
    nested run of a stage), no longer by a view on every inserted span. Spans stored before this ran were counted
    by the view; the agent starts rolling up after the last of them (`ragmon.pipeline.rollups`)."""
    return [f"DROP VIEW IF EXISTS {ddl.table(ROLLUP_TABLE + '_mv')}{ddl.on_cluster}"]


def _v6(ddl: Ddl, r: Retention) -> list[str]:
    """The sampler's decisions per minute (`SAMPLING_TABLE`): counted from this version on, not back-filled."""
    table = ddl.create_table(
        SAMPLING_TABLE,
        _before_v7(SAMPLING_COLUMNS),
        engine=ddl.engine("AggregatingMergeTree", SAMPLING_TABLE),
        partition_by="toYYYYMM(minute)",
        order_by=SAMPLING_ORDER_V6,
        ttl=_ttl("minute", r.rollups_days),
    )
    return [table, *ddl.distributed(SAMPLING_TABLE)]


def _keyed_eval_run(ddl: Ddl, table: str, columns: tuple[tuple[str, str], ...], order: str) -> list[str | Step]:
    """`eval_run` added to an aggregating table and appended to its key in one ALTER (ClickHouse lets a key grow
    only by columns added in the same statement; metadata only, no rows rewritten: old rows read '', production).
    Guarded by the live key, so a re-run after a crash skips what is done."""
    names = [name for name, _ in columns]
    after = names[names.index(EVAL_RUN_COLUMN[0]) - 1]
    add = f"ADD COLUMN IF NOT EXISTS {EVAL_RUN_COLUMN[0]} {EVAL_RUN_COLUMN[1]} AFTER {after}"
    storage = ddl.storage_name(table)
    old_key = (
        f"SELECT count() > 0 FROM system.tables WHERE database = {quote_string(ddl.topology.database)}"
        f" AND name = {quote_string(storage)} AND sorting_key != {quote_string(order)}"
    )
    alter = f"ALTER TABLE {ddl.local(table)}{ddl.on_cluster} {add}, MODIFY ORDER BY ({order})"
    steps: list[str | Step] = [Step(alter, old_key)]
    if ddl.topology.cluster:  # the Distributed table over it has no key, only the columns
        steps.append(f"ALTER TABLE {ddl.table(table)}{ddl.on_cluster} {add}")
    return steps


def _v7(ddl: Ddl) -> list[str | Step]:
    """Evaluation traffic apart from production: `eval_run` on spans and payloads (old rows read '', production),
    and in the keys of the rollups and the sampling counts; the hourly view is made again to carry it."""
    added = (EVAL_RUN_COLUMN,)
    hour_view = ddl.table(HOUR_ROLLUP_TABLE + "_mv")
    return [
        *_added_columns(ddl, "spans", added, SPAN_COLUMNS),
        *_added_columns(ddl, "payloads", added, PAYLOAD_COLUMNS),
        *_keyed_eval_run(ddl, ROLLUP_TABLE, ROLLUP_COLUMNS, ROLLUP_ORDER),
        *_keyed_eval_run(ddl, HOUR_ROLLUP_TABLE, HOUR_ROLLUP_COLUMNS, ROLLUP_ORDER.replace("minute", "hour")),
        *_keyed_eval_run(ddl, SAMPLING_TABLE, SAMPLING_COLUMNS, SAMPLING_ORDER),
        # Migrations run before the agent inserts anything, so no minute row lands between these two.
        f"DROP VIEW IF EXISTS {hour_view}{ddl.on_cluster}",
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {hour_view}{ddl.on_cluster}"
        f" TO {ddl.local(HOUR_ROLLUP_TABLE)} AS\n{hour_rollup_select(ddl)}",
    ]


def _v8(ddl: Ddl, r: Retention) -> list[str]:
    """People's labels (`LABEL_COLUMNS`): the audit log of every write, the latest label per (tenant, trace,
    metric, reviewer), and the view between them — so one INSERT records a label and its audit row together."""
    writes = ddl.create_table(
        LABEL_WRITES_TABLE,
        LABEL_COLUMNS,
        engine=ddl.engine("MergeTree", LABEL_WRITES_TABLE),
        partition_by="toYYYYMM(labelled_at)",
        order_by=f"{LABEL_ORDER}, labelled_at",
        ttl=_ttl("labelled_at", r.labels_days),
    )
    labels = ddl.create_table(
        LABELS_TABLE,
        LABEL_COLUMNS,
        # A re-label by the same reviewer replaces theirs; another reviewer's label of the trace stays beside it.
        engine=ddl.engine("ReplacingMergeTree", LABELS_TABLE, "labelled_at"),
        partition_by=None,  # a label moved across months must still meet the one it replaces
        order_by=LABEL_ORDER,
        ttl=_ttl("labelled_at", r.labels_days),
    )
    names = ", ".join(quote_identifier(name) for name, _ in LABEL_COLUMNS)
    view = (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {ddl.table(LABELS_TABLE + '_mv')}{ddl.on_cluster}"
        f" TO {ddl.local(LABELS_TABLE)} AS\nSELECT {names} FROM {ddl.local(LABEL_WRITES_TABLE)}"
    )
    return [writes, *ddl.distributed(LABEL_WRITES_TABLE), labels, *ddl.distributed(LABELS_TABLE), view]


def _v9(ddl: Ddl) -> list[str]:
    """A score's own `eval_run` (no-op on a store created at v9). Not in the key: a trace belongs to one run, so
    the column never tells two versions of a score apart. Rows scored before it read '' and are told apart by
    their trace's payload while it lasts (`ragmon.sinks.traffic.Traffic.scores_condition`)."""
    return _added_columns(ddl, "scores", SCORE_COLUMNS_V9, SCORE_COLUMNS)


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    statements: tuple[str | Step, ...]


def migrations(topology: Topology, retention: Retention) -> list[Migration]:
    """All migrations in order. Statements are idempotent (IF NOT EXISTS) so a crash mid-migration can re-run."""
    ddl = Ddl(topology)
    return [
        Migration(1, "spans, payloads, scores, alerts, per-minute rollup", tuple(_v1(ddl, retention))),
        Migration(2, "ingest_seq, span_content, sampling_reasons, hourly rollup", tuple(_v2(ddl, retention))),
        Migration(3, "scores: flags, judge calls, per-claim flags and support, sampling weight", tuple(_v3(ddl))),
        Migration(4, "payloads: prompt messages, context source; scores: context source", tuple(_v4(ddl))),
        Migration(5, "minute rollup fed by the agent after sampling (one call per nested run)", tuple(_v5(ddl))),
        Migration(6, "sampling decisions per minute, by outcome and first reason", tuple(_v6(ddl, retention))),
        Migration(7, "eval_run: evaluation traffic apart from production (spans, payloads, rollups)", tuple(_v7(ddl))),
        Migration(8, "labels of kept traces by people, and the log of every label written", tuple(_v8(ddl, retention))),
        Migration(9, "scores: eval_run, the trace's evaluation run ('' = production)", tuple(_v9(ddl))),
    ]


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
            return _ttl(column, getattr(retention, field_name), "Hour" if field_name.endswith("_hours") else "Day")
    raise KeyError(table)


def retention_statement(topology: Topology, table: str, retention: Retention) -> str:
    """ALTER … MODIFY TTL for one table (on a cluster: its `_local` tables, where rows and TTLs live); metadata
    only (the caller sets materialize_ttl_after_modify = 0)."""
    ddl = Ddl(topology)
    return f"ALTER TABLE {ddl.local(table)}{ddl.on_cluster} MODIFY TTL {ttl_expression(table, retention)}"
