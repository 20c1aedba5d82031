"""Every span attribute name ragmon writes or reads, in one place.

Order of preference (see GUIDE §2): OTel GenAI semantic conventions first, OpenInference where OTel has no
name (rerank, cost), and ragmon's own names under ``ragmon.*`` for everything else. The SDK writes these names;
the agent's normalisers read them, plus the other dialects' names listed at the bottom.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

# --- OTel GenAI (Development status) --------------------------------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_RETRIEVAL_QUERY_TEXT: Final = "gen_ai.retrieval.query.text"
GEN_AI_RETRIEVAL_DOCUMENTS: Final = "gen_ai.retrieval.documents"  # JSON [{"id": ..., "score": ...}]
GEN_AI_DATA_SOURCE_ID: Final = "gen_ai.data_source.id"
GEN_AI_REQUEST_TOP_K: Final = "gen_ai.request.top_k"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_EVALUATION_NAME: Final = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"
# The event (a LogRecord whose EventName field is this) a judge's score is sent as.
GEN_AI_EVALUATION_RESULT_EVENT: Final = "gen_ai.evaluation.result"
ERROR_TYPE: Final = "error.type"
USER_ID: Final = "user.id"
SESSION_ID: Final = "session.id"
# The release and environment (resource attributes, as OTel puts them; read from a span too): where a change is.
SERVICE_VERSION: Final = "service.version"
DEPLOYMENT_ENVIRONMENT_NAME: Final = "deployment.environment.name"
DEPLOYMENT_ENVIRONMENT: Final = "deployment.environment"  # the name before semantic conventions 1.27

# gen_ai.operation.name values per ragmon stage.
OPERATION_BY_STAGE: Final = {
    "embed": "embeddings",
    "search": "retrieval",
    "rerank": "rerank",  # no OTel value yet; OpenInference calls it RERANKER
    "generate": "chat",
    "tool": "execute_tool",
}

# --- OpenInference (where OTel has no name) -------------------------------------------------------------
OI_SPAN_KIND: Final = "openinference.span.kind"
OI_LLM_MODEL_NAME: Final = "llm.model_name"
OI_EMBEDDING_MODEL_NAME: Final = "embedding.model_name"
OI_RERANKER_MODEL_NAME: Final = "reranker.model_name"
OI_RERANKER_QUERY: Final = "reranker.query"
OI_RERANKER_TOP_K: Final = "reranker.top_k"
OI_RERANKER_INPUT_DOCUMENTS: Final = "reranker.input_documents"  # .{i}.document.id / .score / .content
OI_RERANKER_OUTPUT_DOCUMENTS: Final = "reranker.output_documents"
OI_RETRIEVAL_DOCUMENTS: Final = "retrieval.documents"
OI_TOKEN_COUNT_PROMPT: Final = "llm.token_count.prompt"
OI_TOKEN_COUNT_COMPLETION: Final = "llm.token_count.completion"
OI_TOKEN_COUNT_TOTAL: Final = "llm.token_count.total"
OI_COST_TOTAL: Final = "llm.cost.total"
OI_INPUT_VALUE: Final = "input.value"
OI_OUTPUT_VALUE: Final = "output.value"

# --- OpenLLMetry / Traceloop (legacy names still emitted in the wild) -----------------------------------
TRACELOOP_SPAN_KIND: Final = "traceloop.span.kind"
LEGACY_USAGE_PROMPT_TOKENS: Final = "gen_ai.usage.prompt_tokens"
LEGACY_USAGE_COMPLETION_TOKENS: Final = "gen_ai.usage.completion_tokens"
LEGACY_SYSTEM: Final = "gen_ai.system"

# --- ragmon's own ---------------------------------------------------------------------------------------
RAGMON_STAGE: Final = "ragmon.stage"  # embed | search | rerank | generate | tool | request
RAGMON_FEATURE: Final = "ragmon.feature"
RAGMON_USER: Final = "ragmon.user"
RAGMON_SESSION: Final = "ragmon.session"
# The app's own id of a request, on its request span: end-user feedback may name the request by it (ragmon.feedback).
RAGMON_REQUEST_ID: Final = "ragmon.request_id"
RAGMON_QUESTION: Final = "ragmon.question"  # content: only with capture on
RAGMON_ANSWER: Final = "ragmon.answer"  # content: only with capture on
RAGMON_COST_USD: Final = "ragmon.cost_usd"
RAGMON_COST_UNKNOWN_MODEL: Final = "ragmon.cost.unknown_model"  # True when the price table lacks the model
RAGMON_PRICE_TABLE_VERSION: Final = "ragmon.cost.price_table_version"
RAGMON_SEARCH_UNITS: Final = "ragmon.rerank.search_units"
RAGMON_TOP1_SCORE: Final = "ragmon.retrieval.top1_score"
RAGMON_SIMILARITY_GAP: Final = "ragmon.retrieval.similarity_gap"  # rank-1 minus rank-10 (or last) score
RAGMON_DOCUMENT_IDS: Final = "ragmon.retrieval.document_ids"  # list[str], rank order
RAGMON_DOCUMENT_SCORES: Final = "ragmon.retrieval.document_scores"  # list[float], rank order
RAGMON_DOCUMENT_TEXTS: Final = "ragmon.retrieval.document_texts"  # content: only with capture on
RAGMON_QUERY_NORM_DEVIATION: Final = "ragmon.embedding.query_norm_deviation"  # | ||q||_2 - 1 |
RAGMON_INDEX_NORM_DEVIATION: Final = "ragmon.embedding.index_norm_deviation"  # max over sampled vectors
RAGMON_EMBEDDING_COUNT: Final = "ragmon.embedding.count"
RAGMON_RERANK_INPUT_IDS: Final = "ragmon.rerank.input_ids"
RAGMON_RERANK_OUTPUT_IDS: Final = "ragmon.rerank.output_ids"
RAGMON_RERANK_OUTPUT_SCORES: Final = "ragmon.rerank.output_scores"
RAGMON_TTFT_MS: Final = "ragmon.generate.time_to_first_token_ms"
RAGMON_INTER_TOKEN_MS: Final = "ragmon.generate.inter_token_ms_mean"
RAGMON_STREAMED_CHUNKS: Final = "ragmon.generate.chunks"
RAGMON_TOOL_STATUS: Final = "ragmon.tool.status"
RAGMON_SAMPLING_REASON: Final = "ragmon.sampling.reason"
RAGMON_TENANT: Final = "ragmon.tenant"  # stamped by the agent from the API key, never trusted from spans
# On each gen_ai.evaluation.result event: the score's status (ok, parse_error, ...), and which judge gave it.
RAGMON_EVALUATION_STATUS: Final = "ragmon.evaluation.status"
RAGMON_JUDGE_VERSION: Final = "ragmon.judge.version"
RAGMON_JUDGE_MODEL: Final = "ragmon.judge.model"
# Scope attribute on every export request: spans the SDK had to drop so far (never silent).
RAGMON_SDK_DROPPED_SPANS: Final = "ragmon.sdk.dropped_spans"

# Offline evaluation (`ragmon eval run`) stamps every span of a dataset row with the run and the row, so offline
# traces land in the same store as production and stay separable: `attributes['ragmon.eval.run'] = 'nightly-42'`.
RAGMON_EVAL_RUN: Final = "ragmon.eval.run"
RAGMON_EVAL_ROW_ID: Final = "ragmon.eval.row_id"
RAGMON_EVAL_DATASET: Final = "ragmon.eval.dataset"
# Agents: why the loop ended, set by the app on the request span (or any span of the trace). A value in
# `AGENT_BUDGET_STOPS` means the trajectory was cut off by a limit, not finished: offline evaluation counts it
# as a budget stop. `ragmon.agent.max_steps` records the step limit in force (informational).
RAGMON_AGENT_STOP_REASON: Final = "ragmon.agent.stop_reason"  # done | max_steps | budget | timeout | error
RAGMON_AGENT_MAX_STEPS: Final = "ragmon.agent.max_steps"
AGENT_BUDGET_STOPS: Final = frozenset({"max_steps", "budget", "timeout"})

STAGES: Final = ("embed", "search", "rerank", "generate", "tool", "request", "other")

_STAGE_BY_OPERATION: Final = {operation: stage for stage, operation in OPERATION_BY_STAGE.items()}


def stage_of(attributes: Mapping[str, object] | None) -> str:
    """The ragmon stage of a span the SDK wrote: the root says it (`ragmon.stage`); the others carry it as their
    `gen_ai.operation.name`, so the stage costs no extra attribute per span."""
    attributes = attributes or {}
    stage = attributes.get(RAGMON_STAGE)
    if stage is not None:
        return str(stage)
    return _STAGE_BY_OPERATION.get(str(attributes.get(GEN_AI_OPERATION_NAME)), "other")
