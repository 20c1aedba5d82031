"""The store's schema as it is now (`SCHEMA_VERSION`): every table and view stated once, in `TABLES` and `VIEWS`.

A table's columns (with a comment on each line: `ragmon schema` prints them, `schema_doc.py`), engine, keys,
partitions, TTL (how long per `Retention`), indexes and sharding key are its `Table`; `spans` and `span_content` take
their columns from the span model (`ragmon.model.SPAN_COLUMNS`, `CONTENT_COLUMNS`), the other column lists are
declared here as (name, type) tuples so inserts (`arrow.py`) and DDL share them. A new store is created from this
(`create_statements`, run by `Store.migrate`); an older one is brought here by the migrations beside it
(`ragmon.sinks.migrations`), and a test proves both give one schema. DDL is produced for a `Topology`: a single node
(chDB or one ClickHouse server), or with `cluster` set a sharded, replicated ClickHouse cluster (below).

To change the schema: change the definition here, add a migration that does the same to an older store and raise
`SCHEMA_VERSION` (tests/sinks/test_schema_definition.py and tests/deploy/test_cluster_schema.py fail until the two
agree); a new table also gets its line in `schema_doc.py` (listed, or not listed and why).

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

from collections.abc import Callable
from dataclasses import dataclass

from ragmon.model import CONTENT_COLUMNS, SPAN_COLUMNS

SCHEMA_VERSION = 13

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
    # End users' feedback and the log of every feedback write (v11). Counted from arrival: feedback naming a trace
    # that never arrives (or a request id no span carries) is kept, counted as unmatched, and expires with this.
    feedback_days: int = 180


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
    # v10: the trace's release and environment (its outermost span's that has one) and its conversation
    ("release", "LowCardinality(String)"),
    ("environment", "LowCardinality(String)"),
    ("session", "String"),
    ("start_time", "DateTime64(9)"),
    ("question", "String"),
    ("answer", "String"),
    ("passages", "Array(Tuple(id String, score Nullable(Float32), text String))"),
    ("tool_calls", "Array(Tuple(name String, arguments String, result String))"),
    # v4: the answering LLM call's prompt, and what the judge's context is: 'passages'
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
    ("release", "LowCardinality(String)"),  # v10: the trace's release (its payload's), so scores compare by release
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
    # v3: what the judge flagged and what the trace weighs.
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

# v10: the questions people keep asking (`ragmon.questions`). Every production trace's question is put in a group
# of near-duplicates and paraphrases once its range is decided; a group keeps its id across days and restarts, so
# it can be compared across releases. `trace_questions`: one row per trace (kept or not: the grouping reads the
# text `span_content` holds for every trace); `question_groups`: one row per group, its latest state.
TRACE_QUESTIONS_TABLE = "trace_questions"
TRACE_HASH = "cityHash64(trace_id)"  # v13: `trace_questions.trace_hash`; a score's trace is found by it
TRACE_QUESTION_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "LowCardinality(String)"),
    ("trace_id", "String"),
    ("feature", "LowCardinality(String)"),
    ("eval_run", "LowCardinality(String)"),
    ("release", "LowCardinality(String)"),
    ("environment", "LowCardinality(String)"),
    ("start_time", "DateTime64(9)"),  # the trace's first span's start
    ("group_id", "String"),  # its question group (`question_groups.group_id`)
    ("question", "String"),  # as the user asked it (redacted as captured), cut
    ("similarity", "Float32"),  # to the group's representative question, 0–1 (1: the same normalised text)
    ("failed", "UInt8"),  # 1: a span of the trace had an error status
    ("duration_ms", "Float64"),  # the request's duration: its root span's (else its longest span's)
)
QUESTION_GROUPS_TABLE = "question_groups"
QUESTION_GROUP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "LowCardinality(String)"),
    ("feature", "LowCardinality(String)"),
    ("group_id", "String"),  # stable: derived from the first question's normalised text
    ("label", "String"),  # the representative question, as first asked
    ("normalised", "String"),  # its normalised text
    ("grouper", "LowCardinality(String)"),  # what grouped it: 'lexical' or 'minilm'
    ("centroid", "Array(Float32)"),  # the grouper's vector of the group (empty for the lexical grouper)
    ("members", "UInt64"),  # questions grouped into it so far
    ("created_at", "DateTime64(3)"),
    ("updated_at", "DateTime64(3)"),
)
# v11: end users' own verdict on an answer (`POST /v1/feedback` on the receiver port, `ragmon.feedback` in the SDK).
# Every write lands in `feedback_writes` (the audit: never replaced); a view copies it into `feedback`, where a later
# value of the same (tenant, trace or request, name, voter) replaces the earlier one — a user switching thumbs down to
# up counts once, as up (read with FINAL). Feedback is not joined to its trace when written: it may come before the
# trace (or name a request id), so reads join it to `spans` (`feedback_sql.py`).
FEEDBACK_WRITES_TABLE = "feedback_writes"
FEEDBACK_TABLE = "feedback"
FEEDBACK_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "LowCardinality(String)"),
    ("trace_id", "String"),  # the trace it names (32 lowercase hex); '' when it names the app's request id
    ("request_id", "String"),  # the app's own id of the request (`ragmon.request_id` on the request span), or ''
    ("name", "LowCardinality(String)"),  # thumbs | rating | a named score's name (e.g. helpful, copied)
    ("kind", "LowCardinality(String)"),  # thumbs | rating | score
    ("value", "Float64"),  # thumbs: 1 up, 0 down; rating: 1-5; score: the number sent
    ("negative", "Bool"),  # thumbs down or a rating of 1-2 (a named score has no known bad side: false)
    ("voter", "String"),  # whose verdict it is: the user, else (anonymous) the feedback's id — one value per voter
    ("user", "String"),  # the end user, as the app names them ('' when not given)
    ("comment", "String"),
    ("feedback_id", "String"),  # the sender's id of this feedback, else a hash of its content
    ("source", "LowCardinality(String)"),  # which key wrote it: api (a tenant's API key, the SDK) | feedback_key
    ("given_at", "DateTime64(3)"),  # when the user gave it (the sender's clock, else arrival): the latest wins
    ("received_at", "DateTime64(3)"),  # when the agent stored it; retention counts from here
)
FEEDBACK_ORDER = "tenant, trace_id, request_id, name, voter"

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
    # v10: the trace's release and environment (`service.version`, `deployment.environment.name`)
    ("release", "LowCardinality(String)"),
    ("environment", "LowCardinality(String)"),
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

# v12: the document rollups the document views read (`documents_rollup_sql.py`): per minute, filled by the agent
# beside the span rollup (one INSERT … SELECT per decided range, its own deduplication token), and per hour from the
# minutes. A retrieval span's documents, one row per (feature, stage, document) and minute: what raw spans would
# give after an ARRAY JOIN and a GROUP BY over every retrieval of the window, added up once per range instead.
DOCUMENT_ROLLUP_TABLE = "documents_1m"
DOCUMENT_HOUR_ROLLUP_TABLE = "documents_1h"
DOCUMENT_ROLLUP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "LowCardinality(String)"),
    ("feature", "LowCardinality(String)"),
    ("stage", "LowCardinality(String)"),  # whose documents: 'search' (a retriever's) or 'rerank' (a reranker's output)
    ("eval_run", "LowCardinality(String)"),  # '' = production; else the `ragmon eval run` it counts
    ("release", "LowCardinality(String)"),  # the retrieval span's release
    ("doc", "String"),  # the document: its paragraph or source where the app names one, else its chunk id
    ("minute", "DateTime"),  # the retrieval span's start, to the minute
    ("retrieved", "SimpleAggregateFunction(sum, UInt64)"),  # times it was retrieved
    ("traces", "SimpleAggregateFunction(sum, UInt64)"),  # traces that retrieved it (once per minute and range)
    ("rank_sum", "SimpleAggregateFunction(sum, UInt64)"),  # its ranks added up (1 = first): rank_sum / retrieved
    ("first", "SimpleAggregateFunction(sum, UInt64)"),  # times it was retrieved first
    ("ranks", "SimpleAggregateFunction(sumMap, Tuple(Array(UInt16), Array(UInt64)))"),  # per rank; 10: 10 on
    ("chunks", "AggregateFunction(uniqExact, String)"),  # its chunk ids
)
DOCUMENT_HOUR_ROLLUP_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    ("hour", "DateTime") if name == "minute" else (name, ch_type) for name, ch_type in DOCUMENT_ROLLUP_COLUMNS
)
# Feature and stage first: a view reads one stage's documents of a feature (or all) over a window.
DOCUMENT_ROLLUP_ORDER = "tenant, feature, stage, eval_run, minute, release, doc"


# v13: the question-group view reads whole hours from `trace_questions_1h` (a view on `trace_questions` writes it
# as the stage inserts) and only the window's edges from `trace_questions` itself; judged quality looks up the
# scored traces' groups by `trace_hash` (a number, not a 32-character string: over a day's two million rows the
# string set was most of the view's time).
QUESTION_HOUR_ROLLUP_TABLE = "trace_questions_1h"
QUESTION_EXAMPLES = 3  # askings kept per group and hour
QUESTION_HOUR_ROLLUP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("hour", "DateTime"),
    ("tenant", "LowCardinality(String)"),
    ("feature", "LowCardinality(String)"),
    ("eval_run", "LowCardinality(String)"),
    ("release", "LowCardinality(String)"),
    ("environment", "LowCardinality(String)"),
    ("group_id", "String"),
    ("requests", "SimpleAggregateFunction(sum, UInt64)"),
    ("failed", "SimpleAggregateFunction(sum, UInt64)"),  # requests that had an error
    ("duration_q", f"AggregateFunction({DURATION_STATE}, Float64)"),  # the request duration's sketch, as the rollups'
    ("examples", f"AggregateFunction(groupUniqArray({QUESTION_EXAMPLES}), String)"),  # askings, as asked
)
QUESTION_HOUR_ROLLUP_ORDER = "hour, tenant, feature, eval_run, release, environment, group_id"


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
        primary_key: str | None = None,
        extra: tuple[str, ...] = (),
        settings: str = "",
    ) -> str:
        body = ",\n    ".join((*(f"{quote_identifier(c)} {t}" for c, t in columns), *extra))
        parts = [f"CREATE TABLE IF NOT EXISTS {self.local(name)}{self.on_cluster} (\n    {body}\n)"]
        parts.append(f"ENGINE = {engine}")
        if partition_by:
            parts.append(f"PARTITION BY {partition_by}")
        parts.append(f"ORDER BY ({order_by})")
        if primary_key:
            parts.append(f"PRIMARY KEY ({primary_key})")
        if ttl:
            parts.append(f"TTL {ttl}")
        parts.append(f"SETTINGS {self.dedup_settings()}{settings}index_granularity = 8192")
        return "\n".join(parts)


def ttl_clause(column: str, amount: int, unit: str = "Day") -> str:
    return f"toDateTime({column}) + toInterval{unit}({int(amount)})"


# Time first: the report reads a time range (its edge minutes) across every key, so a key-first order made it
# read and deserialise every granule of the table: over 10M spans / 24 h, a day's report took several times as long
# with (tenant, feature, stage, model, minute), every minute's keys being spread over all granules (docs/results.md).
ROLLUP_ORDER_V1 = "minute, tenant, feature, stage, model"
ROLLUP_ORDER_V7 = f"{ROLLUP_ORDER_V1}, eval_run"
ROLLUP_ORDER = f"{ROLLUP_ORDER_V7}, release, environment"
SAMPLING_ORDER_V6 = "minute, tenant, feature, outcome, reason"
SAMPLING_ORDER = f"{SAMPLING_ORDER_V6}, eval_run"


LOCAL_SUFFIX = "_local"
# Sharding keys on a cluster: one key per trace, so a trace's spans, text, payload, scores and labels are whole on
# one shard (a re-sent span meets its duplicate there).
TRACE_SHARDING_KEY = "cityHash64(trace_id)"
# The minute roll-up is written through its Distributed table (`rollup_sql.py`); the hours follow on each shard.
_ROLLUP_SHARDING_KEY = "cityHash64(tenant, feature, stage, model)"
# Whole day (or hour) partitions expire at once instead of being rewritten row by row.
_DROP_WHOLE_PARTS = "ttl_only_drop_parts = 1, "
Columns = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Table:
    """One table as it is now: a new store is created from this (`create_statements`), an older one is brought
    here by the migrations (`ragmon.sinks.migrations`). On a cluster it is `<name>_local`, replicated, on every
    shard, under a `Distributed` table `<name>` sharded by `sharded_by` (`Ddl`)."""

    name: str
    columns: Columns  # what ragmon's writers insert, in this order
    engine: str  # a MergeTree kind; Replicated… on a cluster
    order_by: str
    partition_by: str | None
    ttl: tuple[str, str]  # (the time column, the `Retention` field that says how long rows stay)
    sharded_by: str
    version_column: str | None = None  # a ReplacingMergeTree keeps the row with the highest version
    primary_key: str | None = None  # when shorter than the order
    engine_columns: Columns = ()  # after `columns`, filled by the engine (DEFAULT, MATERIALIZED)
    indexes: tuple[str, ...] = ()
    settings: str = ""

    def create(self, ddl: Ddl, retention: Retention) -> list[str]:
        """The table on `ddl`'s topology (and the `Distributed` table over it on a cluster)."""
        storage = ddl.create_table(
            self.name,
            (*self.columns, *self.engine_columns),
            engine=ddl.engine(self.engine, self.name, *((self.version_column,) if self.version_column else ())),
            partition_by=self.partition_by,
            order_by=self.order_by,
            primary_key=self.primary_key,
            ttl=self.ttl_expression(retention),
            extra=self.indexes,
            settings=self.settings,
        )
        return [storage, *ddl.distributed(self.name)]

    def ttl_expression(self, retention: Retention) -> str:
        column, field_name = self.ttl
        return ttl_clause(column, getattr(retention, field_name), "Hour" if field_name.endswith("_hours") else "Day")


@dataclass(frozen=True, slots=True)
class View:
    """A materialized view: every block inserted into its source table goes through `select` into `target`. On a
    cluster it is attached to the source's local table and writes the target's, on the shard the rows land on."""

    name: str
    target: str
    select: Callable[[Ddl], str]  # over the storage tables (`Ddl.local`)

    def create(self, ddl: Ddl) -> str:
        return (
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS {ddl.table(self.name)}{ddl.on_cluster}"
            f" TO {ddl.local(self.target)} AS\n{self.select(ddl)}"
        )


def _state(function: str, suffix: str) -> str:
    """`quantilesDD(a, l…)` → `quantilesDD<suffix>(a, l…)`: the State/Merge/MergeState combinator forms."""
    return function.replace("(", f"{suffix}(", 1)


def hour_rollup_select(ddl: Ddl) -> str:
    """Minute rows → hour rows, merging the quantile states (lossless for DDSketch): the hourly view's query."""
    return (
        "SELECT m.tenant AS tenant, m.feature AS feature, m.stage AS stage, m.model AS model, m.eval_run AS eval_run,\n"
        "    m.release AS release, m.environment AS environment,\n"
        "    toStartOfHour(m.minute) AS hour,\n"
        "    sum(m.spans) AS spans, sum(m.errors) AS errors,\n"
        f"    {_state(DURATION_STATE, 'MergeState')}(m.duration_q) AS duration_q,\n"
        f"    {_state(TTFT_STATE, 'MergeState')}(m.ttft_q) AS ttft_q,\n"
        "    sum(m.input_tokens) AS input_tokens, sum(m.output_tokens) AS output_tokens,\n"
        "    sum(m.cached_input_tokens) AS cached_input_tokens,\n"
        "    sum(m.cost_usd) AS cost_usd, sum(m.cost_known) AS cost_known\n"
        f"FROM {ddl.local(ROLLUP_TABLE)} AS m\n"
        "GROUP BY tenant, feature, stage, model, eval_run, release, environment, hour"
    )


def question_hour_rollup_select(ddl: Ddl) -> str:
    """`trace_questions` rows → their group's hour: requests, failed, the duration sketch, a few askings."""
    return (
        "SELECT toStartOfHour(toDateTime(q.start_time)) AS hour, q.tenant AS tenant, q.feature AS feature,\n"
        "    q.eval_run AS eval_run, q.release AS release, q.environment AS environment, q.group_id AS group_id,\n"
        "    count() AS requests, sum(q.failed) AS failed,\n"
        f"    {_state(DURATION_STATE, 'State')}(q.duration_ms) AS duration_q,\n"
        f"    groupUniqArrayState({QUESTION_EXAMPLES})(q.question) AS examples\n"
        f"FROM {ddl.local(TRACE_QUESTIONS_TABLE)} AS q\n"
        "GROUP BY hour, tenant, feature, eval_run, release, environment, group_id"
    )


def _feedback_select(ddl: Ddl) -> str:
    names = ", ".join(quote_identifier(name) for name, _ in FEEDBACK_COLUMNS)
    return f"SELECT {names} FROM {ddl.local(FEEDBACK_WRITES_TABLE)}"


def document_hour_rollup_select(ddl: Ddl) -> str:
    """Document minutes → hours: the document hourly view's query."""
    return (
        "SELECT m.tenant AS tenant, m.feature AS feature, m.stage AS stage, m.eval_run AS eval_run,\n"
        "    m.release AS release, m.doc AS doc, toStartOfHour(m.minute) AS hour,\n"
        "    sum(m.retrieved) AS retrieved, sum(m.traces) AS traces, sum(m.rank_sum) AS rank_sum,\n"
        "    sum(m.first) AS first, sumMap(m.ranks) AS ranks, uniqExactMergeState(m.chunks) AS chunks\n"
        f"FROM {ddl.local(DOCUMENT_ROLLUP_TABLE)} AS m\n"
        "GROUP BY tenant, feature, stage, eval_run, release, doc, hour"
    )


def _label_select(ddl: Ddl) -> str:
    names = ", ".join(quote_identifier(name) for name, _ in LABEL_COLUMNS)
    return f"SELECT {names} FROM {ddl.local(LABEL_WRITES_TABLE)}"


# The schema, version SCHEMA_VERSION: every table and view of a store.
TABLES: tuple[Table, ...] = (
    Table(
        "spans",
        SPAN_COLUMNS,  # ragmon.model: the span model the normalising views produce
        engine="ReplacingMergeTree",
        # Everything a duplicate of a span repeats; (trace_id, span_id) last makes the key unique per span.
        order_by="tenant, feature, stage, start_time, trace_id, span_id",
        partition_by="toYYYYMMDD(start_time)",
        ttl=("start_time", "spans_days"),
        sharded_by=TRACE_SHARDING_KEY,
        indexes=(
            "INDEX idx_trace_id trace_id TYPE bloom_filter(0.01) GRANULARITY 4",
            # The sampler reads `WHERE ingest_seq BETWEEN a AND b` on recent data: fresh parts hold narrow ranges.
            "INDEX idx_ingest_seq ingest_seq TYPE minmax GRANULARITY 1",
            # v10: a conversation's turns are read by session (`conversation_sql.py`), outside the sort key
            "INDEX idx_session session TYPE bloom_filter(0.01) GRANULARITY 4",
        ),
        settings=_DROP_WHOLE_PARTS,
    ),
    Table(
        CONTENT_TABLE,
        CONTENT_COLUMNS,  # ragmon.model
        engine="ReplacingMergeTree",
        order_by="tenant, trace_id, span_id",
        # Hourly partitions so the short TTL drops whole parts instead of rewriting them.
        partition_by="toStartOfHour(inserted_at)",
        ttl=("inserted_at", "content_hours"),
        sharded_by=TRACE_SHARDING_KEY,
        engine_columns=(
            ("inserted_at", "DateTime DEFAULT now()"),
            # Computed once on insert so the sampler's per-range summary never reads the text itself.
            ("content_bytes", "UInt64 MATERIALIZED arraySum(arrayMap(v -> length(v), mapValues(content)))"),
        ),
        indexes=("INDEX idx_ingest_seq ingest_seq TYPE minmax GRANULARITY 1",),
        settings=_DROP_WHOLE_PARTS,
    ),
    Table(
        "payloads",
        PAYLOAD_COLUMNS,
        engine="ReplacingMergeTree",
        version_column="inserted_at",  # a trace copied again keeps its latest copy
        order_by="tenant, trace_id",
        partition_by="toYYYYMMDD(start_time)",
        ttl=("start_time", "payloads_days"),
        sharded_by=TRACE_SHARDING_KEY,
        engine_columns=(("inserted_at", "DateTime64(3) DEFAULT now64(3)"),),
        settings=_DROP_WHOLE_PARTS,
    ),
    Table(
        "scores",
        SCORE_COLUMNS,
        # A re-judged (trace, metric, judge version, run) keeps its latest score.
        engine="ReplacingMergeTree",
        version_column="scored_at",
        order_by="tenant, metric, trace_id, judge_version, run_name",
        partition_by="toYYYYMM(scored_at)",
        ttl=("scored_at", "scores_days"),
        sharded_by=TRACE_SHARDING_KEY,
    ),
    Table(
        "alerts",
        ALERT_COLUMNS,
        engine="ReplacingMergeTree",
        order_by="tenant, fired_at, alert_id, state",
        partition_by="toYYYYMM(fired_at)",
        ttl=("fired_at", "alerts_days"),
        sharded_by="cityHash64(alert_id)",  # deterministic, so a re-sent alert row collapses too
    ),
    Table(
        ROLLUP_TABLE,
        ROLLUP_COLUMNS,
        engine="AggregatingMergeTree",
        order_by=ROLLUP_ORDER,
        # v7 appended eval_run to the order of tables made with ROLLUP_ORDER_V1, and ClickHouse keeps a table's
        # primary key when its order grows: a new table states the same key, so both are one schema.
        primary_key=ROLLUP_ORDER_V1,
        partition_by="toYYYYMM(minute)",
        ttl=("minute", "rollups_days"),
        sharded_by=_ROLLUP_SHARDING_KEY,
    ),
    Table(
        HOUR_ROLLUP_TABLE,
        HOUR_ROLLUP_COLUMNS,
        engine="AggregatingMergeTree",
        order_by=ROLLUP_ORDER.replace("minute", "hour"),
        primary_key=ROLLUP_ORDER_V1.replace("minute", "hour"),  # as the minute rollup's
        partition_by="toYYYYMM(hour)",
        ttl=("hour", "rollups_days"),
        sharded_by=_ROLLUP_SHARDING_KEY,
    ),
    Table(
        SAMPLING_TABLE,
        SAMPLING_COLUMNS,
        engine="AggregatingMergeTree",
        order_by=SAMPLING_ORDER,
        primary_key=SAMPLING_ORDER_V6,  # as the minute rollup's
        partition_by="toYYYYMM(minute)",
        ttl=("minute", "rollups_days"),
        sharded_by="cityHash64(tenant, feature)",
    ),
    Table(
        LABEL_WRITES_TABLE,
        LABEL_COLUMNS,
        engine="MergeTree",  # the audit: never replaced
        order_by=f"{LABEL_ORDER}, labelled_at",
        partition_by="toYYYYMM(labelled_at)",
        ttl=("labelled_at", "labels_days"),
        sharded_by=TRACE_SHARDING_KEY,  # a label beside its trace's scores and its own audit rows
    ),
    Table(
        LABELS_TABLE,
        LABEL_COLUMNS,
        # A re-label by the same reviewer replaces theirs; another reviewer's label of the trace stays beside it.
        engine="ReplacingMergeTree",
        version_column="labelled_at",
        order_by=LABEL_ORDER,
        partition_by=None,  # a label moved across months must still meet the one it replaces
        ttl=("labelled_at", "labels_days"),
        sharded_by=TRACE_SHARDING_KEY,
    ),
    Table(
        TRACE_QUESTIONS_TABLE,
        TRACE_QUESTION_COLUMNS,
        engine="ReplacingMergeTree",  # a range grouped again after a crash collapses onto its first rows
        order_by="tenant, start_time, trace_id",  # time first: every view reads a window across groups
        partition_by="toYYYYMMDD(start_time)",
        ttl=("start_time", "spans_days"),
        sharded_by=TRACE_SHARDING_KEY,
        # v13: the trace id as a number, which the view's judged-quality lookup reads instead of the string
        engine_columns=(("trace_hash", f"UInt64 MATERIALIZED {TRACE_HASH}"),),
        settings=_DROP_WHOLE_PARTS,
    ),
    Table(
        QUESTION_HOUR_ROLLUP_TABLE,
        QUESTION_HOUR_ROLLUP_COLUMNS,
        engine="AggregatingMergeTree",
        order_by=QUESTION_HOUR_ROLLUP_ORDER,  # time first, as the rollups
        partition_by="toYYYYMM(hour)",
        ttl=("hour", "rollups_days"),
        sharded_by="cityHash64(tenant, feature, group_id)",
    ),
    Table(
        QUESTION_GROUPS_TABLE,
        QUESTION_GROUP_COLUMNS,
        engine="ReplacingMergeTree",
        version_column="updated_at",  # a group's latest state (its member count, centroid) replaces the earlier
        order_by="tenant, feature, group_id",
        partition_by=None,
        ttl=("updated_at", "rollups_days"),
        sharded_by="cityHash64(tenant, feature)",
    ),
    Table(
        FEEDBACK_WRITES_TABLE,
        FEEDBACK_COLUMNS,
        engine="MergeTree",  # the audit: never replaced
        order_by=f"{FEEDBACK_ORDER}, received_at",
        partition_by="toYYYYMM(received_at)",
        ttl=("received_at", "feedback_days"),
        sharded_by="cityHash64(trace_id, request_id)",
    ),
    Table(
        FEEDBACK_TABLE,
        FEEDBACK_COLUMNS,
        # A voter's later value replaces theirs (thumbs down, then up: up); other voters' stay beside it.
        engine="ReplacingMergeTree",
        version_column="given_at",
        order_by=FEEDBACK_ORDER,
        partition_by=None,  # a value changed across months must still meet the one it replaces
        ttl=("received_at", "feedback_days"),
        # beside its own audit rows; by request id too, since one named by request has no trace id yet
        sharded_by="cityHash64(trace_id, request_id)",
    ),
    Table(
        DOCUMENT_ROLLUP_TABLE,
        DOCUMENT_ROLLUP_COLUMNS,
        engine="AggregatingMergeTree",
        order_by=DOCUMENT_ROLLUP_ORDER,
        # daily, kept as long as spans: a view's edge minutes; whole hours are read from the hourly table
        partition_by="toYYYYMMDD(minute)",
        ttl=("minute", "spans_days"),
        sharded_by=_ROLLUP_SHARDING_KEY.replace("model", "doc"),
        settings=_DROP_WHOLE_PARTS,
    ),
    Table(
        DOCUMENT_HOUR_ROLLUP_TABLE,
        DOCUMENT_HOUR_ROLLUP_COLUMNS,
        engine="AggregatingMergeTree",
        order_by=DOCUMENT_ROLLUP_ORDER.replace("minute", "hour"),
        partition_by="toYYYYMM(hour)",
        ttl=("hour", "rollups_days"),
        sharded_by=_ROLLUP_SHARDING_KEY.replace("model", "doc"),
    ),
)
VIEWS: tuple[View, ...] = (
    # The minute rollup is written by the agent once the sampler has decided a range (`rollup_sql.py`); the hours
    # follow from the minutes, a few hundred rows per insert.
    View(f"{HOUR_ROLLUP_TABLE}_mv", HOUR_ROLLUP_TABLE, hour_rollup_select),
    # One INSERT into the audit log records a label and makes it the reviewer's latest.
    View(f"{LABELS_TABLE}_mv", LABELS_TABLE, _label_select),
    # One INSERT into the feedback log records it and makes it the voter's latest.
    View(f"{FEEDBACK_TABLE}_mv", FEEDBACK_TABLE, _feedback_select),
    # v12: the document hours follow from the document minutes the agent writes, as the span hours do.
    View(f"{DOCUMENT_HOUR_ROLLUP_TABLE}_mv", DOCUMENT_HOUR_ROLLUP_TABLE, document_hour_rollup_select),
    # v13: every grouped trace counts in its group's hour as the question stage inserts it.
    View(f"{QUESTION_HOUR_ROLLUP_TABLE}_mv", QUESTION_HOUR_ROLLUP_TABLE, question_hour_rollup_select),
)


def create_statements(topology: Topology, retention: Retention) -> list[str]:
    """The DDL of a new store: every table, then every view (after the database and ledger, `bootstrap_statements`)."""
    ddl = Ddl(topology)
    return [*(s for table in TABLES for s in table.create(ddl, retention)), *(view.create(ddl) for view in VIEWS)]


# A cluster's data tables: the name readers and writers use (a `Distributed` table) → its sharding key. Each has a
# `<name>_local` replicated table per shard under it.
SHARDING_KEYS: dict[str, str] = {table.name: table.sharded_by for table in TABLES}

# (table, TTL time column, Retention field) — the single list `retention_statements` walks. A field ending in
# `_hours` counts hours, every other one days.
TTL_COLUMNS: tuple[tuple[str, str, str], ...] = tuple((table.name, *table.ttl) for table in TABLES)

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
    TRACE_QUESTIONS_TABLE,
    QUESTION_GROUPS_TABLE,
    FEEDBACK_WRITES_TABLE,
    FEEDBACK_TABLE,
    f"{FEEDBACK_TABLE}_mv",
    DOCUMENT_ROLLUP_TABLE,
    DOCUMENT_HOUR_ROLLUP_TABLE,
    f"{DOCUMENT_HOUR_ROLLUP_TABLE}_mv",
    QUESTION_HOUR_ROLLUP_TABLE,
    f"{QUESTION_HOUR_ROLLUP_TABLE}_mv",
    # A cluster's per-shard tables sit in the same database: a SELECT naming one is filtered like the rest.
    *(name + LOCAL_SUFFIX for name in SHARDING_KEYS),
)


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


def table_named(name: str) -> Table:
    for table in TABLES:
        if table.name == name:
            return table
    raise KeyError(name)


def ttl_expression(table: str, retention: Retention) -> str:
    return table_named(table).ttl_expression(retention)


def retention_statement(topology: Topology, table: str, retention: Retention) -> str:
    """ALTER … MODIFY TTL for one table (on a cluster: its `_local` tables, where rows and TTLs live); metadata
    only (the caller sets materialize_ttl_after_modify = 0)."""
    ddl = Ddl(topology)
    return f"ALTER TABLE {ddl.local(table)}{ddl.on_cluster} MODIFY TTL {ttl_expression(table, retention)}"
