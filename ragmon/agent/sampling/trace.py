"""What the sampler knows about one trace while it waits: a running summary and the captured text of its spans.

The summary is all the policies look at, so a trace costs a few hundred bytes plus its captured text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class SpanContent:
    """One span's captured text and retrieval results, kept only if the trace is kept."""

    span_id: str
    parent_span_id: str
    stage: str
    name: str
    start_time_ns: int
    duration_ms: float
    status: str
    content: dict[str, str]
    retrieved_ids: list[str]
    retrieved_scores: list[float]

    def size_bytes(self) -> int:
        return 160 + sum(len(k) + len(v) for k, v in self.content.items()) + 24 * len(self.retrieved_ids)


@dataclass(slots=True)
class TraceSummary:
    trace_id: str
    tenant: str
    first_seen_s: float
    feature: str = ""
    user: str = ""
    span_count: int = 0
    error_count: int = 0
    root_seen: bool = False
    root_duration_ms: float | None = None
    complete_at_s: float | None = None  # root seen: decide at this time (grace for late children)
    stage_max_ms: dict[str, float] = field(default_factory=dict)
    # Per stage, the largest duration / rolling p95 of its (feature, stage) at arrival; absent before warm-up.
    p95_ratios: dict[str, float] = field(default_factory=dict)
    min_top1_score: float | None = None
    min_similarity_gap: float | None = None
    max_norm_deviation: float | None = None
    attributes: dict[str, str] = field(default_factory=dict)  # a few root attributes for rules
    spans: list[SpanContent] = field(default_factory=list)
    bytes_held: int = 0

    def add_span(self, span: SpanContent, values: dict[str, Any]) -> None:
        """Fold one span's numbers into the summary. `values` holds the normalised columns of that span."""
        self.span_count += 1
        if span.status == "error":
            self.error_count += 1
        feature, user = values["feature"], values["user"]
        if feature and (not self.feature or not span.parent_span_id):
            self.feature = feature
        if user and (not self.user or not span.parent_span_id):
            self.user = user
        previous = self.stage_max_ms.get(span.stage)
        if previous is None or span.duration_ms > previous:
            self.stage_max_ms[span.stage] = span.duration_ms
        self.min_top1_score = _min(self.min_top1_score, values["top1_score"])
        self.min_similarity_gap = _min(self.min_similarity_gap, values["similarity_gap"])
        deviation = values["norm_deviation"]
        if deviation is not None and (self.max_norm_deviation is None or deviation > self.max_norm_deviation):
            self.max_norm_deviation = deviation
        if not span.parent_span_id:
            self.root_seen = True
            self.root_duration_ms = span.duration_ms
        self.spans.append(span)
        size = span.size_bytes()
        self.bytes_held += size


def _min(current: float | None, value: float | None) -> float | None:
    if value is None:
        return current
    return value if current is None or value < current else current
