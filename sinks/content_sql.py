"""The content model: what a span's captured text says, in every dialect, as SQL over its `span_content` row.

The payload copy (`ragmon.sinks.sampler_sql.copy_payloads_sql`) turns the captured text of a kept trace into the judge's
inputs — question, answer, passages, the generate call's prompt messages, tool calls. Apps write that text under
their instrumentation's names, so each role is read from every dialect, highest precedence first, as the numeric
fields are (`ragmon.sinks.dialects_sql`): ragmon's own names > OTel GenAI (current and legacy) > OpenInference >
OpenLLMetry / Traceloop. What each dialect names and how its text is read is its module's
(`ragmon.sinks.dialects`); this module says which dialects give each role, in which order, and reads what no one
dialect owns: JSON input and output values and the framework documents in a retriever's output.

Two kinds of expression over `c`, the SQL of a span's content map. The `has_*` tests (key lookups and prefix
scans, nothing parsed) choose per trace the span each role is read from; the readers then parse only that span's
text, once per trace:

- `prompt_messages` Array((role, text)): the prompt of an LLM call — ``gen_ai.system_instructions`` then
  ``gen_ai.input.messages`` (JSON with ``parts``, or the older ``{role, content}``), else OpenInference
  ``llm.input_messages.N.message.{role,content}`` (or its ``contents.M`` parts), else ``gen_ai.prompt.N.*``.
- `output_text`: what an LLM call answered — ``gen_ai.output.messages``, ``llm.output_messages.N``,
  ``gen_ai.completion.N``.
- `input_text` / `output_value_text`: the text of a span's input and output — OpenInference ``input.value`` /
  ``output.value``, else Traceloop ``traceloop.entity.input`` / ``output``. Those are text or JSON (a LangChain
  chain's inputs, Traceloop's ``{"inputs": …, "kwargs": …}`` wrapper): JSON yields a string it holds, under a
  key that names the role (``question``, ``query``, ``input`` … / ``answer``, ``output`` …) or the only key.
- `retrieval_query`: what a retriever or reranker was asked — ``gen_ai.retrieval.query.text``,
  ``reranker.query``, else its input.
- `document_texts` / `document_ids` / `document_scores`: the documents a retriever or reranker returned, in rank
  order — ``ragmon.retrieval.document_texts``, OpenInference ``reranker.output_documents.N.document.content`` (a
  reranker) or ``retrieval.documents.N.document.content``, else the documents in its output (`output_documents`:
  LangChain ``Document``s, ``page_content``; LlamaIndex nodes, ``node.text``). Ids and scores are the span's
  normalised ``retrieved_ids`` / ``retrieved_scores`` when it has them.
- `tool_name` / `tool_arguments` / `tool_result`: a tool call — ``gen_ai.tool.*``, else the tool span's input and
  output (OpenInference, Traceloop).

Why SQL and not Python: the copy runs in the engine (INSERT … SELECT) so the sampler never holds span text in
Python, and this text is parsed only for the kept traces, once. What it costs is mostly planning, paid per copy
(every 2 s under load): the expressions are kept small, each read once (see `copy_payloads_sql`).
"""

from __future__ import annotations

from typing import Final

from ragmon.sinks.backend import quote_string as quote
from ragmon.sinks.dialects import openinference as OI
from ragmon.sinks.dialects import openllmetry as OLL
from ragmon.sinks.dialects import otel_genai as GENAI
from ragmon.sinks.dialects import ragmon_names as RAGMON
from ragmon.sinks.dialects.common import get as _get

__all__ = [
    "ANSWER_KEYS",
    "QUESTION_KEYS",
    "TOOL_KEYS",
    "document_ids",
    "document_scores",
    "document_texts",
    "has_documents",
    "has_input_or_output",
    "has_output",
    "has_prompt",
    "has_retrieval_query",
    "input_text",
    "output_documents",
    "output_text",
    "output_value_text",
    "prompt_messages",
    "retrieval_query",
    "tool_arguments",
    "tool_name",
    "tool_result",
]

# Keys of a JSON input or output object that hold the question / the answer, in the order they are tried.
QUESTION_KEYS: Final = ("question", "query", "query_str", "input", "user_input", "q", "prompt", "text", "message")
ANSWER_KEYS: Final = ("answer", "output", "result", "response", "output_text", "text", "content", "message")

# Every function below takes `c`, the SQL of a span's Map(String, String) of captured text (a missing key reads '').


def _has_prefix(c: str, *prefixes: str) -> str:
    """Whether a key of `c` starts with one of `prefixes` (a cheap scan: no regex)."""
    tests = " OR ".join(f"startsWith(k, {quote(p)})" for p in prefixes)
    return f"arrayExists(k -> {tests}, mapKeys({c}))"


def _has_key(c: str, *keys: str) -> str:
    return "(" + " OR ".join(f"mapContains({c}, {quote(k)})" for k in keys) + ")"


def _first_text(*exprs: str) -> str:
    """The first of `exprs` (String) that is not empty, else ''."""
    return "coalesce(" + ", ".join(f"nullIf({e}, '')" for e in exprs) + ", '')"


def _first_array(*exprs: str) -> str:
    """The first of `exprs` (arrays of one type) that is not empty."""
    out = exprs[-1]
    for expr in reversed(exprs[:-1]):
        out = f"arrayMap(x -> if(notEmpty(x), x, {out}), [{expr}])[1]"
    return out


def prompt_messages(c: str) -> str:
    """Array((role, text)): the prompt of an LLM call."""
    return _first_array(GENAI.prompt_messages(c), OI.prompt_messages(c), OLL.prompt_messages(c))


def has_prompt(c: str) -> str:
    """Whether `c` holds prompt messages in some dialect (key lookups and prefix tests only: nothing parsed)."""
    return f"({_has_key(c, *GENAI.PROMPT_KEYS)} OR {_has_prefix(c, *OI.PROMPT_PREFIXES, *OLL.PROMPT_PREFIXES)})"


def output_text(c: str) -> str:
    """What an LLM call answered."""
    return _first_text(*GENAI.output_texts(c), *OI.output_texts(c), *OLL.output_texts(c))


def has_output(c: str) -> str:
    """Whether `c` holds an LLM call's output in some dialect (nothing parsed)."""
    return f"({_has_key(c, *GENAI.OUTPUT_KEYS)} OR {_has_prefix(c, *OI.OUTPUT_PREFIXES, *OLL.OUTPUT_PREFIXES)})"


def _json_pick(v: str, keys: tuple[str, ...]) -> str:
    """Text of an input or output value: itself unless it is JSON; a JSON string's value; of an object, the first
    string under `keys` or its only string member (Traceloop's ``inputs`` / ``outputs`` wrapper is looked into
    first); '' for other JSON (arrays, nested objects)."""
    unwrapped = (
        f"multiIf(JSONHas({v}, 'inputs'), JSONExtractRaw({v}, 'inputs'), "
        f"JSONHas({v}, 'outputs'), JSONExtractRaw({v}, 'outputs'), {v})"
    )
    named = ", ".join(f"nullIf(JSONExtractString(u, {quote(k)}), '')" for k in keys)
    only = "if(JSONLength(u) = 1 AND JSONType(u, 1) = 'String', JSONExtractString(u, 1), '')"
    return (
        f"if(NOT isValidJSON({v}), {v}, arrayMap(u -> multiIf("
        f"JSONType(u) = 'String', JSONExtractString(u), "
        f"JSONType(u) = 'Object', coalesce({named}, {only}), "
        f"JSONType(u) IN ('Array', 'Null'), '', u), [{unwrapped}])[1])"
    )


_INPUT_KEYS: Final = (*OI.INPUT_KEYS, *OLL.INPUT_KEYS)
_OUTPUT_KEYS: Final = (*OI.OUTPUT_VALUE_KEYS, *OLL.OUTPUT_VALUE_KEYS)
_QUERY_KEYS: Final = (*GENAI.QUERY_KEYS, *OI.QUERY_KEYS)


def _first_value(c: str, keys: tuple[str, ...]) -> str:
    """The first non-empty of `keys` in `c`, unparsed: one span carries one dialect's names, so one pick of the
    JSON follows (each pick is a large expression, and the copy's plan is paid per copy)."""
    return _first_text(*(_get(c, key) for key in keys))


def input_text(c: str) -> str:
    """The text of a span's input (a chain's: the question; a retriever's: its query)."""
    return _json_pick(_first_value(c, _INPUT_KEYS), QUESTION_KEYS)


def output_value_text(c: str) -> str:
    """The text of a span's output (a chain's: the answer it returned)."""
    return _json_pick(_first_value(c, _OUTPUT_KEYS), ANSWER_KEYS)


def has_input_or_output(c: str) -> str:
    return _has_key(c, *_INPUT_KEYS, *_OUTPUT_KEYS)


def retrieval_query(c: str) -> str:
    """What a retriever or reranker was asked: its query attribute, else its input."""
    return _first_text(_first_value(c, _QUERY_KEYS), input_text(c))


def has_retrieval_query(c: str) -> str:
    return _has_key(c, *_QUERY_KEYS, *_INPUT_KEYS)


# A document in a Traceloop entity output: a serialised LangChain Document ({lc, kwargs: {page_content, id}}), a
# plain one ({page_content, metadata}), a LlamaIndex NodeWithScore ({node: {text, id_}, score}).
_DOC_TEXT: Final = (
    "coalesce(nullIf(JSONExtractString(d, 'kwargs', 'page_content'), ''), nullIf(JSONExtractString(d, "
    "'page_content'), ''), nullIf(JSONExtractString(d, 'node', 'text'), ''), nullIf(JSONExtractString(d, 'text'), "
    "''), '')"
)
# Its id: the document's own, else LangChain's conventional `metadata.source` (the file it came from).
_DOC_ID: Final = (
    "coalesce(nullIf(JSONExtractString(d, 'kwargs', 'id'), ''), nullIf(JSONExtractString(d, 'id'), ''), "
    "nullIf(JSONExtractString(d, 'node', 'id_'), ''), nullIf(JSONExtractString(d, 'id_'), ''), "
    "nullIf(JSONExtractString(d, 'kwargs', 'metadata', 'source'), ''), "
    "nullIf(JSONExtractString(d, 'metadata', 'source'), ''), '')"
)


def output_documents(c: str) -> str:
    """The documents in a retriever span's output (``traceloop.entity.output``, else OpenInference's
    ``output.value``, which holds the ids its flattened documents lack): a JSON list, or one under ``outputs``
    (LangChain chains) or ``documents`` (LangChain retrievers); LlamaIndex lists each node as a JSON string.
    Array(String) of JSON documents that have a text."""
    traceloop = _get(c, OLL.OUTPUT_DOCUMENTS)
    v = f"if({traceloop} != '', {traceloop}, {_get(c, OI.OUTPUT_DOCUMENTS)})"
    listed = (
        f"multiIf(JSONHas({v}, 'outputs'), JSONExtractRaw({v}, 'outputs'), "
        f"JSONHas({v}, 'documents'), JSONExtractRaw({v}, 'documents'), {v})"
    )
    document = f"({_DOC_ID}, {_DOC_TEXT}, JSONHas(d, 'score'), toFloat32(JSONExtractFloat(d, 'score')))"
    elements = "arrayMap(e -> if(JSONType(e) = 'String', JSONExtractString(e), e), JSONExtractArrayRaw(l))"
    return (
        f"arrayMap(l -> if(isValidJSON(l) AND JSONType(l) = 'Array', arrayFilter(t -> t.2 != '', "
        f"arrayMap(d -> {document}, {elements})), []), [{listed}])[1]"
    )


def has_documents(c: str, retrieved_ids: str) -> str:
    """Whether a retriever or reranker span carries documents in some dialect (nothing parsed). OpenInference's
    output.value alone does not count: LlamaIndex's inner `_retrieve` span has it, but its documents are on the
    outer `retrieve` span."""
    keys = _has_key(c, *RAGMON.DOCUMENT_KEYS, *OLL.DOCUMENT_KEYS)
    return f"(notEmpty({retrieved_ids}) OR {keys} OR {_has_prefix(c, *OI.DOCUMENT_TEXT_PREFIXES)})"


def document_texts(c: str, stage: str, output_docs: str) -> str:
    """Array(String): the documents' texts in rank order; `output_docs` is `output_documents(c)`, computed once."""
    texts = _first_array(*RAGMON.document_texts(c), *OI.document_texts(c, stage), f"arrayMap(t -> t.2, {output_docs})")
    return f"CAST({texts}, 'Array(String)')"


def document_ids(retrieved_ids: str, output_docs: str) -> str:
    """The span's normalised ids, else those of its output documents."""
    return f"if(notEmpty({retrieved_ids}), {retrieved_ids}, arrayMap(t -> t.1, {output_docs}))"


def document_scores(retrieved_ids: str, retrieved_scores: str, output_docs: str) -> str:
    """The span's normalised scores, else its output documents' when every one has a score (LangChain documents
    carry none: no made-up zeros)."""
    return (
        f"if(notEmpty({retrieved_ids}), {retrieved_scores}, "
        f"if(arrayAll(t -> t.3, {output_docs}), arrayMap(t -> t.4, {output_docs}), []))"
    )


def _first_given(c: str, *keys: str) -> str:
    """The value of the first of `keys` that `c` gives (non-empty), else the last key's."""
    *tested, last = keys
    return "multiIf(" + "".join(f"{_get(c, k)} != '', {_get(c, k)}, " for k in tested) + f"{_get(c, last)})"


def tool_name(c: str, span_name: str) -> str:
    """The tool a tool span called: `gen_ai.tool.name` where the captured text has it, else the span's name (the
    normaliser files that name among the attributes, not the captured text)."""
    return f"if({_get(c, GENAI.TOOL_NAME)} != '', {_get(c, GENAI.TOOL_NAME)}, toString({span_name}))"


def tool_arguments(c: str) -> str:
    return _first_given(c, GENAI.TOOL_ARGUMENTS, OI.TOOL_ARGUMENTS, OLL.TOOL_ARGUMENTS)


def tool_result(c: str) -> str:
    return _first_given(c, GENAI.TOOL_RESULT, OI.TOOL_RESULT, OLL.TOOL_RESULT)


# The keys a payload's tool calls are made of: not copied again into its other captured text.
TOOL_KEYS: Final = (GENAI.TOOL_NAME, GENAI.TOOL_ARGUMENTS, GENAI.TOOL_RESULT)
