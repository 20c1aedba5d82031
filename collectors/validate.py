"""Per-request work of the receive path: count invalid spans and keep the body as received.

`validate` walks an ``ExportTraceServiceRequest`` once, reading only ids and timestamps (never attributes), and
counts invalid spans by reason for OTLP ``partial_success``. When every span is valid the body is passed through
as received — no re-serialisation; otherwise (rare) the request is rebuilt without the invalid spans.
The store's SQL (`ragmon.sinks.normalise_sql`) filters spans by the same rules, so they agree by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

__all__ = [
    "END_BEFORE_START",
    "INVALID_PARENT_SPAN_ID",
    "INVALID_SPAN_ID",
    "INVALID_TRACE_ID",
    "MALFORMED_SPAN",
    "MISSING_START_TIME",
    "REJECT_REASONS",
    "Validation",
    "validate",
]

# Reasons a single span is rejected (counter label values; stable, documented).
INVALID_TRACE_ID: Final = "invalid_trace_id"  # not 16 bytes, or all zero
INVALID_SPAN_ID: Final = "invalid_span_id"  # not 8 bytes, or all zero
INVALID_PARENT_SPAN_ID: Final = "invalid_parent_span_id"  # neither empty nor 8 bytes
MISSING_START_TIME: Final = "missing_start_time"
END_BEFORE_START: Final = "end_before_start"
MALFORMED_SPAN: Final = "malformed_span"  # OTLP/JSON only: a span object with wrongly typed fields
REJECT_REASONS: Final = (
    INVALID_TRACE_ID,
    INVALID_SPAN_ID,
    INVALID_PARENT_SPAN_ID,
    MISSING_START_TIME,
    END_BEFORE_START,
    MALFORMED_SPAN,
)

_ZERO_TRACE: Final = bytes(16)
_ZERO_SPAN: Final = bytes(8)


@dataclass(frozen=True, slots=True)
class Validation:
    """What `validate` found: spans in the request, invalid ones by reason, and the body to keep."""

    spans_total: int
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    body: bytes = b""

    @property
    def spans_rejected(self) -> int:
        return sum(self.rejected_by_reason.values())

    @property
    def spans_accepted(self) -> int:
        return self.spans_total - self.spans_rejected

    def error_message(self) -> str:
        """A human-readable reason for OTLP partial_success; '' when nothing was rejected."""
        if not self.rejected_by_reason:
            return ""
        reasons = ", ".join(f"{reason}={count}" for reason, count in sorted(self.rejected_by_reason.items()))
        return f"rejected {self.spans_rejected} of {self.spans_total} spans ({reasons})"


def _reason(span: object) -> str | None:
    """Why `span` is invalid, or None. Used by the slow path only; `validate` inlines the same checks."""
    trace = span.trace_id  # type: ignore[attr-defined]
    if len(trace) != 16 or trace == _ZERO_TRACE:
        return INVALID_TRACE_ID
    span_id = span.span_id  # type: ignore[attr-defined]
    if len(span_id) != 8 or span_id == _ZERO_SPAN:
        return INVALID_SPAN_ID
    parent = span.parent_span_id  # type: ignore[attr-defined]
    if parent and len(parent) != 8:
        return INVALID_PARENT_SPAN_ID
    start = span.start_time_unix_nano  # type: ignore[attr-defined]
    if not start:
        return MISSING_START_TIME
    if span.end_time_unix_nano < start:  # type: ignore[attr-defined]
        return END_BEFORE_START
    return None


def validate(request: ExportTraceServiceRequest, body: bytes | None = None, *, malformed_spans: int = 0) -> Validation:
    """Count `request`'s spans and invalid ones; `body` is its serialized form when the caller has it (HTTP).

    `malformed_spans` are spans the OTLP/JSON conversion already dropped (counted as received and rejected).
    """
    total = 0
    invalid = 0
    last_trace: bytes | None = None  # spans of a trace are usually adjacent: check each trace id once
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            spans = scope_spans.spans
            total += len(spans)
            for span in spans:
                trace = span.trace_id
                if trace != last_trace:
                    if len(trace) != 16 or trace == _ZERO_TRACE:
                        invalid += 1
                        continue
                    last_trace = trace
                span_id = span.span_id
                if len(span_id) != 8 or span_id == _ZERO_SPAN:
                    invalid += 1
                    continue
                parent = span.parent_span_id
                if parent and len(parent) != 8:
                    invalid += 1
                    continue
                start = span.start_time_unix_nano
                if not start or span.end_time_unix_nano < start:
                    invalid += 1
    rejected: dict[str, int] = {MALFORMED_SPAN: malformed_spans} if malformed_spans else {}
    if not invalid:
        return Validation(total + malformed_spans, rejected, body if body is not None else request.SerializeToString())
    return _without_invalid(request, total + malformed_spans, rejected)


def _without_invalid(request: ExportTraceServiceRequest, total: int, rejected: dict[str, int]) -> Validation:
    """The rare path: count by reason and re-serialize the request without its invalid spans."""
    kept = ExportTraceServiceRequest()
    kept.CopyFrom(request)
    for resource_spans in kept.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            spans = scope_spans.spans
            for index in range(len(spans) - 1, -1, -1):
                reason = _reason(spans[index])
                if reason is not None:
                    rejected[reason] = rejected.get(reason, 0) + 1
                    del spans[index]
    return Validation(total, rejected, kept.SerializeToString())
