-- Settings for the ClickHouse user the ragmon agents connect as (RAGMON_AGENT__CLICKHOUSE_URL), on a cluster.
-- Run once, e.g.: clickhouse-client --multiquery < agent-profile.sql   (replace ragmon with your user)
--
-- distributed_foreground_insert = 1: an INSERT through a Distributed table returns when every shard has its
-- part, not when the receiving node has queued it for forwarding. The agent acknowledges a batch to its
-- write-ahead log only after the store accepted it, so the batch must be on the shards by then; a re-sent batch
-- splits over the shards the same way and each part is dropped by its deduplication token.
CREATE SETTINGS PROFILE IF NOT EXISTS ragmon_agent ON CLUSTER ragmon
    SETTINGS distributed_foreground_insert = 1
    TO ragmon;
