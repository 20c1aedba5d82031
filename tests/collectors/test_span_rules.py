"""The rule table (`ragmon.span_rules`) means the same to the receiver and to the store.

Spans on both sides of every check of every rule are made from the table itself, so a new rule, or a new bound,
is covered without touching this file. Each goes three ways: the table read literally (`_holds`, the meaning of
each kind of check), the receiver's compiled Python (`ragmon.collectors.validate`) and the store's SQL in the real
engine (the raw request inserted as the receiver would never log it, so the SQL filters on its own). A side that
renders a check differently (a bound off by one, a length, a field) keeps or drops some span the others do not.
"""

from __future__ import annotations

import importlib
import importlib.util
import struct
import time
from collections import Counter
from typing import Any, Final, assert_never

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from ragmon.collectors.decode import parse_protobuf
from ragmon.collectors.validate import validate

from ragmon.span_rules import (
    BODY_RULES,
    SPAN_RULES,
    ByteLength,
    Check,
    InRange,
    NotAllZero,
    NotBefore,
    NotZero,
    SpanRule,
    Where,
)
from tests.collectors.sql_store import SqlStore

NOW_NS: Final = time.time_ns()
UINT64_MAX: Final = (1 << 64) - 1
# The fixed64 values where a signed or narrower reading of a time wraps: on every integer check, whatever its bounds.
FIXED64_EDGES: Final = (0, 1, (1 << 32) * 10**9, (1 << 63) - 1, 1 << 63, UINT64_MAX)
# A valid span. Its end is the latest possible, so a span whose start is moved to an edge breaks no other rule.
BASE: Final[dict[str, Any]] = {
    "trace_id": bytes.fromhex("0af7651916cd43dd8448eb211c80319c"),
    "parent_span_id": b"",
    "start_time_unix_nano": NOW_NS,
    "end_time_unix_nano": UINT64_MAX,
}

Fields = dict[str, Any]
BOTH_SIDES: Final = [rule for rule in SPAN_RULES if rule.where is Where.RECEIVER_AND_STORE]


def _holds(check: Check, span: Fields) -> bool:
    """What `check` says, read literally."""
    match check:
        case ByteLength(field, allowed):
            return len(span[field]) in allowed
        case NotAllZero(field, length):
            return bool(span[field] != bytes(length))
        case NotZero(field):
            return bool(span[field] != 0)
        case InRange(field, minimum, maximum):
            return bool(minimum <= span[field] < maximum)
        case NotBefore(field, other):
            return bool(span[field] >= span[other])
        case _:
            assert_never(check)


def _edges(check: Check) -> list[Fields]:
    """Field values on both sides of `check`'s edges, each to be set on a copy of `BASE`."""
    match check:
        case ByteLength(field, allowed):
            lengths = {n + step for n in allowed for step in (-1, 0, 1) if n + step >= 0}
            return [{field: b"\x01" * n} for n in sorted(lengths)]
        case NotAllZero(field, length):
            return [{field: bytes(length)}, {field: bytes(length - 1) + b"\x01"}]
        case NotZero(field):
            return [{field: value} for value in FIXED64_EDGES]
        case InRange(field, minimum, maximum):
            values = {minimum - 1, minimum, maximum - 1, maximum, *FIXED64_EDGES}
            return [{field: value} for value in sorted(values) if 0 <= value <= UINT64_MAX]
        case NotBefore(field, other):
            values = {BASE[other] - 1, BASE[other], BASE[other] + 1, *FIXED64_EDGES}
            return [{field: value} for value in sorted(values)]
        case _:
            assert_never(check)


def _edge_spans() -> list[tuple[str, Fields]]:
    """(name, fields) of the base span and of every edge of every check both sides apply."""
    spans = [("base", dict(BASE))]
    for rule in BOTH_SIDES:
        for check in rule.checks:
            for edge in _edges(check):
                spans.append((f"{rule.reason} {check} {edge}", BASE | edge))
    for index, (_, fields) in enumerate(spans):
        fields.setdefault("span_id", struct.pack(">Q", index + 1))  # distinct, unless the edge is a span id
    return spans


def _first_broken(span: Fields) -> str | None:
    return next((rule.reason for rule in BOTH_SIDES if not all(_holds(c, span) for c in rule.checks)), None)


def _request(spans: list[tuple[str, Fields]]) -> bytes:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for index, (_, fields) in enumerate(spans):
        span = scope.spans.add()
        span.name = f"edge {index}"  # the description is no name: the store redacts names
        for field, value in fields.items():
            setattr(span, field, value)
    return request.SerializeToString()


def _kept_names(body: bytes) -> set[str]:
    request = ExportTraceServiceRequest.FromString(body)
    return {span.name for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans}


def test_every_rule_means_the_same_to_the_table_the_receiver_and_the_store(store: SqlStore) -> None:
    spans = _edge_spans()
    expected = {f"edge {index}": _first_broken(fields) for index, (_, fields) in enumerate(spans)}
    described = {f"edge {index}": description for index, (description, _) in enumerate(spans)}
    body = _request(spans)

    validation = validate(parse_protobuf(body), body)
    store.insert([("acme", body)])  # the raw request, invalid spans and all: the SQL filters on its own
    by_receiver = _kept_names(validation.body)
    by_store = {row["name"] for row in store.spans()}

    kept = {name for name, reason in expected.items() if reason is None}
    assert sorted(described[name] for name in kept ^ by_receiver) == []
    assert sorted(described[name] for name in kept ^ by_store) == []
    assert validation.rejected_by_reason == Counter(reason for reason in expected.values() if reason is not None)


def test_the_edges_reach_every_rule_from_both_sides() -> None:
    # Else the comparison above could pass by never testing a rule: each rule must reject some edge span on its
    # own account, and some edge of each of its checks must pass it.
    spans = [fields for _, fields in _edge_spans()]
    reasons = {_first_broken(fields) for fields in spans}
    assert {rule.reason for rule in BOTH_SIDES} | {None} == reasons
    for rule in BOTH_SIDES:
        for check in rule.checks:
            assert any(_holds(check, BASE | edge) for edge in _edges(check)), check


def _names_code(dotted: str) -> bool:
    """`dotted` is an importable module, or an attribute of one."""
    module, _, attribute = dotted.rpartition(".")
    try:
        return importlib.util.find_spec(dotted) is not None
    except ModuleNotFoundError:
        return hasattr(importlib.import_module(module), attribute)


def test_a_rule_either_has_checks_or_names_the_code_that_applies_it() -> None:
    def well_formed(rule: SpanRule) -> bool:
        if rule.where is Where.RECEIVER_AND_STORE:
            return bool(rule.checks) and not rule.where_checked
        return not rule.checks and _names_code(rule.where_checked)

    assert [rule.reason for rule in SPAN_RULES if not well_formed(rule)] == []
    assert len({rule.reason for rule in SPAN_RULES}) == len(SPAN_RULES)
    assert [rule.name for rule in BODY_RULES if not _names_code(rule.where_checked)] == []
