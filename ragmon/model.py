"""The shared span model: the columns of one normalised span row, its stages and statuses.

The store normalises OTLP (any dialect) into these rows inside the engine (`ragmon.sinks.normalise_sql`), so no
Python object per span exists on the agent's path. `SPAN_COLUMNS` is the single list of columns: the store's DDL
for `spans` is generated from it; `CONTENT_COLUMNS` the same for the captured text held until sampling.
"""

from __future__ import annotations

# The stages are the SDK's, listed once: re-exported here for the modules that read the span model.
from ragmon.attributes import STAGES as STAGES

# (column, ClickHouse type). Order is the insert order.
SPAN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "LowCardinality(String)"),
    ("trace_id", "String"),  # 32 lowercase hex chars
    ("span_id", "String"),  # 16 lowercase hex chars
    ("parent_span_id", "String"),  # '' for a root
    ("name", "LowCardinality(String)"),
    ("stage", "LowCardinality(String)"),  # embed | search | rerank | generate | tool | request | other
    ("feature", "LowCardinality(String)"),
    ("eval_run", "LowCardinality(String)"),  # the `ragmon eval run` that sent the span; '' = production traffic
    ("user", "String"),
    ("session", "String"),
    ("service", "LowCardinality(String)"),
    # v10: the app's release (`service.version`, the span's own else its resource's) and where it runs
    # (`deployment.environment.name`, else the older `deployment.environment`); '' when not sent
    ("release", "LowCardinality(String)"),
    ("environment", "LowCardinality(String)"),
    ("start_time", "DateTime64(9)"),  # UTC, nanoseconds
    ("duration_ms", "Float64"),
    ("status", "LowCardinality(String)"),  # ok | error | unset
    ("error_type", "LowCardinality(String)"),
    ("model", "LowCardinality(String)"),
    ("provider", "LowCardinality(String)"),
    ("input_tokens", "UInt32"),
    ("output_tokens", "UInt32"),
    ("cached_input_tokens", "UInt32"),
    ("cost_usd", "Nullable(Float64)"),  # NULL: unknown model or no usage
    ("top1_score", "Nullable(Float32)"),
    ("similarity_gap", "Nullable(Float32)"),
    ("norm_deviation", "Nullable(Float32)"),
    ("ttft_ms", "Nullable(Float32)"),
    ("retrieved_ids", "Array(String)"),
    ("retrieved_scores", "Array(Float32)"),
    # v10: per retrieved document, the paragraph or source it belongs to where the app says so ('' where not):
    # a label that survives re-chunking, where chunk ids do not
    ("retrieved_sources", "Array(String)"),
    ("attributes", "Map(String, String)"),  # everything not mapped above, kept verbatim (JSON for non-strings)
    ("ingest_seq", "UInt64"),  # the write-ahead-log position of the request that carried the span; 0 if none
)

# Captured text per span (question, passages, answer, messages, tool calls), held briefly so the sampler can
# copy the content of kept traces into `payloads`; not part of the slim `spans` row.
CONTENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "LowCardinality(String)"),
    ("trace_id", "String"),
    ("span_id", "String"),
    ("parent_span_id", "String"),
    ("stage", "LowCardinality(String)"),
    ("name", "LowCardinality(String)"),
    ("start_time", "DateTime64(9)"),
    ("duration_ms", "Float64"),
    ("status", "LowCardinality(String)"),
    ("content", "Map(String, String)"),
    ("retrieved_ids", "Array(String)"),
    ("retrieved_scores", "Array(Float32)"),
    ("ingest_seq", "UInt64"),
)

STATUSES = ("ok", "error", "unset")
