"""Per-request work of the receive path: count invalid spans and decide the bytes to keep.

`validate` walks an ``ExportTraceServiceRequest`` once, reading only the fields the span rules read (ids and
timestamps, never attributes), and counts invalid spans by reason for OTLP ``partial_success``. The rules are
`ragmon.span_rules.SPAN_RULES`, compiled into Python by `ragmon.collectors.validity_python`; the store's SQL
(`ragmon.sinks.normalise_sql`) filters spans by the same table, rendered by `ragmon.sinks.validity_sql`.

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

The start-time bounds (2000 to 2100) and why they are where they are: `ragmon.span_rules`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from ragmon.collectors.validity_python import count_invalid, first_broken

# The reasons and bounds are the rule table's; named here too, where the receiver's callers have always found them.
from ragmon.span_rules import (
    END_BEFORE_START,
    INVALID_PARENT_SPAN_ID,
    INVALID_SPAN_ID,
    INVALID_TRACE_ID,
    MALFORMED_SPAN,
    MAX_START_TIME_NS,
    MIN_START_TIME_NS,
    MISSING_START_TIME,
    REJECT_REASONS,
    START_TIME_OUT_OF_RANGE,
)

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


def validate(request: ExportTraceServiceRequest, body: bytes | None = None, *, malformed_spans: int = 0) -> Validation:
    """Count `request`'s spans and invalid ones; `body` is its serialized form when the caller has it (HTTP).

    `malformed_spans` are spans the OTLP/JSON conversion already dropped (counted as received and rejected).
    Drops `request`'s unknown fields (nothing of the store's reads them; see the module docstring).
    """
    request.DiscardUnknownFields()
    total = _span_count(request)
    invalid = count_invalid(request)
    rejected: dict[str, int] = {MALFORMED_SPAN: malformed_spans} if malformed_spans else {}
    if not invalid:
        return Validation(total + malformed_spans, rejected, *_canonical(request, body))
    return _without_invalid(request, total + malformed_spans, rejected)


def _span_count(request: ExportTraceServiceRequest) -> int:
    return sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)


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
                reason = first_broken(spans[index])
                if reason is not None:
                    rejected[reason] = rejected.get(reason, 0) + 1
                    del spans[index]
    return Validation(total, rejected, kept.SerializeToString())
