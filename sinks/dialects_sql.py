"""Attribute dialects → SQL expressions for ragmon's span fields: one function per dialect.

Each ``*_dialect()`` returns a `DialectSql`: the attribute keys the dialect consumes (they do not go to the
`attributes` column), a dict field → ClickHouse expression over the span's attribute map ``a`` (plain lookups,
see `ragmon.sinks.sql_values`) that is NULL when the span says nothing in that dialect, and its document sources.
`ragmon.sinks.normalise_sql` combines them with ``coalesce`` in precedence order, highest first:
ragmon's own names > OTel GenAI (with general OTel names) > OpenInference > OpenLLMetry.

Within a dialect the old normaliser's order is kept: the model that answered (``gen_ai.response.model``) beats
the requested one; ``gen_ai.provider.name`` beats ``gen_ai.system``; ``llm.provider`` beats ``llm.system``; an
LLM model name beats a reranker's, which beats an embedding model's; ``ragmon.retrieval.document_ids`` beats
``ragmon.rerank.output_ids``; a reranker's output documents beat ``retrieval.documents.*``.

Stage expressions use '' for "this dialect names the span and it has no RAG stage" (an agent or CHAIN span):
it stops lower dialects, and the span becomes ``request`` if it is a root, else ``other``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ragmon.sinks.backend import quote_string as quote
from ragmon.sinks.sql_values import number, prefix_regex, raw, text

from ragmon import attributes as A

__all__ = [
    "CONTENT_KEYS",
    "CONTENT_PREFIXES",
    "DIALECTS",
    "DOCUMENT_PREFIXES",
    "FIELDS",
    "DialectSql",
    "Documents",
    "key_class",
    "openinference_dialect",
    "openllmetry_dialect",
    "otel_dialect",
    "ragmon_dialect",
]

# --- stage tables (None: the dialect names the span, but it is no RAG stage) ------------------------------
GENAI_OPERATION_STAGE: Final[dict[str, str | None]] = {
    "embeddings": "embed",
    "retrieval": "search",
    "rerank": "rerank",
    "chat": "generate",
    "text_completion": "generate",
    "generate_content": "generate",
    "execute_tool": "tool",
    "invoke_workflow": "request",
    "invoke_agent": None,
    "create_agent": None,
}
OPENINFERENCE_KIND_STAGE: Final[dict[str, str | None]] = {
    "EMBEDDING": "embed",
    "RETRIEVER": "search",
    "RERANKER": "rerank",
    "LLM": "generate",
    "TOOL": "tool",
    "CHAIN": None,
    "AGENT": None,
}
TRACELOOP_KIND_STAGE: Final[dict[str, str | None]] = {"workflow": "request", "tool": "tool", "task": None}
# OpenLLMetry marks its LLM spans with llm.request.type rather than a span kind; it wins over the kind.
TRACELOOP_REQUEST_TYPE_STAGE: Final[dict[str, str | None]] = {
    "chat": "generate",
    "completion": "generate",
    "embedding": "embed",
    "rerank": "rerank",
}

# OpenLLMetry names its framework retrievers by operation (LangChain: gen_ai.operation.name = vector_db_retrieve) or
# only by class (LlamaIndex: a task span whose entity is `VectorIndexRetriever.task`); neither is a GenAI operation.
TRACELOOP_RETRIEVE_OPERATION: Final = "vector_db_retrieve"
TRACELOOP_RETRIEVER_ENTITY: Final = r"Retriever(\.[a-z_]+)?$"  # a regex: not RetrieverQueryEngine.task

# --- names not in ragmon.attributes (other dialects' extras) ---------------------------------------------
TRACELOOP_REQUEST_TYPE: Final = "llm.request.type"
TRACELOOP_ENTITY_NAME: Final = "traceloop.entity.name"
OI_PROVIDER: Final = "llm.provider"
OI_SYSTEM: Final = "llm.system"
OI_CACHE_READ_TOKENS: Final = "llm.token_count.prompt_details.cache_read"
GENAI_TIME_TO_FIRST_CHUNK_S: Final = "gen_ai.response.time_to_first_chunk"  # seconds, newer GenAI semconv

# --- routing of keys that are not fields ---------------------------------------------------------------
# Captured text: kept only for traces the sampler keeps (payloads), never in the slim `attributes` column.
CONTENT_KEYS: Final = frozenset(
    {
        A.RAGMON_QUESTION,
        A.RAGMON_ANSWER,
        A.RAGMON_DOCUMENT_TEXTS,
        A.GEN_AI_INPUT_MESSAGES,
        A.GEN_AI_OUTPUT_MESSAGES,
        "gen_ai.system_instructions",
        A.GEN_AI_TOOL_CALL_ARGUMENTS,
        A.GEN_AI_TOOL_CALL_RESULT,
        A.GEN_AI_RETRIEVAL_QUERY_TEXT,
        "gen_ai.prompt",
        "gen_ai.completion",
        A.OI_INPUT_VALUE,
        A.OI_OUTPUT_VALUE,
        A.OI_RERANKER_QUERY,
        "traceloop.entity.input",
        "traceloop.entity.output",
        "gen_ai.task.input",  # newer OpenLLMetry: a copy of traceloop.entity.input / output on framework spans
        "gen_ai.task.output",
        "exception.stacktrace",
    }
)
CONTENT_PREFIXES: Final = (
    "gen_ai.prompt.",
    "gen_ai.completion.",
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.prompts.",
    "llm.prompt_template.",
    "embedding.embeddings.",  # OpenInference embedded texts and vectors: large, payload only
)
# OpenInference flattened documents: ids and scores are fields (reranker inputs stay attributes), the rest
# (document text, metadata) is content.
DOCUMENT_PREFIXES: Final = (
    A.OI_RETRIEVAL_DOCUMENTS + ".",
    A.OI_RERANKER_INPUT_DOCUMENTS + ".",
    A.OI_RERANKER_OUTPUT_DOCUMENTS + ".",
)


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


# Classes of attribute keys (`key_class`), and the column of a span's key classes, one per entry of ``a``.
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
    the ids and all finite). `ids` and `scores` are evaluated only for spans where `present` holds."""

    present: str
    ids: str
    scores: str


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


def _stage_lookup(value: str, table: dict[str, str | None]) -> str:
    """`value` mapped through `table` ('' for None entries); NULL when the value is absent or not in it."""
    names = list(table)
    stages = [table[name] or "" for name in names]
    return f"nullIf(transform({value}, [{', '.join(map(quote, names))}], [{', '.join(map(quote, stages))}], '?'), '?')"


def _first(*exprs: str) -> str:
    return exprs[0] if len(exprs) == 1 else f"coalesce({', '.join(exprs)})"


def _listed_documents(ids_key: str, scores_key: str) -> Documents:
    """ids and scores from two list attributes (arrays, or JSON text of arrays: some SDKs flatten lists)."""
    ids_text = f"ifNull({raw(ids_key)}, '')"
    return Documents(
        present=f"JSONType({ids_text}) = 'Array'",
        # string elements unquoted, others (numbers) as their JSON text, null as 'null': one parse of the list
        # (reading each raw element again for its type and its string cost several times as much per document)
        ids=f"arrayMap(x -> ifNull(x, 'null'), JSONExtract({ids_text}, 'Array(Nullable(String))'))",
        scores=f"JSONExtract(ifNull({raw(scores_key)}, ''), 'Array(Nullable(Float64))')",
    )


def _json_documents(key: str) -> Documents:
    """gen_ai.retrieval.documents: JSON [{"id": ..., "score": ...}]; anything else is not documents."""
    docs = f"ifNull({raw(key)}, '')"
    # a string id as is, a number as its text, null or missing as ''
    parsed = f"JSONExtract({docs}, 'Array(Tuple(id Nullable(String), score Nullable(Float64)))')"
    return Documents(
        # an element's raw JSON text starts with '{' exactly when it is an object (cheaper than JSONType per element)
        present=f"if(JSONType({docs}) = 'Array', arrayAll(x -> startsWith(x, '{{'), JSONExtractArrayRaw({docs})), 0)",
        ids=f"arrayMap(d -> ifNull(d.1, ''), {parsed})",
        scores=f"tupleElement({parsed}, 2)",
    )


def _flattened_documents(prefix: str, key_class: int) -> Documents:
    """OpenInference ``{prefix}{i}.document.id / .score`` keys → ids and scores in index order.

    Documents are put in order of their numeric index; a document without an id gets ''; scores are kept only
    when every document has one. `key_class` is the class `key_class()` gives those keys: the span has such
    documents when one of its keys has it.
    """
    pattern = quote("^" + prefix.replace(".", "\\.") + "([0-9]+)\\.document\\.(id|score)$")
    order = (
        "arraySort(arrayDistinct(arrayFilter(i -> i IS NOT NULL, "
        f"arrayMap(k -> toUInt32OrNull(extract(k, {pattern})), mapKeys(a)))))"
    )
    key = f"concat({quote(prefix)}, toString(i), '.document.{{}}')"
    return Documents(
        present=f"has({KEY_CLASSES}, {key_class})",
        ids=f"arrayMap(i -> ifNull(a[{key.format('id')}], ''), {order})",
        scores=f"arrayMap(i -> toFloat64OrNull(a[{key.format('score')}]), {order})",
    )


def ragmon_dialect() -> DialectSql:
    """ragmon's own ``ragmon.*`` names (written by the ragmon SDK); highest precedence."""
    return DialectSql(
        keys=frozenset(
            {
                A.RAGMON_STAGE,
                A.RAGMON_FEATURE,
                A.RAGMON_USER,
                A.RAGMON_SESSION,
                A.RAGMON_COST_USD,
                A.RAGMON_SEARCH_UNITS,
                A.RAGMON_TOP1_SCORE,
                A.RAGMON_SIMILARITY_GAP,
                A.RAGMON_DOCUMENT_IDS,
                A.RAGMON_DOCUMENT_SCORES,
                A.RAGMON_QUERY_NORM_DEVIATION,
                A.RAGMON_RERANK_OUTPUT_IDS,
                A.RAGMON_RERANK_OUTPUT_SCORES,
                A.RAGMON_TTFT_MS,
            }
        ),
        fields={
            "stage": _stage_lookup(raw(A.RAGMON_STAGE), {s: s for s in A.STAGES}),
            "feature": text(A.RAGMON_FEATURE),
            "user": text(A.RAGMON_USER),
            "session": text(A.RAGMON_SESSION),
            "cost_usd": number(A.RAGMON_COST_USD),
            "search_units": number(A.RAGMON_SEARCH_UNITS),
            "top1_score": number(A.RAGMON_TOP1_SCORE),
            "similarity_gap": number(A.RAGMON_SIMILARITY_GAP),
            "norm_deviation": number(A.RAGMON_QUERY_NORM_DEVIATION),
            "ttft_ms": number(A.RAGMON_TTFT_MS),
        },
        documents=(
            _listed_documents(A.RAGMON_DOCUMENT_IDS, A.RAGMON_DOCUMENT_SCORES),
            _listed_documents(A.RAGMON_RERANK_OUTPUT_IDS, A.RAGMON_RERANK_OUTPUT_SCORES),
        ),
    )


def otel_dialect() -> DialectSql:
    """OTel GenAI (current and legacy names) and general OTel names: error.type, user.id, session.id."""
    return DialectSql(
        keys=frozenset(
            {
                A.GEN_AI_OPERATION_NAME,
                A.GEN_AI_PROVIDER_NAME,
                A.LEGACY_SYSTEM,
                A.GEN_AI_REQUEST_MODEL,
                A.GEN_AI_RESPONSE_MODEL,
                A.GEN_AI_USAGE_INPUT_TOKENS,
                A.GEN_AI_USAGE_OUTPUT_TOKENS,
                A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
                A.LEGACY_USAGE_PROMPT_TOKENS,
                A.LEGACY_USAGE_COMPLETION_TOKENS,
                A.GEN_AI_RETRIEVAL_DOCUMENTS,
                GENAI_TIME_TO_FIRST_CHUNK_S,
                A.GEN_AI_CONVERSATION_ID,
                A.ERROR_TYPE,
                A.USER_ID,
                A.SESSION_ID,
            }
        ),
        fields={
            "stage": _stage_lookup(f"lower(ifNull({raw(A.GEN_AI_OPERATION_NAME)}, ''))", GENAI_OPERATION_STAGE),
            # the model that answered wins over the one requested
            "model": _first(text(A.GEN_AI_RESPONSE_MODEL), text(A.GEN_AI_REQUEST_MODEL)),
            "provider": _first(text(A.GEN_AI_PROVIDER_NAME), text(A.LEGACY_SYSTEM)),
            "input_tokens": _first(number(A.GEN_AI_USAGE_INPUT_TOKENS), number(A.LEGACY_USAGE_PROMPT_TOKENS)),
            "output_tokens": _first(number(A.GEN_AI_USAGE_OUTPUT_TOKENS), number(A.LEGACY_USAGE_COMPLETION_TOKENS)),
            "cached_input_tokens": number(A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS),
            "ttft_ms": f"{number(GENAI_TIME_TO_FIRST_CHUNK_S)} * 1000",  # seconds → ms
            "user": text(A.USER_ID),
            "session": _first(text(A.SESSION_ID), text(A.GEN_AI_CONVERSATION_ID)),
            "error_type": text(A.ERROR_TYPE),
        },
        documents=(_json_documents(A.GEN_AI_RETRIEVAL_DOCUMENTS),),
    )


def openinference_dialect() -> DialectSql:
    """OpenInference (Arize Phoenix): span kind, model names, token counts, cost, provider, flattened documents."""
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
            "stage": _stage_lookup(f"upper(ifNull({raw(A.OI_SPAN_KIND)}, ''))", OPENINFERENCE_KIND_STAGE),
            "model": _first(text(A.OI_LLM_MODEL_NAME), text(A.OI_RERANKER_MODEL_NAME), text(A.OI_EMBEDDING_MODEL_NAME)),
            "provider": _first(text(OI_PROVIDER), text(OI_SYSTEM)),  # llm.provider (the vendor) first
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


def openllmetry_dialect() -> DialectSql:
    """OpenLLMetry / Traceloop: `traceloop.span.kind`, `llm.request.type` (its GenAI names are OTel's), and its
    retriever spans (a task is a search when OpenLLMetry says it retrieves, by operation or by class)."""
    request_type = f"lower(ifNull({raw(TRACELOOP_REQUEST_TYPE)}, ''))"
    kind = f"lower(ifNull({raw(A.TRACELOOP_SPAN_KIND)}, ''))"
    retriever = (
        f"if(ifNull({raw(A.GEN_AI_OPERATION_NAME)}, '') = {quote(TRACELOOP_RETRIEVE_OPERATION)} OR ({kind} = 'task' "
        f"AND match(ifNull({raw(TRACELOOP_ENTITY_NAME)}, ''), {quote(TRACELOOP_RETRIEVER_ENTITY)})), 'search', NULL)"
    )
    return DialectSql(
        keys=frozenset({A.TRACELOOP_SPAN_KIND, TRACELOOP_REQUEST_TYPE}),
        fields={
            "stage": _first(
                _stage_lookup(request_type, TRACELOOP_REQUEST_TYPE_STAGE),
                retriever,
                _stage_lookup(kind, TRACELOOP_KIND_STAGE),
            ),
        },
    )


# Highest precedence first.
DIALECTS: Final = (ragmon_dialect, otel_dialect, openinference_dialect, openllmetry_dialect)


# --- routing of keys that are not fields ---------------------------------------------------------------
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
    id_or_score = f"match({k}, '\\\\.document\\\\.(id|score)$')"
    document = (
        f"if({id_or_score}, multiIf("
        f"startsWith({k}, {quote(A.OI_RETRIEVAL_DOCUMENTS + '.')}), {KEY_RETRIEVED_DOCUMENT}, "
        f"startsWith({k}, {quote(A.OI_RERANKER_OUTPUT_DOCUMENTS + '.')}), {KEY_RERANKED_DOCUMENT}, "
        f"{KEY_ATTRIBUTE}), {KEY_CONTENT})"  # a reranker's input ids and scores stay attributes
    )
    prefixed = (
        f"multiIf(startsWith({k}, '\\0'), {KEY_RESERVED}, match({k}, {prefix_regex(CONTENT_PREFIXES)}), "
        f"{KEY_CONTENT}, match({k}, {prefix_regex(DOCUMENT_PREFIXES)}), {document}, {KEY_ATTRIBUTE})"
    )
    # `if` runs its branches lazily: the prefix tests only for keys the lookup does not name
    return f"arrayMap(c -> if(c != {_UNKNOWN}, c, toUInt8({prefixed})), [{lookup}])[1]"
