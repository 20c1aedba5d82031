"""Attribute dialects → ragmon's span fields: one function per dialect, plus the tables that route keys.

Each ``from_*`` function reads one dialect's attribute names from a span's attribute dict and writes what it
finds into `fields` (keys below). They run lowest precedence first, so when two dialects disagree the later one
wins: OpenLLMetry < OpenInference < OTel GenAI (with general OTel names) < ragmon's own names.

`KEY_DIALECT` tells the normaliser which keys a dialect consumes (they do not go to the `attributes` column)
and which functions a span needs at all; `is_content_key` says which keys are captured text (question,
passages, answer, messages, tool arguments) that go to the `content` dict instead of `attributes`.

Field keys written into `fields`: stage, model, provider, input_tokens, output_tokens, cached_input_tokens,
cost_usd, search_units, ids, scores, top1_score, similarity_gap, norm_deviation, ttft_ms, user, session,
feature, error_type.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

from ragmon import attributes as A

# --- dialect bits: which functions a span needs ------------------------------------------------------
OPENLLMETRY: Final = 1
OPENINFERENCE: Final = 2
OTEL: Final = 4
RAGMON: Final = 8
OI_DOCUMENTS: Final = 16  # flattened retrieval.documents.{i}.* / reranker.*_documents.{i}.* keys

# --- stage tables (values are lower-cased before lookup except OpenInference's upper-case kinds) --------
GENAI_OPERATION_STAGE: Final[dict[str, str | None]] = {
    "embeddings": "embed",
    "retrieval": "search",
    "rerank": "rerank",
    "chat": "generate",
    "text_completion": "generate",
    "generate_content": "generate",
    "execute_tool": "tool",
    "invoke_workflow": "request",
    # Agent operations have no RAG stage: a root one becomes `request`, a nested one `other`.
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
# OpenLLMetry marks its LLM spans with llm.request.type rather than a span kind.
TRACELOOP_REQUEST_TYPE_STAGE: Final[dict[str, str]] = {
    "chat": "generate",
    "completion": "generate",
    "embedding": "embed",
    "rerank": "rerank",
}
RAGMON_STAGES: Final = frozenset(A.STAGES)

# --- names not in ragmon.attributes (other dialects' extras) -------------------------------------------
TRACELOOP_REQUEST_TYPE: Final = "llm.request.type"
OI_PROVIDER: Final = "llm.provider"
OI_SYSTEM: Final = "llm.system"
OI_CACHE_READ_TOKENS: Final = "llm.token_count.prompt_details.cache_read"
GENAI_TIME_TO_FIRST_CHUNK_S: Final = "gen_ai.response.time_to_first_chunk"  # seconds, newer GenAI semconv

KEY_DIALECT: Final[dict[str, int]] = {
    A.TRACELOOP_SPAN_KIND: OPENLLMETRY,
    TRACELOOP_REQUEST_TYPE: OPENLLMETRY,
    A.OI_SPAN_KIND: OPENINFERENCE,
    A.OI_LLM_MODEL_NAME: OPENINFERENCE,
    A.OI_EMBEDDING_MODEL_NAME: OPENINFERENCE,
    A.OI_RERANKER_MODEL_NAME: OPENINFERENCE,
    A.OI_TOKEN_COUNT_PROMPT: OPENINFERENCE,
    A.OI_TOKEN_COUNT_COMPLETION: OPENINFERENCE,
    A.OI_TOKEN_COUNT_TOTAL: OPENINFERENCE,
    OI_CACHE_READ_TOKENS: OPENINFERENCE,
    A.OI_COST_TOTAL: OPENINFERENCE,
    OI_PROVIDER: OPENINFERENCE,
    OI_SYSTEM: OPENINFERENCE,
    A.GEN_AI_OPERATION_NAME: OTEL,
    A.GEN_AI_PROVIDER_NAME: OTEL,
    A.LEGACY_SYSTEM: OTEL,
    A.GEN_AI_REQUEST_MODEL: OTEL,
    A.GEN_AI_RESPONSE_MODEL: OTEL,
    A.GEN_AI_USAGE_INPUT_TOKENS: OTEL,
    A.GEN_AI_USAGE_OUTPUT_TOKENS: OTEL,
    A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: OTEL,
    A.LEGACY_USAGE_PROMPT_TOKENS: OTEL,
    A.LEGACY_USAGE_COMPLETION_TOKENS: OTEL,
    A.GEN_AI_RETRIEVAL_DOCUMENTS: OTEL,
    GENAI_TIME_TO_FIRST_CHUNK_S: OTEL,
    A.GEN_AI_CONVERSATION_ID: OTEL,
    A.ERROR_TYPE: OTEL,
    A.USER_ID: OTEL,
    A.SESSION_ID: OTEL,
    A.RAGMON_STAGE: RAGMON,
    A.RAGMON_FEATURE: RAGMON,
    A.RAGMON_USER: RAGMON,
    A.RAGMON_SESSION: RAGMON,
    A.RAGMON_COST_USD: RAGMON,
    A.RAGMON_SEARCH_UNITS: RAGMON,
    A.RAGMON_TOP1_SCORE: RAGMON,
    A.RAGMON_SIMILARITY_GAP: RAGMON,
    A.RAGMON_DOCUMENT_IDS: RAGMON,
    A.RAGMON_DOCUMENT_SCORES: RAGMON,
    A.RAGMON_QUERY_NORM_DEVIATION: RAGMON,
    A.RAGMON_RERANK_OUTPUT_IDS: RAGMON,
    A.RAGMON_RERANK_OUTPUT_SCORES: RAGMON,
    A.RAGMON_TTFT_MS: RAGMON,
}

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
DOCUMENT_PREFIXES: Final = (
    A.OI_RETRIEVAL_DOCUMENTS + ".",
    A.OI_RERANKER_INPUT_DOCUMENTS + ".",
    A.OI_RERANKER_OUTPUT_DOCUMENTS + ".",
)
_DOC_ID: Final = "document.id"
_DOC_SCORE: Final = "document.score"


def is_content_key(key: str) -> bool:
    return key in CONTENT_KEYS or key.startswith(CONTENT_PREFIXES)


# --- value coercion: wrong types are ignored (the raw value is not lost: see normalise) ----------------
def to_int(value: Any) -> int | None:
    kind = type(value)
    if kind is int:
        return int(value)
    if kind is float:
        return int(value) if math.isfinite(value) else None
    if kind is str:
        try:
            return int(float(value))
        except (ValueError, OverflowError):
            return None
    return None


def to_float(value: Any) -> float | None:
    kind = type(value)
    if kind is float:
        return float(value) if math.isfinite(value) else None
    if kind is int:
        return float(value)
    if kind is str:
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _text(value: Any) -> str | None:
    if type(value) is str:
        return str(value) if value else None
    if value is None or type(value) is bool or isinstance(value, list | dict):
        return None
    return str(value)


def _id_list(value: Any) -> list[str] | None:
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, str):  # some SDKs flatten lists to JSON text
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return [str(v) for v in parsed] if isinstance(parsed, list) else None
    return None


def _score_list(value: Any) -> list[float] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, list):
        return None
    scores = [to_float(v) for v in value]
    if any(s is None for s in scores):
        return None
    return scores  # type: ignore[return-value]  # None ruled out above


# --- one function per dialect -------------------------------------------------------------------------
def from_openllmetry(attrs: dict[str, Any], fields: dict[str, Any]) -> None:
    """OpenLLMetry / Traceloop: `traceloop.span.kind`, `llm.request.type` (its GenAI names are in from_otel)."""
    kind = attrs.get(A.TRACELOOP_SPAN_KIND)
    if type(kind) is str and kind.lower() in TRACELOOP_KIND_STAGE:
        fields["stage"] = TRACELOOP_KIND_STAGE[kind.lower()]
    request_type = attrs.get(TRACELOOP_REQUEST_TYPE)
    if type(request_type) is str and request_type.lower() in TRACELOOP_REQUEST_TYPE_STAGE:
        fields["stage"] = TRACELOOP_REQUEST_TYPE_STAGE[request_type.lower()]


def from_openinference(attrs: dict[str, Any], fields: dict[str, Any]) -> None:
    """OpenInference (Arize Phoenix): span kind, model names, token counts, cost, provider."""
    get = attrs.get
    kind = get(A.OI_SPAN_KIND)
    if type(kind) is str:
        upper = kind.upper()
        if upper in OPENINFERENCE_KIND_STAGE:
            fields["stage"] = OPENINFERENCE_KIND_STAGE[upper]
    for key in (A.OI_EMBEDDING_MODEL_NAME, A.OI_RERANKER_MODEL_NAME, A.OI_LLM_MODEL_NAME):
        model = _text(get(key))
        if model:
            fields["model"] = model
    for key in (OI_SYSTEM, OI_PROVIDER):  # llm.provider (the vendor) is closer to gen_ai.provider.name
        provider = _text(get(key))
        if provider:
            fields["provider"] = provider
    _put_int(fields, "input_tokens", get(A.OI_TOKEN_COUNT_PROMPT))
    _put_int(fields, "output_tokens", get(A.OI_TOKEN_COUNT_COMPLETION))
    _put_int(fields, "cached_input_tokens", get(OI_CACHE_READ_TOKENS))
    cost = to_float(get(A.OI_COST_TOTAL))
    if cost is not None:
        fields["cost_usd"] = cost


def from_openinference_documents(documents: dict[str, Any], fields: dict[str, Any]) -> None:
    """Flattened `retrieval.documents.{i}.document.id/.score` (or the reranker's output documents) → ids, scores.

    `documents` holds only the id and score keys (content keys went to the content dict). Documents are put
    in index order; scores are kept only when every document has one, so ids and scores stay aligned.
    """
    for prefix in (A.OI_RETRIEVAL_DOCUMENTS + ".", A.OI_RERANKER_OUTPUT_DOCUMENTS + "."):
        ids: dict[int, str] = {}
        scores: dict[int, float | None] = {}
        for key, value in documents.items():
            if not key.startswith(prefix):
                continue
            index_text, _, field = key[len(prefix) :].partition(".")
            if not index_text.isdigit():
                continue
            index = int(index_text)
            if field == _DOC_ID:
                ids[index] = str(value)
            elif field == _DOC_SCORE:
                scores[index] = to_float(value)
        if not ids and not scores:
            continue
        order = sorted(ids.keys() | scores.keys())
        fields["ids"] = [ids.get(i, "") for i in order]
        ranked = [scores.get(i) for i in order]
        fields["scores"] = ranked if all(s is not None for s in ranked) else []
        if prefix.startswith(A.OI_RERANKER_OUTPUT_DOCUMENTS):
            return  # a reranker span: its output order is what it retrieved


def from_otel(attrs: dict[str, Any], fields: dict[str, Any]) -> None:
    """OTel GenAI (current and legacy names) and general OTel names: error.type, user.id, session.id."""
    get = attrs.get
    operation = get(A.GEN_AI_OPERATION_NAME)
    if type(operation) is str and operation.lower() in GENAI_OPERATION_STAGE:
        fields["stage"] = GENAI_OPERATION_STAGE[operation.lower()]
    for key in (A.GEN_AI_REQUEST_MODEL, A.GEN_AI_RESPONSE_MODEL):  # the model that answered wins
        model = _text(get(key))
        if model:
            fields["model"] = model
    for key in (A.LEGACY_SYSTEM, A.GEN_AI_PROVIDER_NAME):
        provider = _text(get(key))
        if provider:
            fields["provider"] = provider
    _put_int(fields, "input_tokens", get(A.LEGACY_USAGE_PROMPT_TOKENS))
    _put_int(fields, "input_tokens", get(A.GEN_AI_USAGE_INPUT_TOKENS))
    _put_int(fields, "output_tokens", get(A.LEGACY_USAGE_COMPLETION_TOKENS))
    _put_int(fields, "output_tokens", get(A.GEN_AI_USAGE_OUTPUT_TOKENS))
    _put_int(fields, "cached_input_tokens", get(A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS))
    ttft_s = to_float(get(GENAI_TIME_TO_FIRST_CHUNK_S))
    if ttft_s is not None:
        fields["ttft_ms"] = ttft_s * 1000.0
    documents = get(A.GEN_AI_RETRIEVAL_DOCUMENTS)
    if documents is not None:
        _put_documents_json(fields, documents)
    for key, field in ((A.ERROR_TYPE, "error_type"), (A.USER_ID, "user")):
        text = _text(get(key))
        if text:
            fields[field] = text
    for key in (A.GEN_AI_CONVERSATION_ID, A.SESSION_ID):
        session = _text(get(key))
        if session:
            fields["session"] = session


def from_ragmon(attrs: dict[str, Any], fields: dict[str, Any]) -> None:
    """ragmon's own `ragmon.*` names (written by the ragmon SDK); highest precedence."""
    get = attrs.get
    stage = get(A.RAGMON_STAGE)
    if stage in RAGMON_STAGES:
        fields["stage"] = stage
    for key, field in ((A.RAGMON_FEATURE, "feature"), (A.RAGMON_USER, "user"), (A.RAGMON_SESSION, "session")):
        text = _text(get(key))
        if text:
            fields[field] = text
    for key, field in (
        (A.RAGMON_COST_USD, "cost_usd"),
        (A.RAGMON_TOP1_SCORE, "top1_score"),
        (A.RAGMON_SIMILARITY_GAP, "similarity_gap"),
        (A.RAGMON_QUERY_NORM_DEVIATION, "norm_deviation"),
        (A.RAGMON_TTFT_MS, "ttft_ms"),
    ):
        number = to_float(get(key))
        if number is not None:
            fields[field] = number
    _put_int(fields, "search_units", get(A.RAGMON_SEARCH_UNITS))
    for ids_key, scores_key in (
        (A.RAGMON_RERANK_OUTPUT_IDS, A.RAGMON_RERANK_OUTPUT_SCORES),
        (A.RAGMON_DOCUMENT_IDS, A.RAGMON_DOCUMENT_SCORES),
    ):
        ids = _id_list(get(ids_key))
        if ids is not None:
            fields["ids"] = ids
            scores = _score_list(get(scores_key))
            fields["scores"] = scores if scores is not None and len(scores) == len(ids) else []


def _put_int(fields: dict[str, Any], field: str, value: Any) -> None:
    if value is not None:
        number = to_int(value)
        if number is not None:
            fields[field] = number


def _put_documents_json(fields: dict[str, Any], value: Any) -> None:
    """`gen_ai.retrieval.documents`: JSON text (or an already-structured list) of {"id", "score"} objects."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return
    if not isinstance(value, list):
        return
    ids: list[str] = []
    scores: list[float | None] = []
    for item in value:
        if not isinstance(item, dict):
            return
        ids.append("" if item.get("id") is None else str(item["id"]))
        scores.append(to_float(item.get("score")))
    fields["ids"] = ids
    fields["scores"] = scores if all(s is not None for s in scores) else []
