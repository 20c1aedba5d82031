"""Per-request work of the receive path: count invalid spans and decide the bytes to keep.

`validate` walks an ``ExportTraceServiceRequest`` once, reading only ids and timestamps (never attributes), and
counts invalid spans by reason for OTLP ``partial_success``. The store's SQL (`ragmon.sinks.normalise_sql`)
filters spans by the same rules (`span_rules_sql` there; tests/collectors/test_validity_rules.py inserts spans on
both sides of every bound and checks that the two agree).

The bytes kept are upb's own (canonical) encoding of what it parsed: the body as received when it already is
that (ragmon's encoder and the OpenTelemetry Python exporter emit it), else the re-encoding. Discarding unknown
fields, serialising and comparing cost about as much again as parsing and validating (docs/results.md).
Why: the store parses the body again, with ClickHouse's Protobuf input format, which reads the wire
differently from upb. Probed on chDB 4.4 / ClickHouse 26.9 (every body below parses in upb, is acknowledged,
and was logged as received):

- refused by the engine ("Protobuf messages are corrupted", code 444), which made the store writer search its
  batch request by request (issue 37): an unknown field sent as a group with anything inside (an empty group
  passes), at any level the engine's schema declares (request, ResourceSpans, Span, ...); a field the engine's
  schema declares sent with another wire type (resource_spans, scope_spans, spans, attributes, events, status
  as a varint or fixed32/64; name, key, string_value as a varint; start/end time as a varint or fixed32;
  double_value as a varint); field 15 (the envelope's tenant) sent as a varint; a 10-byte varint whose last
  byte is over 1 (upb drops the bits past 64, the engine refuses); unknown groups nested 50 deep;
- refused with code 436 ("Could not convert value"): Status.code beyond int32 (upb truncates it), a bool
  AnyValue whose varint is neither 0 nor 1;
- read differently, silently: a fixed64 time sent length-delimited (upb ignores it as unknown, the engine reads
  it as the time: a span upb validated was dropped by the SQL's end-before-start rule), a status code sent
  length-delimited, both members of a oneof, unknown fields 15/16 (the envelope's tenant and sequence number:
  the values appended by `seal` come last and win, but the body had no business carrying them).

upb's encoding of a parsed message has none of these (no unknown fields once discarded, one wire type per
field, values in range), so the engine stores exactly what was validated; nothing OTLP defines is lost (every
field the engine reads is an OTLP field upb knows). Bodies upb refuses (invalid UTF-8 in a string, malformed
wire data) stay a 400.

Timestamps: a span starting before `MIN_START_TIME_NS` (2000-01-01) or at or after `MAX_START_TIME_NS`
(2100-01-01) is rejected as `start_time_out_of_range`. Found by storing spans on both sides of each bound: the
store keeps `start_time` as DateTime64(9) from a signed 64-bit count (from 2**63 ns it wraps to 1677 or 1969),
and its TTL reads `toDateTime(start_time) + retention` in 32-bit seconds, which wraps to 1970-1990 from 2**32 s
(2106-02-07) minus the retention on: such a span was acknowledged and dropped by the TTL within a second, as was
one stamped 1 ns (a clock never set, expired on arrival). 2100 leaves six years of retention below the wrap.
Spans between 2000 and the retention horizon are retention's to drop, not rejected: the rule reads no clock, so
a receiver whose wall clock jumps rejects nothing it should keep.
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
    "MAX_START_TIME_NS",
    "MIN_START_TIME_NS",
    "MISSING_START_TIME",
    "REJECT_REASONS",
    "START_TIME_OUT_OF_RANGE",
    "Validation",
    "validate",
]

# Reasons a single span is rejected (counter label values; stable, documented).
INVALID_TRACE_ID: Final = "invalid_trace_id"  # not 16 bytes, or all zero
INVALID_SPAN_ID: Final = "invalid_span_id"  # not 8 bytes, or all zero
INVALID_PARENT_SPAN_ID: Final = "invalid_parent_span_id"  # neither empty nor 8 bytes
MISSING_START_TIME: Final = "missing_start_time"
START_TIME_OUT_OF_RANGE: Final = "start_time_out_of_range"  # before 2000 or from 2100 (see the module docstring)
END_BEFORE_START: Final = "end_before_start"
MALFORMED_SPAN: Final = "malformed_span"  # OTLP/JSON only: a span object with wrongly typed fields
REJECT_REASONS: Final = (
    INVALID_TRACE_ID,
    INVALID_SPAN_ID,
    INVALID_PARENT_SPAN_ID,
    MISSING_START_TIME,
    START_TIME_OUT_OF_RANGE,
    END_BEFORE_START,
    MALFORMED_SPAN,
)

# The start times the store keeps (see the module docstring); `ragmon.sinks.normalise_sql` filters by the same.
MIN_START_TIME_NS: Final = 946_684_800 * 1_000_000_000  # 2000-01-01T00:00:00Z: earlier is a clock never set
MAX_START_TIME_NS: Final = 4_102_444_800 * 1_000_000_000  # 2100-01-01T00:00:00Z, exclusive: TTL arithmetic

_ZERO_TRACE: Final = bytes(16)
_ZERO_SPAN: Final = bytes(8)


@dataclass(frozen=True, slots=True)
class Validation:
    """What `validate` found: spans in the request, invalid ones by reason, and the body to keep."""

    spans_total: int
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    body: bytes = b""
    # Every span was valid but the body kept is upb's re-encoding, not the bytes received: they were not canonical
    # (unknown fields, wire types or encodings the store's parser may read differently; see the module docstring).
    reencoded: bool = False

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
    if not MIN_START_TIME_NS <= start < MAX_START_TIME_NS:
        return START_TIME_OUT_OF_RANGE
    if span.end_time_unix_nano < start:  # type: ignore[attr-defined]
        return END_BEFORE_START
    return None


def validate(request: ExportTraceServiceRequest, body: bytes | None = None, *, malformed_spans: int = 0) -> Validation:
    """Count `request`'s spans and invalid ones; `body` is its serialized form when the caller has it (HTTP).

    `malformed_spans` are spans the OTLP/JSON conversion already dropped (counted as received and rejected).
    Drops `request`'s unknown fields (nothing of the store's reads them; see the module docstring).
    """
    request.DiscardUnknownFields()
    min_start, max_start = MIN_START_TIME_NS, MAX_START_TIME_NS  # locals: read per span
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
                if not min_start <= start < max_start or span.end_time_unix_nano < start:  # 0 is below the min
                    invalid += 1
    rejected: dict[str, int] = {MALFORMED_SPAN: malformed_spans} if malformed_spans else {}
    if not invalid:
        return Validation(total + malformed_spans, rejected, *_canonical(request, body))
    return _without_invalid(request, total + malformed_spans, rejected)


def _canonical(request: ExportTraceServiceRequest, body: bytes | None) -> tuple[bytes, bool]:
    """(the bytes to keep, whether they differ from `body`): `body` itself when it is upb's encoding of
    `request` (unknown fields discarded), else that encoding."""
    encoded: bytes = request.SerializeToString()
    if body is not None and encoded == body:
        return body, False  # the received object: no second copy of a large body lives on
    return encoded, body is not None


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
