"""The span rules of `ragmon.span_rules` as Python, for the receiver: two functions compiled from the rule table.

- `count_invalid(request)`: how many spans of an ``ExportTraceServiceRequest`` break a rule (run on every request;
  usually 0, so nothing else runs);
- `first_broken(span)`: the reason of the first rule a span breaks, or None (run span by span on the rare request
  that has invalid spans, to count them by reason and leave them out).

Why compiled rather than a loop that asks each rule in turn: the receiver runs the rules on every span in Python,
where a function call and an attribute lookup per check cost several times the tests themselves. Each check is
rendered as a Python expression (`python_expression`, the counterpart of `ragmon.sinks.validity_sql`), the
expressions are written into the two functions' source (`SOURCE`, readable as it runs) and compiled once, at import.
Every field a rule reads is read once per span into a local named like the field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, assert_never

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ragmon.span_rules import (
    SPAN_RULES,
    ByteLength,
    Check,
    InRange,
    NotAllZero,
    NotBefore,
    NotZero,
    SpanRule,
    Where,
    validity_checks,
)

__all__ = ["SOURCE", "count_invalid", "first_broken", "python_expression"]

# The names the generated functions use for themselves; a span field may not be one of them.
_OWN_NAMES: Final = frozenset({"request", "resource_spans", "scope_spans", "span", "invalid", "last_trace_id"})
# Spans of a trace usually come one after another: checks of the trace id alone run once per run of equal ids.
_PER_TRACE_FIELD: Final = "trace_id"


def python_expression(check: Check) -> str:
    """`check` as a Python expression over locals named like the span's fields."""
    match check:
        case ByteLength(field, allowed):
            # ``or`` of equalities rather than ``in (...)``, and empty as ``not``: cheaper per span
            lengths = " or ".join(f"len({field}) == {length}" if length else f"not {field}" for length in allowed)
            return lengths if len(allowed) == 1 else f"({lengths})"
        case NotAllZero(field, length):
            return f"{field} != {bytes(length)!r}"
        case NotZero(field):
            return f"{field} != 0"
        case InRange(field, minimum, maximum):
            return f"{minimum} <= {field} < {maximum}"
        case NotBefore(field, other):
            return f"{field} >= {other}"
        case _:
            assert_never(check)


def _fields(check: Check) -> tuple[str, ...]:
    """The span fields `check` reads."""
    if isinstance(check, NotBefore):
        return (check.field, check.other)
    return (check.field,)


def _all_hold(checks: Iterable[Check], indent: str) -> str:
    """``not (...)`` of `checks` (one per line), the condition of an ``if`` at `indent`."""
    tests = [python_expression(check) for check in checks] or ["True"]
    joined = f"\n{indent}    and ".join(tests)
    return f"not (\n{indent}    {joined}\n{indent})"


def _reads(checks: Iterable[Check], indent: str, skip: str = "") -> str:
    """One `field = span.field` line per field the checks read (in order of first use), but `skip`."""
    fields = dict.fromkeys(field for check in checks for field in _fields(check))
    for field in fields:
        if not field.isidentifier() or field in _OWN_NAMES:
            raise ValueError(f"span rule field {field!r} cannot be compiled: not a name, or one the code uses")
    return "".join(f"{indent}{field} = span.{field}\n" for field in fields if field != skip)


def _source(rules: tuple[SpanRule, ...]) -> str:
    """The source of `count_invalid` (keep or drop: `validity_checks`) and `first_broken` (why: every rule)."""
    checked = [rule for rule in rules if rule.where is Where.RECEIVER_AND_STORE]
    checks = [check for rule in checked for check in rule.checks]
    valid = validity_checks(rules)
    per_trace = [check for check in valid if _fields(check) == (_PER_TRACE_FIELD,)]
    per_span = [check for check in valid if check not in per_trace]
    inner = " " * 16
    count = (
        "def count_invalid(request):\n"
        "    invalid = 0\n"
        "    last_trace_id = None\n"
        "    for resource_spans in request.resource_spans:\n"
        "        for scope_spans in resource_spans.scope_spans:\n"
        "            for span in scope_spans.spans:\n"
        f"{inner}{_PER_TRACE_FIELD} = span.{_PER_TRACE_FIELD}\n"
        f"{inner}if {_PER_TRACE_FIELD} != last_trace_id:\n"
        f"{inner}    if {_all_hold(per_trace, inner + '    ')}:\n"
        f"{inner}        invalid += 1\n"
        f"{inner}        continue\n"
        f"{inner}    last_trace_id = {_PER_TRACE_FIELD}\n"
        f"{_reads(per_span, inner, skip=_PER_TRACE_FIELD)}"
        f"{inner}if {_all_hold(per_span, inner)}:\n"
        f"{inner}    invalid += 1\n"
        "    return invalid\n"
    )
    first = "def first_broken(span):\n" + _reads(checks, "    ")
    for rule in checked:
        first += f"    if {_all_hold(rule.checks, '    ')}:\n        return {rule.reason!r}\n"
    return f"{count}\n\n{first}    return None\n"


def _compiled(source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<ragmon.span_rules, compiled by ragmon.collectors.validity_python>", "exec"), namespace)
    return namespace


SOURCE: Final = _source(SPAN_RULES)
_FUNCTIONS: Final = _compiled(SOURCE)
count_invalid: Final[Callable[[ExportTraceServiceRequest], int]] = _FUNCTIONS["count_invalid"]
first_broken: Final[Callable[[Any], str | None]] = _FUNCTIONS["first_broken"]
