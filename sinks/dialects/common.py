"""What the dialect modules share: the shape of what a dialect gives the span's fields (`DialectSql`, `Documents`,
`FIELDS`), the classes of attribute keys, and SQL builders more than one dialect reads its names with.

Two maps of a span are read: ``a``, its attributes (key → text, NULL-able; `ragmon.sinks.normalise_sql`), for the
fields; ``c``, its captured text (`span_content.content`, Map(String, String): a missing key reads ''), for the
content roles (`ragmon.sinks.content_sql`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ragmon.sinks.backend import quote_string as quote

# Fields a dialect may give; `ragmon.sinks.normalise_sql` combines each across dialects by precedence. Counts
# (tokens, search units) are given as finite numbers here and truncated/clamped to UInt32 after combining.
FIELDS: Final = (
    "stage",
    "model",
    "provider",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cost_usd",
    "search_units",
    "ttft_ms",
    "user",
    "session",
    "feature",
    "error_type",
    "top1_score",
    "similarity_gap",
    "norm_deviation",
)

# Classes of attribute keys (`ragmon.sinks.dialects_sql.key_class`), and the column of a span's key classes, one
# per entry of ``a``.
KEY_ATTRIBUTE: Final = 0
KEY_CONSUMED: Final = 1
KEY_CONTENT: Final = 2
KEY_RETRIEVED_DOCUMENT: Final = 3  # retrieval.documents.N.document.id / .score: the retriever's documents
KEY_RERANKED_DOCUMENT: Final = 4  # reranker.output_documents.N.document.id / .score
KEY_RESERVED: Final = 9
KEY_CLASSES: Final = "key_class"


@dataclass(frozen=True, slots=True)
class Documents:
    """One source of retrieved documents: `present` (UInt8, cheap: it gates the rest), `ids` (Array(String)),
    `scores` (Array(Nullable(Float64)), the raw scores: the assembler keeps them only when they are as many as
    the ids and all finite), `sources` (Array(String): each document's paragraph or source id, '' where the
    source names none; the assembler keeps them only when they are as many as the ids, else '' per id — the
    default, `[]`, is a source that never names one). All but `present` are evaluated only for spans where
    `present` holds."""

    present: str
    ids: str
    scores: str
    sources: str = "[]"


@dataclass(frozen=True, slots=True)
class DialectSql:
    """SQL one dialect contributes: consumed keys, field → expression (NULL when silent), document sources."""

    keys: frozenset[str]
    fields: dict[str, str]
    documents: tuple[Documents, ...] = ()  # highest precedence first

    def __post_init__(self) -> None:
        unknown = set(self.fields) - set(FIELDS)
        if unknown:
            raise ValueError(f"unknown dialect fields: {sorted(unknown)}")


# --- over ``a``: the span's fields ----------------------------------------------------------------------


def stage_lookup(value: str, table: dict[str, str | None]) -> str:
    """`value` mapped through `table` ('' for None entries); NULL when the value is absent or not in it."""
    names = list(table)
    stages = [table[name] or "" for name in names]
    return f"nullIf(transform({value}, [{', '.join(map(quote, names))}], [{', '.join(map(quote, stages))}], '?'), '?')"


def first(*exprs: str) -> str:
    return exprs[0] if len(exprs) == 1 else f"coalesce({', '.join(exprs)})"


# --- over ``c``: the span's captured text ---------------------------------------------------------------


def get(c: str, key: str) -> str:
    return f"{c}[{quote(key)}]"


def indices(c: str, prefix: str) -> str:
    """The numeric indices N of keys ``{prefix}N.…`` in the span's content, in numeric order."""
    pattern = quote("^" + prefix.replace(".", "\\.") + "([0-9]+)\\.")
    return (
        "arraySort(arrayDistinct(arrayFilter(i -> i IS NOT NULL, "
        f"arrayMap(k -> toUInt32OrNull(extract(k, {pattern})), mapKeys({c})))))"
    )


def indexed(prefix: str, suffix: str) -> str:
    """SQL of the key ``{prefix}{i}{suffix}`` for the lambda variable i."""
    return f"concat({quote(prefix)}, toString(i), {quote(suffix)})"


def flattened_messages(c: str, prefix: str, role: str, text: str, parts: str | None = None) -> str:
    """Array((role, text)) from flattened ``{prefix}N{role}`` / ``{prefix}N{text}`` keys, in index order; with
    `parts`, a message without `text` joins its ``{prefix}N{parts}M.message_content.text`` parts."""
    body = f"{c}[{indexed(prefix, text)}]"
    if parts is not None:
        part_prefix = indexed(prefix, parts)
        joined = (
            f"arrayStringConcat(arrayMap(k -> {c}[k], arraySort(arrayFilter(k -> startsWith(k, "
            f"{part_prefix}) AND endsWith(k, '.message_content.text'), mapKeys({c})))), '\\n')"
        )
        body = f"if({body} != '', {body}, {joined})"
    return f"arrayMap(i -> ({c}[{indexed(prefix, role)}], {body}), {indices(c, prefix)})"


def joined(messages: str) -> str:
    """The texts of Array((role, text)) `messages`, the empty ones left out, one per line."""
    return f"arrayStringConcat(arrayFilter(s -> s != '', arrayMap(m -> m.2, {messages})), '\\n')"
