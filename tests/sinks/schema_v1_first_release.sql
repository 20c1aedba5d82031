-- Migration 1 as the first release ran it (commit aa3ac8c, 2026-12-01): a v1 store's tables as they really were,
-- with a key-first minute rollup and none of the columns v2-v9 add (migration 1 today makes them with v9's columns).
-- {database} stands for the database. Used by tests/sinks/test_schema_definition.py.

CREATE TABLE IF NOT EXISTS {database}.`spans` (
    `tenant` LowCardinality(String),
    `trace_id` String,
    `span_id` String,
    `parent_span_id` String,
    `name` LowCardinality(String),
    `stage` LowCardinality(String),
    `feature` LowCardinality(String),
    `user` String,
    `session` String,
    `service` LowCardinality(String),
    `start_time` DateTime64(9),
    `duration_ms` Float64,
    `status` LowCardinality(String),
    `error_type` LowCardinality(String),
    `model` LowCardinality(String),
    `provider` LowCardinality(String),
    `input_tokens` UInt32,
    `output_tokens` UInt32,
    `cached_input_tokens` UInt32,
    `cost_usd` Nullable(Float64),
    `top1_score` Nullable(Float32),
    `similarity_gap` Nullable(Float32),
    `norm_deviation` Nullable(Float32),
    `ttft_ms` Nullable(Float32),
    `retrieved_ids` Array(String),
    `retrieved_scores` Array(Float32),
    `attributes` Map(String, String),
    INDEX idx_trace_id trace_id TYPE bloom_filter(0.01) GRANULARITY 4
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMMDD(start_time)
ORDER BY (tenant, feature, stage, start_time, trace_id, span_id)
TTL toDateTime(start_time) + toIntervalDay(30)
SETTINGS non_replicated_deduplication_window = 10000, ttl_only_drop_parts = 1, index_granularity = 8192;

CREATE TABLE IF NOT EXISTS {database}.`payloads` (
    `tenant` LowCardinality(String),
    `trace_id` String,
    `feature` LowCardinality(String),
    `start_time` DateTime64(9),
    `question` String,
    `answer` String,
    `passages` Array(Tuple(id String, score Nullable(Float32), text String)),
    `tool_calls` Array(Tuple(name String, arguments String, result String)),
    `content` Map(String, String),
    `sampling_reason` LowCardinality(String),
    `inclusion_probability` Float64,
    `inserted_at` DateTime64(3) DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(inserted_at)
PARTITION BY toYYYYMMDD(start_time)
ORDER BY (tenant, trace_id)
TTL toDateTime(start_time) + toIntervalDay(14)
SETTINGS non_replicated_deduplication_window = 10000, ttl_only_drop_parts = 1, index_granularity = 8192;

CREATE TABLE IF NOT EXISTS {database}.`scores` (
    `tenant` LowCardinality(String),
    `trace_id` String,
    `feature` LowCardinality(String),
    `metric` LowCardinality(String),
    `judge_version` LowCardinality(String),
    `value` Nullable(Float64),
    `status` LowCardinality(String),
    `explanation` String,
    `claims` Array(Tuple(claim String, verdict String, reason String)),
    `judge_model` LowCardinality(String),
    `prompt_version` LowCardinality(String),
    `input_tokens` UInt32,
    `output_tokens` UInt32,
    `cost_usd` Nullable(Float64),
    `run_name` LowCardinality(String),
    `scored_at` DateTime64(3)
)
ENGINE = ReplacingMergeTree(scored_at)
PARTITION BY toYYYYMM(scored_at)
ORDER BY (tenant, metric, trace_id, judge_version, run_name)
TTL toDateTime(scored_at) + toIntervalDay(180)
SETTINGS non_replicated_deduplication_window = 10000, index_granularity = 8192;

CREATE TABLE IF NOT EXISTS {database}.`alerts` (
    `tenant` LowCardinality(String),
    `alert_id` String,
    `fired_at` DateTime64(3),
    `rule` LowCardinality(String),
    `severity` LowCardinality(String),
    `state` LowCardinality(String),
    `feature` LowCardinality(String),
    `stage` LowCardinality(String),
    `metric` LowCardinality(String),
    `value` Nullable(Float64),
    `threshold` Nullable(Float64),
    `message` String,
    `labels` Map(String, String)
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(fired_at)
ORDER BY (tenant, fired_at, alert_id, state)
TTL toDateTime(fired_at) + toIntervalDay(365)
SETTINGS non_replicated_deduplication_window = 10000, index_granularity = 8192;

CREATE TABLE IF NOT EXISTS {database}.`spans_1m` (
    `tenant` LowCardinality(String),
    `feature` LowCardinality(String),
    `stage` LowCardinality(String),
    `model` LowCardinality(String),
    `minute` DateTime,
    `spans` SimpleAggregateFunction(sum, UInt64),
    `errors` SimpleAggregateFunction(sum, UInt64),
    `duration_q` AggregateFunction(quantilesDD(0.005, 0.5, 0.95, 0.99), Float64),
    `ttft_q` AggregateFunction(quantilesDD(0.005, 0.95), Nullable(Float32)),
    `input_tokens` SimpleAggregateFunction(sum, UInt64),
    `output_tokens` SimpleAggregateFunction(sum, UInt64),
    `cached_input_tokens` SimpleAggregateFunction(sum, UInt64),
    `cost_usd` SimpleAggregateFunction(sum, Float64),
    `cost_known` SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(minute)
ORDER BY (tenant, feature, stage, model, minute)
TTL toDateTime(minute) + toIntervalDay(400)
SETTINGS non_replicated_deduplication_window = 10000, index_granularity = 8192;

CREATE MATERIALIZED VIEW IF NOT EXISTS {database}.`spans_1m_mv` TO {database}.`spans_1m` AS
SELECT s.tenant AS tenant, s.feature AS feature, s.stage AS stage, s.model AS model,
    toStartOfMinute(toDateTime(s.start_time)) AS minute,
    count() AS spans, countIf(s.status = 'error') AS errors,
    quantilesDDState(0.005, 0.5, 0.95, 0.99)(s.duration_ms) AS duration_q,
    quantilesDDState(0.005, 0.95)(s.ttft_ms) AS ttft_q,
    sum(s.input_tokens) AS input_tokens, sum(s.output_tokens) AS output_tokens,
    sum(s.cached_input_tokens) AS cached_input_tokens,
    sum(ifNull(s.cost_usd, 0)) AS cost_usd, countIf(s.cost_usd IS NOT NULL) AS cost_known
FROM {database}.`spans` AS s
GROUP BY tenant, feature, stage, model, minute;
