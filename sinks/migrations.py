"""The migrations that bring an older store to the current schema, in order, each as it ran when it was written.

A new store does not run them: it is created from the definition (`ragmon.sinks.schema`) and recorded at every
version. A store made by an older ragmon runs the ones its ledger (`schema_migrations`) lacks. So a migration is
history: it states what its version did in full — names, columns, keys and view queries written out here, never
read from the definition, which moves on — and it is not edited once released. A change to the schema is a change
to the definition plus a new migration; `tests/sinks/test_schema_definition.py` proves that a store created at v1
and migrated comes out as the definition makes one (on the embedded engine and through a server; a cluster's:
`tests/deploy/test_cluster_schema.py`), so a migration forgotten or wrong fails there.

Migration 1 creates the tables with the columns they had at v9 (until v9 a new store ran every migration, and v1
made its tables with the columns of the day). Every migration is a no-op where its change is made already (IF [NOT]
EXISTS, or a `Step` guarded by the live table's state): on the tables migration 1 creates, on a store the definition
created (so a creation cut short is finished by running them all), and after a crash mid-migration.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragmon.sinks.backend import quote_string
from ragmon.sinks.schema import Columns, Ddl, Retention, Topology, quote_identifier, ttl_clause


def _columns(ddl_text: str) -> Columns:
    """`name Type, name Type, …` (commas inside a type's parentheses belong to the type) → (name, type) pairs."""
    out, depth, start = [], 0, 0
    for i, char in enumerate(ddl_text + ","):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            name, ch_type = ddl_text[start:i].strip().split(" ", 1)
            out.append((name, ch_type))
            start = i + 1
    return tuple(out)


# The columns migration 1 creates: every table as it was at v9.
_SPANS = _columns(
    "tenant LowCardinality(String), trace_id String, span_id String, parent_span_id String,"
    " name LowCardinality(String), stage LowCardinality(String), feature LowCardinality(String),"
    " eval_run LowCardinality(String), user String, session String, service LowCardinality(String),"
    " start_time DateTime64(9), duration_ms Float64, status LowCardinality(String),"
    " error_type LowCardinality(String), model LowCardinality(String), provider LowCardinality(String),"
    " input_tokens UInt32, output_tokens UInt32, cached_input_tokens UInt32, cost_usd Nullable(Float64),"
    " top1_score Nullable(Float32), similarity_gap Nullable(Float32), norm_deviation Nullable(Float32),"
    " ttft_ms Nullable(Float32), retrieved_ids Array(String), retrieved_scores Array(Float32),"
    " attributes Map(String, String), ingest_seq UInt64"
)
_PAYLOADS = _columns(
    "tenant LowCardinality(String), trace_id String, feature LowCardinality(String), eval_run LowCardinality(String),"
    " start_time DateTime64(9), question String, answer String,"
    " passages Array(Tuple(id String, score Nullable(Float32), text String)),"
    " tool_calls Array(Tuple(name String, arguments String, result String)),"
    " messages Array(Tuple(role String, content String)), context_source LowCardinality(String),"
    " content Map(String, String), sampling_reason LowCardinality(String),"
    " sampling_reasons Array(LowCardinality(String)), inclusion_probability Float64"
)
_SCORES = _columns(
    "tenant LowCardinality(String), trace_id String, feature LowCardinality(String), eval_run LowCardinality(String),"
    " metric LowCardinality(String), judge_version LowCardinality(String), value Nullable(Float64),"
    " status LowCardinality(String), explanation String,"
    " claims Array(Tuple(claim String, verdict String, reason String)), judge_model LowCardinality(String),"
    " prompt_version LowCardinality(String), input_tokens UInt32, output_tokens UInt32, cost_usd Nullable(Float64),"
    " run_name LowCardinality(String), scored_at DateTime64(3), flags Array(LowCardinality(String)),"
    " judge_calls UInt32, claim_flags Array(LowCardinality(String)), claim_support Array(Nullable(Float64)),"
    " sampling_reason LowCardinality(String), inclusion_probability Nullable(Float64),"
    " context_source LowCardinality(String)"
)
_ALERTS = _columns(
    "tenant LowCardinality(String), alert_id String, fired_at DateTime64(3), rule LowCardinality(String),"
    " severity LowCardinality(String), state LowCardinality(String), feature LowCardinality(String),"
    " stage LowCardinality(String), metric LowCardinality(String), value Nullable(Float64),"
    " threshold Nullable(Float64), message String, labels Map(String, String)"
)
_CONTENT = _columns(
    "tenant LowCardinality(String), trace_id String, span_id String, parent_span_id String,"
    " stage LowCardinality(String), name LowCardinality(String), start_time DateTime64(9), duration_ms Float64,"
    " status LowCardinality(String), content Map(String, String), retrieved_ids Array(String),"
    " retrieved_scores Array(Float32), ingest_seq UInt64"
)
_DURATION_STATE = "quantilesDD(0.005, 0.5, 0.95, 0.99)"
_TTFT_STATE = "quantilesDD(0.005, 0.95)"
# The minute rollup as v1 made it (v7 adds eval_run after model); the hour rollup the same with `hour`.
_MINUTES = _columns(
    "tenant LowCardinality(String), feature LowCardinality(String), stage LowCardinality(String),"
    " model LowCardinality(String), minute DateTime, spans SimpleAggregateFunction(sum, UInt64),"
    f" errors SimpleAggregateFunction(sum, UInt64), duration_q AggregateFunction({_DURATION_STATE}, Float64),"
    f" ttft_q AggregateFunction({_TTFT_STATE}, Nullable(Float32)), input_tokens SimpleAggregateFunction(sum, UInt64),"
    " output_tokens SimpleAggregateFunction(sum, UInt64), cached_input_tokens SimpleAggregateFunction(sum, UInt64),"
    " cost_usd SimpleAggregateFunction(sum, Float64), cost_known SimpleAggregateFunction(sum, UInt64)"
)
_HOURS = tuple(("hour", ch_type) if name == "minute" else (name, ch_type) for name, ch_type in _MINUTES)
# The sampling counts as v6 made them (v7 adds eval_run after feature).
_SAMPLING = _columns(
    "minute DateTime, tenant LowCardinality(String), feature LowCardinality(String), outcome LowCardinality(String),"
    " reason LowCardinality(String), traces SimpleAggregateFunction(sum, UInt64)"
)
_LABELS = _columns(
    "tenant LowCardinality(String), trace_id String, metric LowCardinality(String), reviewer String, label Bool,"
    " claim_labels Array(Tuple(claim String, label Bool)), note String,"
    " judge_versions Array(LowCardinality(String)), labelled_at DateTime64(3)"
)

# What v3, v4 and v9 added to the scores and v4 to the payloads (no-ops on tables migration 1 made).
SCORE_COLUMNS_V3 = _SCORES[-7:-1]
SCORE_COLUMNS_V4 = _SCORES[-1:]
# v9: a score carries its trace's eval run, so it stays apart from production after the payload it was found
# through has expired (payloads keep 14 days, scores 180: `ragmon.sinks.traffic`)
SCORE_COLUMNS_V9 = tuple(c for c in _SCORES if c[0] == "eval_run")
PAYLOAD_COLUMNS_V4 = tuple(c for c in _PAYLOADS if c[0] in ("messages", "context_source"))

# v7 keeps evaluation traffic apart: `eval_run` on spans, payloads, the rollups and the sampling counts. The rollup
# tables are created as they were before it (v1, v2, v6) and v7 adds the column and appends it to their keys: an
# AggregatingMergeTree merges rows by key, so a production minute and an eval run's minute must differ in the key.
# v9 adds it to the scores too (`SCORE_COLUMNS_V9`), outside their key.
EVAL_RUN_COLUMN = ("eval_run", "LowCardinality(String)")
_EVAL_RUN_ROLLUP = (*_MINUTES[:4], EVAL_RUN_COLUMN, *_MINUTES[4:])
_EVAL_RUN_SAMPLING = (*_SAMPLING[:3], EVAL_RUN_COLUMN, *_SAMPLING[3:])

# Keys. v1's minute rollup was key-first in the first release (v2 rebuilds it time first) and time first since;
# v7 appends eval_run to the rollups' and the sampling counts' keys.
_KEY_FIRST_ORDER = "tenant, feature, stage, model, minute"
_MINUTE_ORDER_V1 = "minute, tenant, feature, stage, model"
_MINUTE_ORDER_V7 = f"{_MINUTE_ORDER_V1}, eval_run"
_SAMPLING_ORDER_V6 = "minute, tenant, feature, outcome, reason"
_LABEL_ORDER = "tenant, metric, trace_id, reviewer"
# v11's feedback tables, as v11 made them.
_FEEDBACK = _columns(
    "tenant LowCardinality(String), trace_id String, request_id String, name LowCardinality(String),"
    " kind LowCardinality(String), value Float64, negative Bool, voter String, user String, comment String,"
    " feedback_id String, source LowCardinality(String), given_at DateTime64(3), received_at DateTime64(3)"
)
_FEEDBACK_ORDER = "tenant, trace_id, request_id, name, voter"


def _state(function: str, suffix: str) -> str:
    """`quantilesDD(a, l…)` → `quantilesDD<suffix>(a, l…)`: the State/Merge/MergeState combinator forms."""
    return function.replace("(", f"{suffix}(", 1)


def _minute_rollup_table(ddl: Ddl, r: Retention, name: str) -> str:
    """The minute rollup as v1–v6 created it (v7 adds `eval_run`)."""
    return ddl.create_table(
        name,
        _MINUTES,
        engine=ddl.engine("AggregatingMergeTree", name),
        partition_by="toYYYYMM(minute)",
        order_by=_MINUTE_ORDER_V1,
        ttl=ttl_clause("minute", r.rollups_days),
    )


def _hour_rollup_select(ddl: Ddl, source: str | None = None, *, eval_run: bool) -> str:
    """Minute rows → hour rows, merging the quantile states: the hourly view's query (over the storage table,
    `ddl.local`) and the v2 backfill (`source`: the whole cluster's minutes). `eval_run=False`: as v2–v6 had it."""
    keep_apart = ", m.eval_run AS eval_run" if eval_run else ""
    return (
        f"SELECT m.tenant AS tenant, m.feature AS feature, m.stage AS stage, m.model AS model{keep_apart},\n"
        "    toStartOfHour(m.minute) AS hour,\n"
        "    sum(m.spans) AS spans, sum(m.errors) AS errors,\n"
        f"    {_state(_DURATION_STATE, 'MergeState')}(m.duration_q) AS duration_q,\n"
        f"    {_state(_TTFT_STATE, 'MergeState')}(m.ttft_q) AS ttft_q,\n"
        "    sum(m.input_tokens) AS input_tokens, sum(m.output_tokens) AS output_tokens,\n"
        "    sum(m.cached_input_tokens) AS cached_input_tokens,\n"
        "    sum(m.cost_usd) AS cost_usd, sum(m.cost_known) AS cost_known\n"
        f"FROM {source or ddl.local('spans_1m')} AS m\n"
        f"GROUP BY tenant, feature, stage, model{', eval_run' if eval_run else ''}, hour"
    )


def _v1(ddl: Ddl, r: Retention) -> list[str]:
    day_parts = "ttl_only_drop_parts = 1, "
    spans = ddl.create_table(
        "spans",
        _SPANS,
        engine=ddl.engine("ReplacingMergeTree", "spans"),
        partition_by="toYYYYMMDD(start_time)",
        order_by="tenant, feature, stage, start_time, trace_id, span_id",
        ttl=ttl_clause("start_time", r.spans_days),
        extra=("INDEX idx_trace_id trace_id TYPE bloom_filter(0.01) GRANULARITY 4",),
        settings=day_parts,
    )
    payloads = ddl.create_table(
        "payloads",
        (*_PAYLOADS, ("inserted_at", "DateTime64(3) DEFAULT now64(3)")),
        engine=ddl.engine("ReplacingMergeTree", "payloads", "inserted_at"),
        partition_by="toYYYYMMDD(start_time)",
        order_by="tenant, trace_id",
        ttl=ttl_clause("start_time", r.payloads_days),
        settings=day_parts,
    )
    scores = ddl.create_table(
        "scores",
        _SCORES,
        engine=ddl.engine("ReplacingMergeTree", "scores", "scored_at"),
        partition_by="toYYYYMM(scored_at)",
        order_by="tenant, metric, trace_id, judge_version, run_name",
        ttl=ttl_clause("scored_at", r.scores_days),
    )
    alerts = ddl.create_table(
        "alerts",
        _ALERTS,
        engine=ddl.engine("ReplacingMergeTree", "alerts"),
        partition_by="toYYYYMM(fired_at)",
        order_by="tenant, fired_at, alert_id, state",
        ttl=ttl_clause("fired_at", r.alerts_days),
    )
    rollup = _minute_rollup_table(ddl, r, "spans_1m")
    rollup_view = (
        # On a cluster: attached to each shard's spans_local, writing that shard's spans_1m_local.
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {ddl.table('spans_1m_mv')}{ddl.on_cluster}"
        f" TO {ddl.local('spans_1m')} AS\n"
        # Source columns are qualified (s.) because the output aliases reuse their names.
        "SELECT s.tenant AS tenant, s.feature AS feature, s.stage AS stage, s.model AS model,\n"
        "    toStartOfMinute(toDateTime(s.start_time)) AS minute,\n"
        "    count() AS spans, countIf(s.status = 'error') AS errors,\n"
        f"    {_state(_DURATION_STATE, 'State')}(s.duration_ms) AS duration_q,\n"
        f"    {_state(_TTFT_STATE, 'State')}(s.ttft_ms) AS ttft_q,\n"
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
        *ddl.distributed("spans_1m"),
        rollup_view,
    ]


@dataclass(frozen=True, slots=True)
class Step:
    """A migration statement that runs only when `only_if` (a SELECT of one 0/1 value) says 1 — for the steps
    IF [NOT] EXISTS cannot make idempotent (a copy, an EXCHANGE). `only_if` is whole text, its values (the
    database, a table, a key) quoted in: `ragmon migrate --print` prints it beside the DDL for an operator to run."""

    sql: str
    only_if: str


def _v2(ddl: Ddl, r: Retention) -> list[str | Step]:
    # The first release's minute rollup is key-first: copy it into a time-first table and swap them. Guarded by the
    # live table's key, every step is safe to re-run after a crash at any point, and skipped on any other table.
    old_key = (
        f"SELECT count() > 0 FROM system.tables WHERE database = {quote_string(ddl.topology.database)}"
        f" AND name = 'spans_1m' AND sorting_key = '{_KEY_FIRST_ORDER}'"
    )
    minutes, rebuilt = ddl.table("spans_1m"), ddl.table("spans_1m_rebuilt")
    # A cluster is created time-first by v1 (this layout is newer than the key-first order): nothing to rebuild.
    rebuild: list[str | Step] = (
        []
        if ddl.topology.cluster
        else [
            Step(f"DROP VIEW IF EXISTS {ddl.table('spans_1m_mv')}{ddl.on_cluster}", old_key),
            Step(_minute_rollup_table(ddl, r, "spans_1m_rebuilt"), old_key),
            Step(f"TRUNCATE TABLE {rebuilt}{ddl.on_cluster}", old_key),
            Step(f"INSERT INTO {rebuilt} SELECT * FROM {minutes}", old_key),  # both as v1 made them
            Step(f"EXCHANGE TABLES {minutes} AND {rebuilt}{ddl.on_cluster}", old_key),
            f"DROP TABLE IF EXISTS {rebuilt}{ddl.on_cluster}",
            _v1(ddl, r)[-1],  # the per-minute view again (CREATE … IF NOT EXISTS)
        ]
    )
    content = ddl.create_table(
        "span_content",
        (
            *_CONTENT,
            ("inserted_at", "DateTime DEFAULT now()"),
            ("content_bytes", "UInt64 MATERIALIZED arraySum(arrayMap(v -> length(v), mapValues(content)))"),
        ),
        engine=ddl.engine("ReplacingMergeTree", "span_content"),
        partition_by="toStartOfHour(inserted_at)",
        order_by="tenant, trace_id, span_id",
        ttl=ttl_clause("inserted_at", r.content_hours, "Hour"),
        extra=("INDEX idx_ingest_seq ingest_seq TYPE minmax GRANULARITY 1",),
        settings="ttl_only_drop_parts = 1, ",
    )
    hours = ddl.create_table(
        "spans_1h",
        _HOURS,
        engine=ddl.engine("AggregatingMergeTree", "spans_1h"),
        partition_by="toYYYYMM(hour)",
        order_by=_MINUTE_ORDER_V1.replace("minute", "hour"),
        ttl=ttl_clause("hour", r.rollups_days),
    )
    hour_table = ddl.table("spans_1h")
    # Start-up runs migrations before any insert, so backfill-then-view loses nothing; the emptiness guard makes a
    # re-run after a crash between the two statements a no-op instead of a double count. On a cluster it reads
    # every shard's minutes and writes through the Distributed hour table (one statement, not one per shard).
    # The columns are named so the statement also runs where the hour table has v7's eval_run already (a new store
    # whose creation was cut short runs every migration: `Store.migrate`).
    backfill = (
        f"INSERT INTO {hour_table}\n({', '.join(name for name, _ in _HOURS)})\n"
        f"{_hour_rollup_select(ddl, ddl.table('spans_1m'), eval_run=False)}\n"
        f"HAVING (SELECT count() FROM {hour_table}) = 0"
    )
    hour_view = (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {ddl.table('spans_1h_mv')}{ddl.on_cluster}"
        f" TO {ddl.local('spans_1h')} AS\n{_hour_rollup_select(ddl, eval_run=False)}"
    )
    return [
        *ddl.alter_columns("spans", "ADD COLUMN IF NOT EXISTS ingest_seq UInt64"),
        f"ALTER TABLE {ddl.local('spans')}{ddl.on_cluster}"
        " ADD INDEX IF NOT EXISTS idx_ingest_seq ingest_seq TYPE minmax GRANULARITY 1",
        *ddl.alter_columns(
            "payloads",
            "ADD COLUMN IF NOT EXISTS sampling_reasons Array(LowCardinality(String)) AFTER sampling_reason",
        ),
        content,
        *ddl.distributed("span_content"),
        *rebuild,
        hours,
        *ddl.distributed("spans_1h"),
        backfill,
        hour_view,
    ]


def _added_columns(ddl: Ddl, table: str, added: Columns, columns: Columns) -> list[str]:
    """ALTERs that add `added` to `table`, each after the column it follows in `columns` (the table's full column
    list), so an upgraded table has the column order of a new one. IF NOT EXISTS: no-ops where they are."""
    names = [name for name, _ in columns]
    return [
        statement
        for name, ch_type in added
        for statement in ddl.alter_columns(
            table, f"ADD COLUMN IF NOT EXISTS {name} {ch_type} AFTER {names[names.index(name) - 1]}"
        )
    ]


def _v3(ddl: Ddl) -> list[str]:
    """The scores columns v1 lacked. Additive: older rows read the defaults — no flags, no claim evidence, an
    unknown inclusion probability (NULL)."""
    return _added_columns(ddl, "scores", SCORE_COLUMNS_V3, _SCORES)


def _v4(ddl: Ddl) -> list[str]:
    """The content model's payload columns and the score's context source."""
    return [
        *_added_columns(ddl, "payloads", PAYLOAD_COLUMNS_V4, _PAYLOADS),
        *_added_columns(ddl, "scores", SCORE_COLUMNS_V4, _SCORES),
    ]


def _v5(ddl: Ddl) -> list[str]:
    """The minute rollup is fed by the agent once a range's traces are decided (`sinks/rollup_sql.py`: one call per
    nested run of a stage), no longer by a view on every inserted span. Spans stored before this ran were counted
    by the view; the agent starts rolling up after the last of them (`ragmon.pipeline.rollups`)."""
    return [f"DROP VIEW IF EXISTS {ddl.table('spans_1m_mv')}{ddl.on_cluster}"]


def _v6(ddl: Ddl, r: Retention) -> list[str]:
    """The sampler's decisions per minute (`sampling_1m`): counted from this version on, not back-filled."""
    table = ddl.create_table(
        "sampling_1m",
        _SAMPLING,
        engine=ddl.engine("AggregatingMergeTree", "sampling_1m"),
        partition_by="toYYYYMM(minute)",
        order_by=_SAMPLING_ORDER_V6,
        ttl=ttl_clause("minute", r.rollups_days),
    )
    return [table, *ddl.distributed("sampling_1m")]


def _key_lacks(ddl: Ddl, table: str, column: str) -> str:
    """A guard: the live table's sorting key does not hold `column` yet. Not "differs from the order this migration
    sets": a table whose key grew further since (a creation cut short, or a later migration) must not have its
    key cut back to this migration's."""
    return (
        f"SELECT count() > 0 FROM system.tables WHERE database = {quote_string(ddl.topology.database)}"
        f" AND name = {quote_string(ddl.storage_name(table))}"
        f" AND NOT has(splitByString(', ', sorting_key), {quote_string(column)})"
    )


def _keyed_eval_run(ddl: Ddl, table: str, columns: Columns, order: str) -> list[str | Step]:
    """`eval_run` added to an aggregating table and appended to its key in one ALTER (ClickHouse lets a key grow
    only by columns added in the same statement; metadata only, no rows rewritten: old rows read '', production).
    Guarded by the live key, so a re-run after a crash skips what is done."""
    names = [name for name, _ in columns]
    after = names[names.index(EVAL_RUN_COLUMN[0]) - 1]
    add = f"ADD COLUMN IF NOT EXISTS {EVAL_RUN_COLUMN[0]} {EVAL_RUN_COLUMN[1]} AFTER {after}"
    old_key = _key_lacks(ddl, table, EVAL_RUN_COLUMN[0])
    alter = f"ALTER TABLE {ddl.local(table)}{ddl.on_cluster} {add}, MODIFY ORDER BY ({order})"
    steps: list[str | Step] = [Step(alter, old_key)]
    if ddl.topology.cluster:  # the Distributed table over it has no key, only the columns
        steps.append(f"ALTER TABLE {ddl.table(table)}{ddl.on_cluster} {add}")
    return steps


def _v7(ddl: Ddl) -> list[str | Step]:
    """Evaluation traffic apart from production: `eval_run` on spans and payloads (old rows read '', production),
    and in the keys of the rollups and the sampling counts; the hourly view is made again to carry it."""
    added = (EVAL_RUN_COLUMN,)
    hour_view = ddl.table("spans_1h_mv")
    return [
        *_added_columns(ddl, "spans", added, _SPANS),
        *_added_columns(ddl, "payloads", added, _PAYLOADS),
        *_keyed_eval_run(ddl, "spans_1m", _EVAL_RUN_ROLLUP, _MINUTE_ORDER_V7),
        *_keyed_eval_run(ddl, "spans_1h", _EVAL_RUN_ROLLUP, _MINUTE_ORDER_V7.replace("minute", "hour")),
        *_keyed_eval_run(ddl, "sampling_1m", _EVAL_RUN_SAMPLING, f"{_SAMPLING_ORDER_V6}, eval_run"),
        # Migrations run before the agent inserts anything, so no minute row lands between these two.
        f"DROP VIEW IF EXISTS {hour_view}{ddl.on_cluster}",
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {hour_view}{ddl.on_cluster}"
        f" TO {ddl.local('spans_1h')} AS\n{_hour_rollup_select(ddl, eval_run=True)}",
    ]


def _v8(ddl: Ddl, r: Retention) -> list[str]:
    """People's labels: the audit log of every write, the latest label per (tenant, trace, metric, reviewer), and
    the view between them — so one INSERT records a label and its audit row together."""
    writes = ddl.create_table(
        "label_writes",
        _LABELS,
        engine=ddl.engine("MergeTree", "label_writes"),
        partition_by="toYYYYMM(labelled_at)",
        order_by=f"{_LABEL_ORDER}, labelled_at",
        ttl=ttl_clause("labelled_at", r.labels_days),
    )
    labels = ddl.create_table(
        "labels",
        _LABELS,
        engine=ddl.engine("ReplacingMergeTree", "labels", "labelled_at"),
        partition_by=None,
        order_by=_LABEL_ORDER,
        ttl=ttl_clause("labelled_at", r.labels_days),
    )
    names = ", ".join(quote_identifier(name) for name, _ in _LABELS)
    view = (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {ddl.table('labels_mv')}{ddl.on_cluster}"
        f" TO {ddl.local('labels')} AS\nSELECT {names} FROM {ddl.local('label_writes')}"
    )
    return [writes, *ddl.distributed("label_writes"), labels, *ddl.distributed("labels"), view]


def _v9(ddl: Ddl) -> list[str]:
    """A score's own `eval_run`. Not in the key: a trace belongs to one run, so the column never tells two versions
    of a score apart. Rows scored before it read '' and are told apart by their trace's payload while it lasts
    (`ragmon.sinks.traffic.Traffic.scores_condition`)."""
    return _added_columns(ddl, "scores", SCORE_COLUMNS_V9, _SCORES)


# v10 says where: the release and environment on spans, payloads (with the session), scores and the rollups' keys;
# the paragraph or source of each retrieved document on spans; the question groups.
_RELEASE_COLUMNS = _columns("release LowCardinality(String), environment LowCardinality(String)")
_SPANS_V10 = (*_SPANS[:11], *_RELEASE_COLUMNS, *_SPANS[11:27], ("retrieved_sources", "Array(String)"), *_SPANS[27:])
_PAYLOADS_V10 = (*_PAYLOADS[:4], *_RELEASE_COLUMNS, ("session", "String"), *_PAYLOADS[4:])
_SCORES_V10 = (*_SCORES[:4], _RELEASE_COLUMNS[0], *_SCORES[4:])
_ROLLUP_V10 = (*_EVAL_RUN_ROLLUP[:5], *_RELEASE_COLUMNS, *_EVAL_RUN_ROLLUP[5:])
_MINUTE_ORDER_V10 = f"{_MINUTE_ORDER_V7}, release, environment"
_TRACE_QUESTIONS = _columns(
    "tenant LowCardinality(String), trace_id String, feature LowCardinality(String), eval_run LowCardinality(String),"
    " release LowCardinality(String), environment LowCardinality(String), start_time DateTime64(9),"
    " group_id String, question String, similarity Float32, failed UInt8, duration_ms Float64"
)
_QUESTION_GROUPS = _columns(
    "tenant LowCardinality(String), feature LowCardinality(String), group_id String, label String,"
    " normalised String, grouper LowCardinality(String), centroid Array(Float32), members UInt64,"
    " created_at DateTime64(3), updated_at DateTime64(3)"
)


def _keyed_release(ddl: Ddl, table: str, order: str) -> list[str | Step]:
    """`release` and `environment` added to a rollup and appended to its key in one ALTER, as v7 did with
    `eval_run` (old rows read '': no release known). Guarded by the live key."""
    names = [name for name, _ in _ROLLUP_V10]
    adds = ", ".join(
        f"ADD COLUMN IF NOT EXISTS {name} {ch_type} AFTER {names[names.index(name) - 1]}"
        for name, ch_type in _RELEASE_COLUMNS
    )
    old_key = _key_lacks(ddl, table, "release")
    steps: list[str | Step] = [
        Step(f"ALTER TABLE {ddl.local(table)}{ddl.on_cluster} {adds}, MODIFY ORDER BY ({order})", old_key)
    ]
    if ddl.topology.cluster:
        steps.append(f"ALTER TABLE {ddl.table(table)}{ddl.on_cluster} {adds}")
    return steps


def _v10(ddl: Ddl, r: Retention) -> list[str | Step]:
    """Where: the release and environment (spans, payloads with the session, scores, the rollups' keys), each
    retrieved document's paragraph or source (spans), an index on the session (spans), and the question groups
    (`trace_questions`, one row per trace; `question_groups`, one per group). Old rows read '': no release, no
    source, no session."""
    hour_view = ddl.table("spans_1h_mv")
    keep_apart = "m.eval_run AS eval_run, m.release AS release, m.environment AS environment"
    hour_select = (
        _hour_rollup_select(ddl, eval_run=True)
        .replace("m.eval_run AS eval_run", keep_apart)
        .replace(
            "GROUP BY tenant, feature, stage, model, eval_run, hour",
            "GROUP BY tenant, feature, stage, model, eval_run, release, environment, hour",
        )
    )
    questions = ddl.create_table(
        "trace_questions",
        _TRACE_QUESTIONS,
        engine=ddl.engine("ReplacingMergeTree", "trace_questions"),
        partition_by="toYYYYMMDD(start_time)",
        order_by="tenant, start_time, trace_id",
        ttl=ttl_clause("start_time", r.spans_days),
        settings="ttl_only_drop_parts = 1, ",
    )
    groups = ddl.create_table(
        "question_groups",
        _QUESTION_GROUPS,
        engine=ddl.engine("ReplacingMergeTree", "question_groups", "updated_at"),
        partition_by=None,
        order_by="tenant, feature, group_id",
        ttl=ttl_clause("updated_at", r.rollups_days),
    )
    return [
        *_added_columns(ddl, "spans", (*_RELEASE_COLUMNS, ("retrieved_sources", "Array(String)")), _SPANS_V10),
        # a conversation's turns are read by session; parts written before this read without the index
        f"ALTER TABLE {ddl.local('spans')}{ddl.on_cluster}"
        " ADD INDEX IF NOT EXISTS idx_session session TYPE bloom_filter(0.01) GRANULARITY 4",
        *_added_columns(ddl, "payloads", (*_RELEASE_COLUMNS, ("session", "String")), _PAYLOADS_V10),
        *_added_columns(ddl, "scores", _RELEASE_COLUMNS[:1], _SCORES_V10),
        *_keyed_release(ddl, "spans_1m", _MINUTE_ORDER_V10),
        *_keyed_release(ddl, "spans_1h", _MINUTE_ORDER_V10.replace("minute", "hour")),
        # Migrations run before the agent inserts anything, so no minute row lands between these two.
        f"DROP VIEW IF EXISTS {hour_view}{ddl.on_cluster}",
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {hour_view}{ddl.on_cluster}"
        f" TO {ddl.local('spans_1h')} AS\n{hour_select}",
        questions,
        *ddl.distributed("trace_questions"),
        groups,
        *ddl.distributed("question_groups"),
    ]


def _v11(ddl: Ddl, r: Retention) -> list[str]:
    """End users' feedback: the log of every write, the latest value per (tenant, trace or request, name, voter),
    and the view between them — one INSERT records a feedback and its audit row together (as v8's labels)."""
    writes = ddl.create_table(
        "feedback_writes",
        _FEEDBACK,
        engine=ddl.engine("MergeTree", "feedback_writes"),
        partition_by="toYYYYMM(received_at)",
        order_by=f"{_FEEDBACK_ORDER}, received_at",
        ttl=ttl_clause("received_at", r.feedback_days),
    )
    latest = ddl.create_table(
        "feedback",
        _FEEDBACK,
        engine=ddl.engine("ReplacingMergeTree", "feedback", "given_at"),
        partition_by=None,
        order_by=_FEEDBACK_ORDER,
        ttl=ttl_clause("received_at", r.feedback_days),
    )
    names = ", ".join(quote_identifier(name) for name, _ in _FEEDBACK)
    view = (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {ddl.table('feedback_mv')}{ddl.on_cluster}"
        f" TO {ddl.local('feedback')} AS\nSELECT {names} FROM {ddl.local('feedback_writes')}"
    )
    return [writes, *ddl.distributed("feedback_writes"), latest, *ddl.distributed("feedback"), view]


_DOCUMENTS_V12 = _columns(
    "tenant LowCardinality(String), feature LowCardinality(String), stage LowCardinality(String),"
    " eval_run LowCardinality(String), release LowCardinality(String), doc String, minute DateTime,"
    " retrieved SimpleAggregateFunction(sum, UInt64), traces SimpleAggregateFunction(sum, UInt64),"
    " rank_sum SimpleAggregateFunction(sum, UInt64), first SimpleAggregateFunction(sum, UInt64),"
    " ranks SimpleAggregateFunction(sumMap, Tuple(Array(UInt16), Array(UInt64))),"
    " chunks AggregateFunction(uniqExact, String)"
)
_DOCUMENTS_ORDER_V12 = "tenant, feature, stage, eval_run, minute, release, doc"


def _v12(ddl: Ddl, r: Retention) -> list[str]:
    """The document rollups: per minute (written by the agent beside the span rollup) and per hour (a view on the
    minutes). New tables: a store upgraded to v12 has no documents rolled up before it, so the document views start
    from the upgrade."""
    minutes = ddl.create_table(
        "documents_1m",
        _DOCUMENTS_V12,
        engine=ddl.engine("AggregatingMergeTree", "documents_1m"),
        partition_by="toYYYYMMDD(minute)",
        order_by=_DOCUMENTS_ORDER_V12,
        ttl=ttl_clause("minute", r.spans_days),
        settings="ttl_only_drop_parts = 1, ",
    )
    hours = ddl.create_table(
        "documents_1h",
        tuple(("hour", "DateTime") if name == "minute" else (name, t) for name, t in _DOCUMENTS_V12),
        engine=ddl.engine("AggregatingMergeTree", "documents_1h"),
        partition_by="toYYYYMM(hour)",
        order_by=_DOCUMENTS_ORDER_V12.replace("minute", "hour"),
        ttl=ttl_clause("hour", r.rollups_days),
    )
    hour_select = (
        "SELECT m.tenant AS tenant, m.feature AS feature, m.stage AS stage, m.eval_run AS eval_run,\n"
        "    m.release AS release, m.doc AS doc, toStartOfHour(m.minute) AS hour,\n"
        "    sum(m.retrieved) AS retrieved, sum(m.traces) AS traces, sum(m.rank_sum) AS rank_sum,\n"
        "    sum(m.first) AS first, sumMap(m.ranks) AS ranks, uniqExactMergeState(m.chunks) AS chunks\n"
        f"FROM {ddl.local('documents_1m')} AS m\n"
        "GROUP BY tenant, feature, stage, eval_run, release, doc, hour"
    )
    return [
        minutes,
        *ddl.distributed("documents_1m"),
        hours,
        *ddl.distributed("documents_1h"),
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {ddl.table('documents_1h_mv')}{ddl.on_cluster}"
        f" TO {ddl.local('documents_1h')} AS\n{hour_select}",
    ]


# v13's hourly rollup of the question groups, as v13 made it.
_QUESTION_HOURS = _columns(
    "hour DateTime, tenant LowCardinality(String), feature LowCardinality(String), eval_run LowCardinality(String),"
    " release LowCardinality(String), environment LowCardinality(String), group_id String,"
    " requests SimpleAggregateFunction(sum, UInt64), failed SimpleAggregateFunction(sum, UInt64),"
    f" duration_q AggregateFunction({_DURATION_STATE}, Float64),"
    " examples AggregateFunction(groupUniqArray(3), String)"
)


def _question_hours_select(source: str) -> str:
    return (
        "SELECT toStartOfHour(toDateTime(q.start_time)) AS hour, q.tenant AS tenant, q.feature AS feature,\n"
        "    q.eval_run AS eval_run, q.release AS release, q.environment AS environment, q.group_id AS group_id,\n"
        "    count() AS requests, sum(q.failed) AS failed,\n"
        f"    {_state(_DURATION_STATE, 'State')}(q.duration_ms) AS duration_q,\n"
        "    groupUniqArrayState(3)(q.question) AS examples\n"
        f"FROM {source} AS q\n"
        "GROUP BY hour, tenant, feature, eval_run, release, environment, group_id"
    )


def _v13(ddl: Ddl, r: Retention) -> list[str]:
    """The question-group view's shape: whole hours per group (`trace_questions_1h`, written by a view as the
    question stage inserts, backfilled from what is grouped already) and the trace id as a number on
    `trace_questions` (`trace_hash`, computed on read in parts written before it)."""
    hours = ddl.create_table(
        "trace_questions_1h",
        _QUESTION_HOURS,
        engine=ddl.engine("AggregatingMergeTree", "trace_questions_1h"),
        partition_by="toYYYYMM(hour)",
        order_by="hour, tenant, feature, eval_run, release, environment, group_id",
        ttl=ttl_clause("hour", r.rollups_days),
    )
    hour_table = ddl.table("trace_questions_1h")
    # Migrations run before the agent inserts, so backfill-then-view loses nothing; the emptiness guard makes a
    # re-run after a crash between the two a no-op, as v2's hours.
    backfill = (
        f"INSERT INTO {hour_table}\n({', '.join(name for name, _ in _QUESTION_HOURS)})\n"
        f"{_question_hours_select(ddl.table('trace_questions'))}\n"
        f"HAVING (SELECT count() FROM {hour_table}) = 0"
    )
    view = (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {ddl.table('trace_questions_1h_mv')}{ddl.on_cluster}"
        f" TO {ddl.local('trace_questions_1h')} AS\n{_question_hours_select(ddl.local('trace_questions'))}"
    )
    return [
        *ddl.alter_columns(
            "trace_questions", "ADD COLUMN IF NOT EXISTS trace_hash UInt64 MATERIALIZED cityHash64(trace_id)"
        ),
        hours,
        *ddl.distributed("trace_questions_1h"),
        backfill,
        view,
    ]


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
        Migration(
            10,
            "release and environment, documents' sources, session index, question groups",
            tuple(_v10(ddl, retention)),
        ),
        Migration(11, "end users' feedback, and the log of every feedback written", tuple(_v11(ddl, retention))),
        Migration(12, "document rollups per minute and per hour", tuple(_v12(ddl, retention))),
        Migration(13, "question groups per hour; trace_questions: trace_hash", tuple(_v13(ddl, retention))),
    ]
