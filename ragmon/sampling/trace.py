"""What the sampler knows about one trace while it waits: a running summary, merged from per-batch fragments.

The agent stores every span first; after each insert the store returns one fragment per trace touched by that
batch (aggregates computed in the engine). The sampler never sees individual spans or their text — the captured
text waits in the store (`span_content`) and is copied into `payloads` only for kept traces — so a pending trace
costs a few hundred bytes of Python memory, however large its content.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)  # not frozen: a frozen dataclass is slower to build, one per trace and batch
class TraceFragment:
    """Aggregates of one trace's spans from one stored batch."""

    tenant: str
    trace_id: str
    feature: str = ""
    user: str = ""
    span_count: int = 0
    error_count: int = 0
    root_seen: bool = False
    root_duration_ms: float | None = None
    stage_max_ms: dict[str, float] = field(default_factory=dict)
    min_top1_score: float | None = None
    min_similarity_gap: float | None = None
    max_norm_deviation: float | None = None
    content_bytes: int = 0
    first_ingest_seq: int = 0
    eval_run: str = ""  # the `ragmon eval run` the trace belongs to ('' = production traffic)
    root_span_id: str = ""  # the root span's id when this fragment holds the root

    @classmethod
    def from_columns(cls, columns: Mapping[str, Sequence[Any]], first_ingest_seq: int) -> list[TraceFragment]:
        """From `Store.trace_fragment_columns` (one list per column): no per-row dict on the way."""
        # optional columns: fragments written by hand may lack them
        eval_runs = columns.get("eval_run") or [""] * len(columns["trace_id"])
        root_span_ids = columns.get("root_span_id") or [""] * len(columns["trace_id"])
        return [
            cls(
                tenant,
                trace_id,
                feature or "",
                user or "",
                span_count or 0,
                error_count or 0,
                bool(root_seen),
                root_duration_ms,
                dict(stage_max_ms) if stage_max_ms else {},
                top1,
                gap,
                deviation,
                content_bytes or 0,
                first_ingest_seq,
                eval_run or "",
                root_span_id or "",
            )
            for (
                tenant,
                trace_id,
                feature,
                user,
                span_count,
                error_count,
                root_seen,
                root_duration_ms,
                stage_max_ms,
                top1,
                gap,
                deviation,
                content_bytes,
                eval_run,
                root_span_id,
            ) in zip(*(columns[name] for name in FRAGMENT_COLUMNS), eval_runs, root_span_ids, strict=True)
        ]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TraceFragment:
        """From a `Store.trace_fragments` row; unknown keys are ignored."""
        get = row.get
        return cls(
            tenant=row["tenant"],
            trace_id=row["trace_id"],
            feature=get("feature") or "",
            user=get("user") or "",
            span_count=get("span_count") or 0,
            error_count=get("error_count") or 0,
            root_seen=bool(get("root_seen")),
            root_duration_ms=get("root_duration_ms"),
            stage_max_ms=dict(get("stage_max_ms") or {}),
            min_top1_score=get("min_top1_score"),
            min_similarity_gap=get("min_similarity_gap"),
            max_norm_deviation=get("max_norm_deviation"),
            content_bytes=get("content_bytes") or 0,
            first_ingest_seq=get("first_ingest_seq") or 0,
            eval_run=get("eval_run") or "",
            root_span_id=get("root_span_id") or "",
        )


FRAGMENT_COLUMNS = (
    "tenant",
    "trace_id",
    "feature",
    "user",
    "span_count",
    "error_count",
    "root_seen",
    "root_duration_ms",
    "stage_max_ms",
    "min_top1_score",
    "min_similarity_gap",
    "max_norm_deviation",
    "content_bytes",
)


@dataclass(slots=True)
class TraceSummary:
    trace_id: str
    tenant: str
    first_seen_s: float
    first_ingest_seq: int = 0
    feature: str = ""
    user: str = ""
    span_count: int = 0
    error_count: int = 0
    root_seen: bool = False
    root_duration_ms: float | None = None
    complete_at_s: float | None = None  # root seen: decide at this time (grace for late children)
    stage_max_ms: dict[str, float] = field(default_factory=dict)
    # Set by the sampler as the trace is decided, from figures measured before it arrived (absent while unknown):
    # the recent p95 of the feature's whole requests, and of each (feature, stage) when a stage rule asks for it.
    request_p95_ms: float | None = None
    stage_p95_ms: dict[str, float] = field(default_factory=dict)
    min_top1_score: float | None = None
    min_similarity_gap: float | None = None
    max_norm_deviation: float | None = None
    bytes_held: int = 0  # captured text waiting in the store for this trace's decision
    eval_run: str = ""  # '' = production; else the `ragmon eval run` (its requests do not set the request p95)
    root_span_id: str = ""  # once the root is seen

    @classmethod
    def start(cls, fragment: TraceFragment, now_s: float) -> TraceSummary:
        """A new summary holding its first fragment (the common case: a whole trace in one batch)."""
        return cls(
            fragment.trace_id,
            fragment.tenant,
            now_s,
            fragment.first_ingest_seq,
            fragment.feature,
            fragment.user,
            fragment.span_count,
            fragment.error_count,
            fragment.root_seen,
            fragment.root_duration_ms if fragment.root_seen else None,
            None,
            dict(fragment.stage_max_ms),
            None,
            {},
            fragment.min_top1_score,
            fragment.min_similarity_gap,
            fragment.max_norm_deviation,
            fragment.content_bytes,
            fragment.eval_run,
            fragment.root_span_id if fragment.root_seen else "",
        )

    def merge(self, fragment: TraceFragment) -> None:
        self.span_count += fragment.span_count
        self.error_count += fragment.error_count
        if fragment.feature and (not self.feature or fragment.root_seen):
            self.feature = fragment.feature  # the root's feature wins
        if fragment.user and (not self.user or fragment.root_seen):
            self.user = fragment.user
        if fragment.eval_run:  # any span of the trace from an eval run makes it evaluation traffic
            self.eval_run = fragment.eval_run
        if fragment.root_seen:
            self.root_seen = True
            self.root_duration_ms = fragment.root_duration_ms
            self.root_span_id = fragment.root_span_id
        for stage, duration_ms in fragment.stage_max_ms.items():
            if duration_ms > self.stage_max_ms.get(stage, float("-inf")):
                self.stage_max_ms[stage] = duration_ms
        self.min_top1_score = _min(self.min_top1_score, fragment.min_top1_score)
        self.min_similarity_gap = _min(self.min_similarity_gap, fragment.min_similarity_gap)
        deviation = fragment.max_norm_deviation
        if deviation is not None and (self.max_norm_deviation is None or deviation > self.max_norm_deviation):
            self.max_norm_deviation = deviation
        self.bytes_held += fragment.content_bytes


def _min(current: float | None, value: float | None) -> float | None:
    if value is None:
        return current
    return value if current is None or value < current else current
