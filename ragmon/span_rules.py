"""What makes a received span valid: every rule once, as data, for both places that apply them.

The receiver (`ragmon.collectors.validate`) counts the spans each rule rejects, by the rule's ``reason``, and
answers with OTLP ``partial_success``; the store's ingest SQL (`ragmon.sinks.normalise_sql`) drops the same spans
again, because it parses the request itself. Neither side writes a rule down: the receiver compiles `SPAN_RULES`
into Python (`ragmon.collectors.validity_python`), the store renders them into its WHERE clause
(`ragmon.sinks.validity_sql`), and tests/collectors/test_span_rules.py drives spans on both sides of every check
through both and the store's real engine, so a side that reads a rule differently fails there.

A rule is a reason (a stable counter label) and checks that must all hold, on fields of the OTLP ``Span``
(named as in the protobuf, which is also how upb and the engine's Protobuf schema name them); the first rule a span
breaks, in table order, is the reason it is counted under. A rule whose `Where` is `Where.RECEIVER` has no checks
here: what it guards never reaches the store (its ``where_checked`` names the code that applies it).

Start times. A span starting before `MIN_START_TIME_NS` (2000-01-01) or at or after `MAX_START_TIME_NS`
(2100-01-01) is rejected as ``start_time_out_of_range``. Found by storing spans on both sides of each bound: the
store keeps ``start_time`` as DateTime64(9) from a signed 64-bit count (from 2**63 ns it wraps to 1677 or 1969),
and its TTL reads ``toDateTime(start_time) + retention`` in 32-bit seconds, which wraps to 1970-1990 from 2**32 s
(2106-02-07) minus the retention on: such a span was acknowledged and dropped by the TTL within a second, as was
one stamped 1 ns (a clock never set, expired on arrival). 2100 leaves six years of retention below the wrap.
Spans between 2000 and the retention horizon are retention's to drop, not rejected: the rules read no clock, so
a receiver whose wall clock jumps rejects nothing it should keep.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

__all__ = [
    "BODY_RULES",
    "END_BEFORE_START",
    "INVALID_PARENT_SPAN_ID",
    "INVALID_SPAN_ID",
    "INVALID_TRACE_ID",
    "MALFORMED_SPAN",
    "MAX_START_TIME_NS",
    "MIN_START_TIME_NS",
    "MISSING_START_TIME",
    "REJECT_REASONS",
    "SPAN_ID_BYTES",
    "SPAN_RULES",
    "START_TIME_OUT_OF_RANGE",
    "TRACE_ID_BYTES",
    "BodyRule",
    "ByteLength",
    "Check",
    "InRange",
    "NotAllZero",
    "NotBefore",
    "NotZero",
    "SpanRule",
    "Where",
    "validity_checks",
]

TRACE_ID_BYTES: Final = 16
SPAN_ID_BYTES: Final = 8
MIN_START_TIME_NS: Final = 946_684_800 * 1_000_000_000  # 2000-01-01T00:00:00Z: earlier is a clock never set
MAX_START_TIME_NS: Final = 4_102_444_800 * 1_000_000_000  # 2100-01-01T00:00:00Z, exclusive: TTL arithmetic

# Reasons a span is rejected (counter label values and partial_success text: stable, documented).
INVALID_TRACE_ID: Final = "invalid_trace_id"
INVALID_SPAN_ID: Final = "invalid_span_id"
INVALID_PARENT_SPAN_ID: Final = "invalid_parent_span_id"
MISSING_START_TIME: Final = "missing_start_time"
START_TIME_OUT_OF_RANGE: Final = "start_time_out_of_range"
END_BEFORE_START: Final = "end_before_start"
MALFORMED_SPAN: Final = "malformed_span"


# --- the checks a rule is made of: each says what holds for a valid span, never how to test it ---------------


@dataclass(frozen=True, slots=True)
class ByteLength:
    """Bytes field `field` is exactly one of `allowed` bytes long."""

    field: str
    allowed: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class NotAllZero:
    """Bytes field `field` is not `length` zero bytes (the W3C "invalid" id)."""

    field: str
    length: int


@dataclass(frozen=True, slots=True)
class NotZero:
    """Integer field `field` is set (proto3 sends an unset integer as 0)."""

    field: str


@dataclass(frozen=True, slots=True)
class InRange:
    """Integer field `field` is at least `minimum` and below `maximum`."""

    field: str
    minimum: int
    maximum: int


@dataclass(frozen=True, slots=True)
class NotBefore:
    """Integer field `field` is at least integer field `other`."""

    field: str
    other: str


# Adding a kind here makes mypy point at every place that must say what it means (`assert_never` there).
Check = ByteLength | NotAllZero | NotZero | InRange | NotBefore


class Where(Enum):
    """Which side applies a rule."""

    # The receiver counts the span and leaves it out of what it logs; the store's SQL drops it again, because the
    # store parses the request on its own (and a log written by an earlier version may still hold such spans).
    RECEIVER_AND_STORE = "receiver_and_store"
    # Only the receiver can tell: what breaks the rule is gone before the store sees the request.
    RECEIVER = "receiver"


@dataclass(frozen=True, slots=True)
class SpanRule:
    """A span breaking any of `checks` is rejected, counted under `reason`."""

    reason: str
    checks: tuple[Check, ...]
    where: Where = Where.RECEIVER_AND_STORE
    where_checked: str = ""  # for a `Where.RECEIVER` rule without checks: the code that applies it


SPAN_RULES: Final[tuple[SpanRule, ...]] = (
    SpanRule(INVALID_TRACE_ID, (ByteLength("trace_id", (TRACE_ID_BYTES,)), NotAllZero("trace_id", TRACE_ID_BYTES))),
    SpanRule(INVALID_SPAN_ID, (ByteLength("span_id", (SPAN_ID_BYTES,)), NotAllZero("span_id", SPAN_ID_BYTES))),
    # Empty: a root. All zero is a root too, as some SDKs send it (the store writes it as no parent).
    SpanRule(INVALID_PARENT_SPAN_ID, (ByteLength("parent_span_id", (0, SPAN_ID_BYTES)),)),
    # Before the range rule, so an unset start is counted as missing rather than as out of range.
    SpanRule(MISSING_START_TIME, (NotZero("start_time_unix_nano"),)),
    SpanRule(START_TIME_OUT_OF_RANGE, (InRange("start_time_unix_nano", MIN_START_TIME_NS, MAX_START_TIME_NS),)),
    SpanRule(END_BEFORE_START, (NotBefore("end_time_unix_nano", "start_time_unix_nano"),)),
    # OTLP/JSON only: a span object with wrongly typed fields cannot become a protobuf span, so it is dropped
    # (and counted) while the request is converted; the store never sees it.
    SpanRule(MALFORMED_SPAN, (), Where.RECEIVER, where_checked="ragmon.collectors.otlp_json.request_from_json"),
)

REJECT_REASONS: Final = tuple(rule.reason for rule in SPAN_RULES)


def _implies(check: Check, other: Check) -> bool:
    """Whether `check` holding means `other` holds: a positive minimum means the field is set."""
    if isinstance(check, InRange) and isinstance(other, NotZero):
        return check.field == other.field and check.minimum > 0
    return False


def validity_checks(rules: tuple[SpanRule, ...] = SPAN_RULES) -> tuple[Check, ...]:
    """The checks of every rule both sides apply, but those another of them implies: what keeping or dropping a
    span needs (the receiver's pass over every span, the store's WHERE), where saying why is not asked. The missing
    start has its rule for its own reason; as a test it is the range's lower bound again."""
    checks = [check for rule in rules if rule.where is Where.RECEIVER_AND_STORE for check in rule.checks]
    return tuple(check for check in checks if not any(_implies(other, check) for other in checks))


@dataclass(frozen=True, slots=True)
class BodyRule:
    """A rule on a whole request body, applied by the receiver only."""

    name: str
    outcome: str
    where_checked: str


# The store reads a request's bytes with ClickHouse's own Protobuf parser, not upb: these rules make sure it reads
# only what the receiver read (the probe behind them is in `ragmon.collectors.validate`'s docstring).
BODY_RULES: Final[tuple[BodyRule, ...]] = (
    BodyRule(
        "decodes",
        "a body upb cannot parse is refused whole (HTTP 400, gRPC INVALID_ARGUMENT)",
        "ragmon.collectors.decode.parse_protobuf",
    ),
    BodyRule(
        "canonical_encoding",
        "a body that is not upb's encoding of what it parsed is kept re-encoded, not "
        "refused: the store never sees unknown fields or unusual wire types",
        "ragmon.collectors.validate",
    ),
)
