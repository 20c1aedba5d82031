"""Attribute dialects → SQL for ragmon's span fields: the dialects combined, and every attribute key's class.

What each dialect names and how ragmon reads it is its module's (`ragmon.sinks.dialects`: `ragmon_names`,
`otel_genai`, `openinference`, `openllmetry`). Each gives a `DialectSql` (`span_fields()`): the attribute keys it
consumes (they do not go to the `attributes` column), a dict field → ClickHouse expression over the span's
attribute map ``a`` (plain lookups, see `ragmon.sinks.sql_values`) that is NULL when the span says nothing in that
dialect, and its document sources. `ragmon.sinks.normalise_sql` combines them with ``coalesce`` in the precedence
order of `DIALECTS`, highest first: ragmon's own names > OTel GenAI (with general OTel names) > OpenInference >
OpenLLMetry.

Within a dialect the old normaliser's order is kept: the model that answered (``gen_ai.response.model``) beats
the requested one; ``gen_ai.provider.name`` beats ``gen_ai.system``; ``llm.provider`` beats ``llm.system``; an
LLM model name beats a reranker's, which beats an embedding model's; ``ragmon.retrieval.document_ids`` beats
``ragmon.rerank.output_ids``; a reranker's output documents beat ``retrieval.documents.*``.

Stage expressions use '' for "this dialect names the span and it has no RAG stage" (an agent or CHAIN span):
it stops lower dialects, and the span becomes ``request`` if it is a root, else ``other``.
"""

from __future__ import annotations

from typing import Final

from ragmon.sinks.backend import quote_string as quote
from ragmon.sinks.dialects import openinference, openllmetry, otel_genai, ragmon_names
from ragmon.sinks.dialects.common import (
    FIELDS,
    KEY_ATTRIBUTE,
    KEY_CLASSES,
    KEY_CONSUMED,
    KEY_CONTENT,
    KEY_RERANKED_DOCUMENT,
    KEY_RESERVED,
    KEY_RETRIEVED_DOCUMENT,
    DialectSql,
    Documents,
)
from ragmon.sinks.sql_values import prefix_regex

from ragmon import attributes as A

__all__ = [
    "CONTENT_KEYS",
    "CONTENT_PREFIXES",
    "DIALECTS",
    "DOCUMENT_PREFIXES",
    "FIELDS",
    "KEY_ATTRIBUTE",
    "KEY_CLASSES",
    "KEY_CONSUMED",
    "KEY_CONTENT",
    "KEY_RERANKED_DOCUMENT",
    "KEY_RESERVED",
    "KEY_RETRIEVED_DOCUMENT",
    "DialectSql",
    "Documents",
    "key_class",
]

# Highest precedence first.
DIALECTS: Final = (
    ragmon_names.span_fields,
    otel_genai.span_fields,
    openinference.span_fields,
    openllmetry.span_fields,
)

# --- routing of keys that are not fields ---------------------------------------------------------------
# Captured text: kept only for traces the sampler keeps (payloads), never in the slim `attributes` column.
CONTENT_KEYS: Final = (
    ragmon_names.CONTENT_KEYS | otel_genai.CONTENT_KEYS | openinference.CONTENT_KEYS | openllmetry.CONTENT_KEYS
)
CONTENT_PREFIXES: Final = (*openinference.CONTENT_PREFIXES, *openllmetry.CONTENT_PREFIXES)
DOCUMENT_PREFIXES: Final = openinference.DOCUMENT_PREFIXES

# Every attribute key gets one class, in the old normaliser's order of checks: a key a dialect reads (or
# ragmon.tenant, dropped: the tenant is the envelope's) is consumed; then captured text is content; OpenInference
# document ids and scores are fields, except a reranker's inputs (kept as attributes), and the rest of a document
# (text, metadata) is content; everything else is an attribute. A key starting with a NUL byte is reserved
# (`ragmon.sinks.normalise_sql` files exception and resource entries under such keys) and dropped.
_UNKNOWN: Final = 255


def key_class(k: str) -> str:
    """SQL UInt8: the class (``KEY_*``) of attribute key `k`.

    The named keys are one hash lookup (``transform`` over constant arrays); only the rest, a few per span, go
    through the prefix tests. Classifying once per key replaced three membership scans and four regex matches
    per key (content test, attribute test, the cheap content gate), repeated for every span.
    """
    consumed = frozenset().union(*(make().keys for make in DIALECTS), {A.RAGMON_TENANT})
    named = {key: KEY_CONTENT for key in CONTENT_KEYS} | {key: KEY_CONSUMED for key in consumed}
    keys = sorted(named)
    lookup = (
        f"transform({k}, [{', '.join(map(quote, keys))}], "
        f"[{', '.join(str(named[key]) for key in keys)}]::Array(UInt8), toUInt8({_UNKNOWN}))"
    )
    document = openinference.document_key_class(k)
    prefixed = (
        f"multiIf(startsWith({k}, '\\0'), {KEY_RESERVED}, match({k}, {prefix_regex(CONTENT_PREFIXES)}), "
        f"{KEY_CONTENT}, match({k}, {prefix_regex(DOCUMENT_PREFIXES)}), {document}, {KEY_ATTRIBUTE})"
    )
    # `if` runs its branches lazily: the prefix tests only for keys the lookup does not name
    return f"arrayMap(c -> if(c != {_UNKNOWN}, c, toUInt8({prefixed})), [{lookup}])[1]"
