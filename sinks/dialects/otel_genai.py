"""OpenTelemetry's GenAI semantic conventions (current and older names), and the general OTel names ragmon reads
(`error.type`, `user.id`, `session.id`, an exception's stack trace).

Fields: stage (`gen_ai.operation.name`), the model that answered (else the one requested), provider, tokens, time
to first chunk, user, session (`session.id`, else `gen_ai.conversation.id`), error type; documents:
`gen_ai.retrieval.documents` (JSON `[{id, score}]`). Captured text: the input and output messages (JSON, with
`parts` or the older `{role, content}`), system instructions, tool call arguments and result, the retrieval query.
Within the dialect `gen_ai.provider.name` beats `gen_ai.system`, `gen_ai.response.model` `gen_ai.request.model`.
"""

from __future__ import annotations

from typing import Final

from ragmon.sinks.backend import quote_string as quote
from ragmon.sinks.dialects.common import DialectSql, Documents, first, get, joined, stage_lookup
from ragmon.sinks.sql_values import number, raw, text

from ragmon import attributes as A

# gen_ai.operation.name → stage (None: the dialect names the span, but it is no RAG stage)
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
GENAI_TIME_TO_FIRST_CHUNK_S: Final = "gen_ai.response.time_to_first_chunk"  # seconds, newer GenAI semconv
SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"

CONTENT_KEYS: Final = frozenset(
    {
        A.GEN_AI_INPUT_MESSAGES,
        A.GEN_AI_OUTPUT_MESSAGES,
        SYSTEM_INSTRUCTIONS,
        A.GEN_AI_TOOL_CALL_ARGUMENTS,
        A.GEN_AI_TOOL_CALL_RESULT,
        A.GEN_AI_RETRIEVAL_QUERY_TEXT,
        "gen_ai.prompt",  # the older GenAI events' prompt and completion
        "gen_ai.completion",
        "exception.stacktrace",
    }
)


def _json_documents(key: str) -> Documents:
    """gen_ai.retrieval.documents: JSON [{"id": ..., "score": ...}]; anything else is not documents. ragmon's SDK
    adds `"source"` to a document that names its paragraph or source (`ragmon.Document.source`)."""
    docs = f"ifNull({raw(key)}, '')"
    # a string id or source as is, a number as its text, null or missing as ''
    shape = "Array(Tuple(id Nullable(String), score Nullable(Float64), source Nullable(String)))"
    parsed = f"JSONExtract({docs}, '{shape}')"
    return Documents(
        # an element's raw JSON text starts with '{' exactly when it is an object (cheaper than JSONType per element)
        present=f"if(JSONType({docs}) = 'Array', arrayAll(x -> startsWith(x, '{{'), JSONExtractArrayRaw({docs})), 0)",
        ids=f"arrayMap(d -> ifNull(d.1, ''), {parsed})",
        scores=f"tupleElement({parsed}, 2)",
        sources=f"arrayMap(d -> ifNull(d.3, ''), {parsed})",
    )


def span_fields() -> DialectSql:
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
            "stage": stage_lookup(f"lower(ifNull({raw(A.GEN_AI_OPERATION_NAME)}, ''))", GENAI_OPERATION_STAGE),
            # the model that answered wins over the one requested
            "model": first(text(A.GEN_AI_RESPONSE_MODEL), text(A.GEN_AI_REQUEST_MODEL)),
            "provider": first(text(A.GEN_AI_PROVIDER_NAME), text(A.LEGACY_SYSTEM)),
            "input_tokens": first(number(A.GEN_AI_USAGE_INPUT_TOKENS), number(A.LEGACY_USAGE_PROMPT_TOKENS)),
            "output_tokens": first(number(A.GEN_AI_USAGE_OUTPUT_TOKENS), number(A.LEGACY_USAGE_COMPLETION_TOKENS)),
            "cached_input_tokens": number(A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS),
            "ttft_ms": f"{number(GENAI_TIME_TO_FIRST_CHUNK_S)} * 1000",  # seconds → ms
            "user": text(A.USER_ID),
            "session": first(text(A.SESSION_ID), text(A.GEN_AI_CONVERSATION_ID)),
            "error_type": text(A.ERROR_TYPE),
        },
        documents=(_json_documents(A.GEN_AI_RETRIEVAL_DOCUMENTS),),
    )


# --- content roles, over `c` (a span's captured text) -----------------------------------------------------
PROMPT_KEYS: Final = (A.GEN_AI_INPUT_MESSAGES, SYSTEM_INSTRUCTIONS)
OUTPUT_MESSAGES: Final = A.GEN_AI_OUTPUT_MESSAGES
OUTPUT_KEYS: Final = (OUTPUT_MESSAGES,)
QUERY_KEYS: Final = (A.GEN_AI_RETRIEVAL_QUERY_TEXT,)
TOOL_NAME: Final = A.GEN_AI_TOOL_NAME
TOOL_ARGUMENTS: Final = A.GEN_AI_TOOL_CALL_ARGUMENTS
TOOL_RESULT: Final = A.GEN_AI_TOOL_CALL_RESULT

# A JSON message, GenAI's {role, parts: [{type, content}]} or the older {role, content}, read in one typed parse
# (one call per message array: cheaper to plan and to run than a JSONExtractString per field and element).
_MESSAGE_TYPE: Final = "Array(Tuple(role String, content String, parts Array(Tuple(content String))))"


def _json_messages(c: str, key: str) -> str:
    """Array((role, text)) from a JSON array of messages under `key`; [] when it is not one."""
    body = "if(notEmpty(m.3), arrayStringConcat(arrayFilter(s -> s != '', arrayMap(p -> p.1, m.3)), '\\n'), m.2)"
    return f"arrayMap(m -> (m.1, {body}), JSONExtract({get(c, key)}, {quote(_MESSAGE_TYPE)}))"


def _part_texts(parts: str, field: str) -> str:
    """The non-empty `field` strings of a JSON array of parts, joined by newlines."""
    return (
        f"arrayStringConcat(arrayFilter(s -> s != '', "
        f"arrayMap(p -> JSONExtractString(p, {quote(field)}), JSONExtractArrayRaw({parts}))), '\\n')"
    )


def prompt_messages(c: str) -> str:
    """Array((role, text)): the system instructions, then the input messages."""
    system = f"{_part_texts(get(c, SYSTEM_INSTRUCTIONS), 'content')}"
    return f"arrayConcat(if({system} != '', [('system', {system})], []), {_json_messages(c, A.GEN_AI_INPUT_MESSAGES)})"


def output_texts(c: str) -> tuple[str, ...]:
    """What an LLM call answered: its output messages' texts; the older attribute could also be plain text."""
    output = get(c, A.GEN_AI_OUTPUT_MESSAGES)
    return (joined(_json_messages(c, A.GEN_AI_OUTPUT_MESSAGES)), f"if(isValidJSON({output}), '', {output})")
