"""The shared span model: one normalised span row, held column-wise.

Collectors turn OTLP (any dialect) into a `SpanBatch`; the sampler reads it; sinks write it to the `spans`
table. The batch is columnar — one Python list per column — because the agent handles 100k+ spans/s and a
Python object per span would cost more than the ClickHouse insert itself.

`SPAN_COLUMNS` is the single list of columns: the store's DDL for `spans` is generated from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

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
    ("start_time", "DateTime64(9)"),  # UTC; the batch holds integer nanoseconds
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

STAGES = ("embed", "search", "rerank", "generate", "tool", "request", "other")
STATUSES = ("ok", "error", "unset")


@dataclass(slots=True)
class SpanBatch:
    """Columns of normalised spans; every list has the same length."""

    tenant: list[str] = field(default_factory=list)
    trace_id: list[str] = field(default_factory=list)
    span_id: list[str] = field(default_factory=list)
    parent_span_id: list[str] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    stage: list[str] = field(default_factory=list)
    feature: list[str] = field(default_factory=list)
    eval_run: list[str] = field(default_factory=list)
    user: list[str] = field(default_factory=list)
    session: list[str] = field(default_factory=list)
    service: list[str] = field(default_factory=list)
    start_time: list[int] = field(default_factory=list)  # unix nanoseconds
    duration_ms: list[float] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    error_type: list[str] = field(default_factory=list)
    model: list[str] = field(default_factory=list)
    provider: list[str] = field(default_factory=list)
    input_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    cached_input_tokens: list[int] = field(default_factory=list)
    cost_usd: list[float | None] = field(default_factory=list)
    top1_score: list[float | None] = field(default_factory=list)
    similarity_gap: list[float | None] = field(default_factory=list)
    norm_deviation: list[float | None] = field(default_factory=list)
    ttft_ms: list[float | None] = field(default_factory=list)
    retrieved_ids: list[list[str]] = field(default_factory=list)
    retrieved_scores: list[list[float]] = field(default_factory=list)
    attributes: list[dict[str, str]] = field(default_factory=list)
    ingest_seq: list[int] = field(default_factory=list)
    # Not a `spans` column: captured text (question, passages, answer, messages, tool arguments) per span,
    # kept only for traces the sampler keeps (the `payloads` table). Empty dict when nothing was captured.
    content: list[dict[str, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.span_id)

    def columns(self) -> dict[str, list[Any]]:
        return {name: getattr(self, name) for name, _ in SPAN_COLUMNS}

    def extend(self, other: SpanBatch) -> None:
        for name in _ALL_FIELDS:
            getattr(self, name).extend(getattr(other, name))

    def take(self, indices: list[int]) -> SpanBatch:
        """A new batch with the rows at `indices`, in that order."""
        out = SpanBatch()
        for name in _ALL_FIELDS:
            column = getattr(self, name)
            getattr(out, name).extend(column[i] for i in indices)
        return out


_ALL_FIELDS = tuple(f.name for f in fields(SpanBatch))
assert (*(name for name, _ in SPAN_COLUMNS), "content") == _ALL_FIELDS, "SpanBatch and SPAN_COLUMNS differ"
