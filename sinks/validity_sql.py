"""The span rules of `ragmon.span_rules` as SQL, for the store's ingest views: the WHERE that keeps valid spans.

The store parses each logged request again with ClickHouse's Protobuf input format, so the receiver's counting
(`ragmon.collectors.validate`) does not protect it: its normalising SELECT (`ragmon.sinks.normalise_sql`) drops the
same spans, by the same table. Each check is rendered as UInt8 conditions over the span's Protobuf columns
(`sql_condition`, the counterpart of `ragmon.collectors.validity_python`); rules the receiver alone can apply
(`Where.RECEIVER`) have nothing to render.

The fields are UInt64 (fixed64) and String (bytes) columns, so the comparisons are exact: no cast, no wrap.
"""

from __future__ import annotations

from typing import assert_never

from ragmon.sinks.sql_values import all_of

from ragmon.span_rules import ByteLength, Check, InRange, NotAllZero, NotBefore, NotZero, validity_checks

__all__ = ["sql_condition", "valid_span"]


def sql_condition(check: Check, span: str) -> tuple[str, ...]:
    """`check` as UInt8 conditions over the columns of `span` (the alias of an OTLP ``Span`` tuple)."""
    match check:
        case ByteLength(field, (length,)):
            return (f"length({span}.{field}) = {length}",)
        case ByteLength(field, allowed):
            return (f"length({span}.{field}) IN ({', '.join(map(str, allowed))})",)
        case NotAllZero(field, length):
            return (f"{span}.{field} != unhex('{bytes(length).hex()}')",)
        case NotZero(field):
            return (f"{span}.{field} != 0",)
        case InRange(field, minimum, maximum):
            return (f"{span}.{field} >= {minimum}", f"{span}.{field} < {maximum}")
        case NotBefore(field, other):
            return (f"{span}.{field} >= {span}.{other}",)
        case _:
            assert_never(check)


def valid_span(span: str) -> str:
    """UInt8: the span `span` keeps every rule both sides apply (`ragmon.span_rules.validity_checks`, combined by
    `ragmon.sinks.sql_values.all_of`)."""
    return all_of(*(condition for check in validity_checks() for condition in sql_condition(check, span)))
