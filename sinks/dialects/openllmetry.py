"""OpenLLMetry / Traceloop: `traceloop.span.kind`, `llm.request.type`; its GenAI names are OTel's (`otel_genai`).

Fields: stage — an LLM call by its request type (it wins over the kind), a retriever by operation (LangChain's
`vector_db_retrieve`) or by class (LlamaIndex: a task whose entity is a `…Retriever`), else the span kind.
Captured text: `traceloop.entity.input` / `output` (text, or JSON such as `{"inputs": …, "kwargs": …}`; newer
releases copy them to `gen_ai.task.input` / `output`), the flattened `gen_ai.prompt.N.{role, content}` and
`gen_ai.completion.N…`, and the older `llm.prompts.N…`.
"""

from __future__ import annotations

from typing import Final

from ragmon.sinks.backend import quote_string as quote
from ragmon.sinks.dialects.common import DialectSql, first, flattened_messages, joined, stage_lookup
from ragmon.sinks.sql_values import raw

from ragmon import attributes as A

# (None: the dialect names the span, but it is no RAG stage)
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
TRACELOOP_REQUEST_TYPE: Final = "llm.request.type"
TRACELOOP_ENTITY_NAME: Final = "traceloop.entity.name"
ENTITY_INPUT: Final = "traceloop.entity.input"
ENTITY_OUTPUT: Final = "traceloop.entity.output"

CONTENT_KEYS: Final = frozenset(
    {
        ENTITY_INPUT,
        ENTITY_OUTPUT,
        "gen_ai.task.input",  # newer OpenLLMetry: a copy of traceloop.entity.input / output on framework spans
        "gen_ai.task.output",
    }
)
CONTENT_PREFIXES: Final = ("gen_ai.prompt.", "gen_ai.completion.", "llm.prompts.")


def span_fields() -> DialectSql:
    """The stage: by request type, a retriever by operation or class, else by span kind."""
    request_type = f"lower(ifNull({raw(TRACELOOP_REQUEST_TYPE)}, ''))"
    kind = f"lower(ifNull({raw(A.TRACELOOP_SPAN_KIND)}, ''))"
    retriever = (
        f"if(ifNull({raw(A.GEN_AI_OPERATION_NAME)}, '') = {quote(TRACELOOP_RETRIEVE_OPERATION)} OR ({kind} = 'task' "
        f"AND match(ifNull({raw(TRACELOOP_ENTITY_NAME)}, ''), {quote(TRACELOOP_RETRIEVER_ENTITY)})), 'search', NULL)"
    )
    return DialectSql(
        keys=frozenset({A.TRACELOOP_SPAN_KIND, TRACELOOP_REQUEST_TYPE}),
        fields={
            "stage": first(
                stage_lookup(request_type, TRACELOOP_REQUEST_TYPE_STAGE),
                retriever,
                stage_lookup(kind, TRACELOOP_KIND_STAGE),
            ),
        },
    )


# --- content roles, over `c` (a span's captured text) -----------------------------------------------------
PROMPT_PREFIXES: Final = ("gen_ai.prompt.",)
OUTPUT_PREFIXES: Final = ("gen_ai.completion.",)
INPUT_KEYS: Final = (ENTITY_INPUT,)
OUTPUT_VALUE_KEYS: Final = (ENTITY_OUTPUT,)
# A retriever's output: its documents (LangChain `Document`s, LlamaIndex nodes: `ragmon.sinks.content_sql`).
OUTPUT_DOCUMENTS: Final = ENTITY_OUTPUT
DOCUMENT_KEYS: Final = (ENTITY_OUTPUT,)
TOOL_ARGUMENTS: Final = ENTITY_INPUT
TOOL_RESULT: Final = ENTITY_OUTPUT


def prompt_messages(c: str) -> str:
    """Array((role, text)): `gen_ai.prompt.N`, in index order."""
    return flattened_messages(c, "gen_ai.prompt.", ".role", ".content")


def output_texts(c: str) -> tuple[str, ...]:
    """What an LLM call answered: `gen_ai.completion.N`'s texts."""
    return (joined(flattened_messages(c, "gen_ai.completion.", ".role", ".content")),)
