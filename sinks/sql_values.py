"""SQL fragments for attribute values: literals, AnyValue → text, and typed lookups in a span's attribute map.

The generated SELECTs give each span the map ``a`` (`ATTRIBUTES`): attribute key → value as text (strings
verbatim; ints, doubles and bools as text; arrays and kvlists as JSON; bytes as base64; NULL for an empty
AnyValue). A missing key reads as NULL too. Dialect expressions read attributes through `raw`, `text` and
`number`, which — like the old Python coercions — yield NULL for a missing key or a value of the wrong type, so
precedence is a ``coalesce``.

Why a map and plain lookups: ClickHouse plans the view's SELECT on every INSERT, so the size and shape of the
SQL text is a per-insert cost. ``a['key']`` is the cheapest lookup to plan (and a hash lookup to run); lambdas,
nested ``multiIf`` and aliases re-used in the SELECT that defines them are the expensive shapes.
"""

from __future__ import annotations

from typing import Final

from ragmon.sinks.backend import quote_string as quote

__all__ = [
    "ATTRIBUTES",
    "all_of",
    "json_string",
    "number",
    "prefix_regex",
    "raw",
    "scalar_json",
    "scalar_text",
    "text",
    "truncated",
    "value_text",
]

UINT32_MAX: Final = 2**32 - 1
ATTRIBUTES: Final = "a"  # the span's Map(String, Nullable(String)) of attribute texts


def json_string(expr: str) -> str:
    # toJSONString escapes '/' as '\/'; JSON does not require it and Python's json.dumps does not do it.
    return f"replaceAll(toJSONString({expr}), '\\\\/', '/')"


def scalar_json(v: str) -> str:
    """JSON text of a `Scalar` tuple expression `v` (an array element or kvlist value); 'null' when empty."""
    # coalesce, not multiIf: at most one field of the oneof is set, and coalesce runs faster over arrays
    return (
        f"coalesce(if({v}.string_value IS NULL, NULL, {json_string(f'assumeNotNull({v}.string_value)')}), "
        f"toString({v}.int_value), "
        f"if({v}.double_value IS NULL, NULL, if(isFinite({v}.double_value), toString({v}.double_value), 'null')), "
        f"toString({v}.bool_value), "
        f"if({v}.bytes_value IS NULL, NULL, {json_string(f'base64Encode(assumeNotNull({v}.bytes_value))')}), "
        "'null')"
    )


def value_text(v: str) -> str:
    """Text of an `AnyValue` tuple expression `v`: Nullable(String), NULL for an empty value.

    An empty array or kvlist cannot be told from an empty AnyValue on the wire without oneof presence; both
    become NULL (the attribute is dropped). At most one field is set (a oneof), so the first non-NULL wins.
    """
    return (
        f"coalesce({v}.string_value, toString({v}.int_value), toString({v}.double_value), "
        f"toString({v}.bool_value), "  # Bool as text: 'true' / 'false'
        f"if(empty({v}.array_value.values), NULL, "
        f"concat('[', arrayStringConcat(arrayMap(x -> {scalar_json('x')}, {v}.array_value.values), ','), ']')), "
        f"if(empty({v}.kvlist_value.values), NULL, "
        f"concat('{{', arrayStringConcat(arrayMap(p -> concat({json_string('p.key')}, ':', {scalar_json('p.value')}), "
        f"{v}.kvlist_value.values), ','), '}}')), "
        f"base64Encode({v}.bytes_value))"
    )


def scalar_text(v: str) -> str:
    """Text of an `AnyValue` `v` that is a string, int, double or bool; NULL otherwise (arrays, kvlists, bytes).

    For values that are scalars by convention (exception event attributes, service.version): cheaper to plan
    and run than `value_text`.
    """
    return f"coalesce({v}.string_value, toString({v}.int_value), toString({v}.double_value), toString({v}.bool_value))"


def raw(key: str) -> str:
    """Nullable(String): the text of attribute `key`, NULL when the span does not have it."""
    return f"{ATTRIBUTES}[{quote(key)}]"


def text(key: str) -> str:
    """Non-empty text of attribute `key`, else NULL."""
    return f"nullIf({raw(key)}, '')"


def number(key: str) -> str:
    """Finite Float64 of attribute `key` (a double, an int or numeric text), else NULL."""
    parsed = f"toFloat64OrNull({raw(key)})"
    return f"if(isFinite({parsed}), {parsed}, NULL)"


def prefix_regex(prefixes: tuple[str, ...]) -> str:
    """An RE2 pattern (as a SQL literal) matching text that starts with any of `prefixes`."""
    escaped = ("".join(c if c.isalnum() or c == "_" else "\\" + c for c in p) for p in prefixes)
    return quote("^(" + "|".join(escaped) + ")")


def all_of(*conditions: str) -> str:
    """UInt8: every one of `conditions` (UInt8 expressions) holds; no short-circuit, so use it for cheap tests.

    Not ``c1 AND c2``: ClickHouse's analyzer pass for AND chains of comparisons with constants
    (optimize_and_compare_chain) costs milliseconds of planning per chain, paid on every INSERT into the view.
    """
    return conditions[0] if len(conditions) == 1 else f"least({', '.join(conditions)})"


def truncated(expr: str, max_chars: int) -> str:
    """`expr` cut to `max_chars` characters (not bytes: a UTF-8 character is never split)."""
    # length() counts bytes, an upper bound of the characters: the UTF-8-aware cut runs only when it may be needed.
    return f"if(length({expr}) > {max_chars}, leftUTF8({expr}, {max_chars}), {expr})"
