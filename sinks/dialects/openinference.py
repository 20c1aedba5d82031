"""OpenInference (Arize Phoenix's instrumentations): `openinference.span.kind`, flattened lists.

Fields: stage (the span kind), model (an LLM's, else a reranker's, else an embedding model's), provider
(`llm.provider`, the vendor, else `llm.system`), token counts, cost; documents: flattened
`reranker.output_documents.N.document.id / .score` (a reranker: its output order is what it retrieved), else
`retrieval.documents.N…` — a reranker's input documents stay attributes, and a document's text and metadata are
captured text. Captured text: `input.value` / `output.value` (text or JSON), the reranker's query, the flattened
`llm.input_messages.N.message.{role, content}` (or its `contents.M` parts) and output messages, prompt templates,
embedded texts.
"""

from __future__ import annotations

from typing import Final

from ragmon.sinks.backend import quote_string as quote
from ragmon.sinks.dialects.common import (
    KEY_ATTRIBUTE,
    KEY_CLASSES,
    KEY_CONTENT,
    KEY_RERANKED_DOCUMENT,
    KEY_RETRIEVED_DOCUMENT,
    DialectSql,
    Documents,
    first,
    flattened_messages,
    indexed,
    indices,
    joined,
    stage_lookup,
)
from ragmon.sinks.sql_values import number, raw, text

from ragmon import attributes as A

# openinference.span.kind → stage (None: the dialect names the span, but it is no RAG stage)
OPENINFERENCE_KIND_STAGE: Final[dict[str, str | None]] = {
    "EMBEDDING": "embed",
    "RETRIEVER": "search",
    "RERANKER": "rerank",
    "LLM": "generate",
    "TOOL": "tool",
    "CHAIN": None,
    "AGENT": None,
}
OI_PROVIDER: Final = "llm.provider"
OI_SYSTEM: Final = "llm.system"
OI_CACHE_READ_TOKENS: Final = "llm.token_count.prompt_details.cache_read"

CONTENT_KEYS: Final = frozenset({A.OI_INPUT_VALUE, A.OI_OUTPUT_VALUE, A.OI_RERANKER_QUERY})
CONTENT_PREFIXES: Final = (
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.prompt_template.",
    "embedding.embeddings.",  # embedded texts and vectors: large, payload only
)
# Flattened documents: ids and scores are fields (reranker inputs stay attributes), the rest (document text,
# metadata) is content.
DOCUMENT_PREFIXES: Final = (
    A.OI_RETRIEVAL_DOCUMENTS + ".",
    A.OI_RERANKER_INPUT_DOCUMENTS + ".",
    A.OI_RERANKER_OUTPUT_DOCUMENTS + ".",
)


def document_key_class(k: str) -> str:
    """SQL UInt8: the class of attribute key `k`, one of `DOCUMENT_PREFIXES`' keys: a retriever's or a reranker's
    output id or score (a field), a reranker's input id or score (an attribute), else content (text, metadata)."""
    id_or_score = f"match({k}, '\\\\.document\\\\.(id|score)$')"
    return (
        f"if({id_or_score}, multiIf("
        f"startsWith({k}, {quote(A.OI_RETRIEVAL_DOCUMENTS + '.')}), {KEY_RETRIEVED_DOCUMENT}, "
        f"startsWith({k}, {quote(A.OI_RERANKER_OUTPUT_DOCUMENTS + '.')}), {KEY_RERANKED_DOCUMENT}, "
        f"{KEY_ATTRIBUTE}), {KEY_CONTENT})"  # a reranker's input ids and scores stay attributes
    )


# The keys of a document's `…document.metadata` (JSON text) that name the paragraph or source it belongs to,
# the first one present wins: an app's own `paragraph_id`; `source`, what LangChain's loaders set (a file path
# or URL) and what ragmon's README asks LangChain apps to set; the ids vector stores and LlamaIndex's nodes
# carry (`doc_id`, `ref_doc_id`, `document_id`); LlamaIndex's readers' `file_path` and `file_name`
# (SimpleDirectoryReader); a web loader's `url`. OpenInference's LangChain and LlamaIndex instrumentations
# write the framework document's metadata there as `json.dumps` of the mapping.
SOURCE_METADATA_KEYS: Final = (
    "paragraph_id",
    "source",
    "doc_id",
    "ref_doc_id",
    "document_id",
    "file_path",
    "file_name",
    "url",
)


def _metadata_source(metadata: str) -> str:
    """SQL String: the first non-empty `SOURCE_METADATA_KEYS` value of JSON text `metadata` (a string as is, a
    number as its text), '' when none: one parse of the metadata into a named tuple."""
    shape = ", ".join(f"{key} Nullable(String)" for key in SOURCE_METADATA_KEYS)
    picks = ", ".join(f"nullIf(t.{i}, '')" for i in range(1, len(SOURCE_METADATA_KEYS) + 1))
    return f"arrayMap(t -> coalesce({picks}, ''), [JSONExtract({metadata}, {quote(f'Tuple({shape})')})])[1]"


def _flattened_documents(prefix: str, key_class: int) -> Documents:
    """``{prefix}{i}.document.id / .score`` keys → ids and scores in index order, and each document's paragraph
    or source from its ``.document.metadata`` (`SOURCE_METADATA_KEYS`).

    Documents are put in order of their numeric index; a document without an id gets ''; scores are kept only
    when every document has one. `key_class` is the class `document_key_class` gives those keys: the span has such
    documents when one of its keys has it.
    """
    pattern = quote("^" + prefix.replace(".", "\\.") + "([0-9]+)\\.document\\.(id|score)$")
    order = (
        "arraySort(arrayDistinct(arrayFilter(i -> i IS NOT NULL, "
        f"arrayMap(k -> toUInt32OrNull(extract(k, {pattern})), mapKeys(a)))))"
    )
    key = f"concat({quote(prefix)}, toString(i), '.document.{{}}')"
    metadata = f"ifNull(a[{key.format('metadata')}], '')"  # content-class keys are in ``a`` too
    return Documents(
        present=f"has({KEY_CLASSES}, {key_class})",
        ids=f"arrayMap(i -> ifNull(a[{key.format('id')}], ''), {order})",
        scores=f"arrayMap(i -> toFloat64OrNull(a[{key.format('score')}]), {order})",
        sources=f"arrayMap(i -> {_metadata_source(metadata)}, {order})",
    )


def span_fields() -> DialectSql:
    """Span kind, model names, token counts, cost, provider, flattened documents."""
    return DialectSql(
        keys=frozenset(
            {
                A.OI_SPAN_KIND,
                A.OI_LLM_MODEL_NAME,
                A.OI_EMBEDDING_MODEL_NAME,
                A.OI_RERANKER_MODEL_NAME,
                A.OI_TOKEN_COUNT_PROMPT,
                A.OI_TOKEN_COUNT_COMPLETION,
                A.OI_TOKEN_COUNT_TOTAL,
                OI_CACHE_READ_TOKENS,
                A.OI_COST_TOTAL,
                OI_PROVIDER,
                OI_SYSTEM,
            }
        ),
        fields={
            "stage": stage_lookup(f"upper(ifNull({raw(A.OI_SPAN_KIND)}, ''))", OPENINFERENCE_KIND_STAGE),
            "model": first(text(A.OI_LLM_MODEL_NAME), text(A.OI_RERANKER_MODEL_NAME), text(A.OI_EMBEDDING_MODEL_NAME)),
            "provider": first(text(OI_PROVIDER), text(OI_SYSTEM)),  # llm.provider (the vendor) first
            "input_tokens": number(A.OI_TOKEN_COUNT_PROMPT),
            "output_tokens": number(A.OI_TOKEN_COUNT_COMPLETION),
            "cached_input_tokens": number(OI_CACHE_READ_TOKENS),
            "cost_usd": number(A.OI_COST_TOTAL),
        },
        documents=(
            # a reranker span: its output order is what it retrieved
            _flattened_documents(A.OI_RERANKER_OUTPUT_DOCUMENTS + ".", KEY_RERANKED_DOCUMENT),
            _flattened_documents(A.OI_RETRIEVAL_DOCUMENTS + ".", KEY_RETRIEVED_DOCUMENT),
        ),
    )


# --- content roles, over `c` (a span's captured text) -----------------------------------------------------
PROMPT_PREFIXES: Final = ("llm.input_messages.",)
OUTPUT_PREFIXES: Final = ("llm.output_messages.",)
INPUT_KEYS: Final = (A.OI_INPUT_VALUE,)
OUTPUT_VALUE_KEYS: Final = (A.OI_OUTPUT_VALUE,)
QUERY_KEYS: Final = (A.OI_RERANKER_QUERY,)
# The documents a retriever or reranker returned, with their text.
DOCUMENT_TEXT_PREFIXES: Final = (A.OI_RETRIEVAL_DOCUMENTS + ".", A.OI_RERANKER_OUTPUT_DOCUMENTS + ".")
# A retriever's output also holds the ids its flattened documents lack (LlamaIndex's nodes).
OUTPUT_DOCUMENTS: Final = A.OI_OUTPUT_VALUE
TOOL_ARGUMENTS: Final = A.OI_INPUT_VALUE
TOOL_RESULT: Final = A.OI_OUTPUT_VALUE


def _messages(c: str, prefix: str) -> str:
    return flattened_messages(c, prefix, ".message.role", ".message.content", ".message.contents.")


def prompt_messages(c: str) -> str:
    """Array((role, text)): `llm.input_messages.N`, in index order."""
    return _messages(c, "llm.input_messages.")


def output_texts(c: str) -> tuple[str, ...]:
    """What an LLM call answered: `llm.output_messages.N`'s texts."""
    return (joined(_messages(c, "llm.output_messages.")),)


def _flattened_document_texts(c: str, prefix: str) -> str:
    return f"arrayMap(i -> {c}[{indexed(prefix, '.document.content')}], {indices(c, prefix)})"


def document_texts(c: str, stage: str) -> tuple[str, ...]:
    """Array(String) each: a reranker's output documents' texts, then a retriever's."""
    return (
        f"if({stage} = 'rerank', {_flattened_document_texts(c, A.OI_RERANKER_OUTPUT_DOCUMENTS + '.')}, [])",
        _flattened_document_texts(c, A.OI_RETRIEVAL_DOCUMENTS + "."),
    )
