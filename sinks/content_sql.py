"""The content model: what a span's captured text says, in every dialect, as SQL over its `span_content` row.

The payload copy (`sinks.sampler_sql.copy_payloads_sql`) turns the captured text of a kept trace into the judge's
inputs — question, answer, passages, the generate call's prompt messages, tool calls. Apps write that text under
their instrumentation's names, so each role is read from every dialect, highest precedence first, as the numeric
fields are (`collectors.sql_dialects`): ragmon's own names > OTel GenAI (current and legacy) > OpenInference >
OpenLLMetry / Traceloop.

Per span (`span_text_columns`, over a row with `content`, `stage`, `retrieved_ids`, `retrieved_scores`):

- ``in_messages`` Array((role, text)): the prompt of an LLM call — ``gen_ai.system_instructions`` then
  ``gen_ai.input.messages`` (JSON with ``parts``, or the older ``{role, content}``), else OpenInference
  ``llm.input_messages.N.message.{role,content}`` (or its ``contents.M`` parts), else ``gen_ai.prompt.N.*``.
- ``out_text``: what an LLM call answered — ``gen_ai.output.messages``, ``llm.output_messages.N``,
  ``gen_ai.completion.N``.
- ``io_in`` / ``io_out``: the text of a span's input and output — OpenInference ``input.value`` /
  ``output.value``, else Traceloop ``traceloop.entity.input`` / ``output``. Those are text or JSON (a LangChain
  chain's inputs, Traceloop's ``{"inputs": …, "kwargs": …}`` wrapper): JSON yields a string it holds, under a
  key that names the role (``question``, ``query``, ``input`` … / ``answer``, ``output`` …) or the only key.
- ``query_text``: what a retriever or reranker was asked — ``gen_ai.retrieval.query.text``, ``reranker.query``.
- ``doc_texts`` / ``doc_ids`` / ``doc_scores``: the documents a retriever or reranker returned, in rank order —
  ``ragmon.retrieval.document_texts``, OpenInference ``reranker.output_documents.N.document.content`` (a
  reranker) or ``retrieval.documents.N.document.content``, else the documents in Traceloop's entity output
  (LangChain ``Document``s, ``page_content``; LlamaIndex nodes, ``node.text``). Ids and scores are the span's
  normalised ``retrieved_ids`` / ``retrieved_scores`` when it has them.

Why SQL and not Python: the copy runs in the engine (INSERT … SELECT) so the sampler never holds span text in
Python, and this text is parsed only for the kept traces, once.
"""

from __future__ import annotations

from typing import Final

from collectors.sql_values import quote
from ragmon import attributes as A

__all__ = ["ANSWER_KEYS", "QUESTION_KEYS", "span_text_columns"]

# Keys of a JSON input or output object that hold the question / the answer, in the order they are tried.
QUESTION_KEYS: Final = ("question", "query", "query_str", "input", "user_input", "q", "prompt", "text", "message")
ANSWER_KEYS: Final = ("answer", "output", "result", "response", "output_text", "text", "content", "message")

_C: Final = "content"  # the span's Map(String, String) of captured text: a missing key reads ''


def _get(key: str) -> str:
    return f"{_C}[{quote(key)}]"


def _first_text(*exprs: str) -> str:
    """The first of `exprs` (String) that is not empty, else ''."""
    return "coalesce(" + ", ".join(f"nullIf({e}, '')" for e in exprs) + ", '')"


def _first_array(*exprs: str) -> str:
    """The first of `exprs` (arrays of one type) that is not empty."""
    out = exprs[-1]
    for expr in reversed(exprs[:-1]):
        out = f"arrayMap(x -> if(notEmpty(x), x, {out}), [{expr}])[1]"
    return out


def _indices(prefix: str) -> str:
    """The numeric indices N of keys ``{prefix}N.…`` in the span's content, in numeric order."""
    pattern = quote("^" + prefix.replace(".", "\\.") + "([0-9]+)\\.")
    return (
        "arraySort(arrayDistinct(arrayFilter(i -> i IS NOT NULL, "
        f"arrayMap(k -> toUInt32OrNull(extract(k, {pattern})), mapKeys({_C})))))"
    )


def _indexed(prefix: str, suffix: str) -> str:
    """SQL of the key ``{prefix}{i}{suffix}`` for the lambda variable i."""
    return f"concat({quote(prefix)}, toString(i), {quote(suffix)})"


def _part_texts(parts: str, field: str) -> str:
    """The non-empty `field` strings of a JSON array of parts, joined by newlines."""
    return (
        f"arrayStringConcat(arrayFilter(s -> s != '', "
        f"arrayMap(p -> JSONExtractString(p, {quote(field)}), JSONExtractArrayRaw({parts}))), '\\n')"
    )


def _json_message_text(x: str) -> str:
    """Text of one JSON message: GenAI ``parts`` (``content`` of each), an OpenAI content list (``text``), or a
    string ``content``."""
    parts = _part_texts(f"JSONExtractRaw({x}, 'parts')", "content")
    listed = _part_texts(f"JSONExtractRaw({x}, 'content')", "text")
    return (
        f"multiIf(JSONHas({x}, 'parts'), {parts}, JSONType({x}, 'content') = 'Array', {listed}, "
        f"JSONExtractString({x}, 'content'))"
    )


def _json_messages(key: str) -> str:
    """Array((role, text)) from a JSON array of messages under `key`; [] when it is not one."""
    v = _get(key)
    return (
        f"if(isValidJSON({v}) AND JSONType({v}) = 'Array', arrayMap(x -> (JSONExtractString(x, 'role'), "
        f"{_json_message_text('x')}), JSONExtractArrayRaw({v})), [])"
    )


def _flattened_messages(prefix: str, role: str, text: str, parts: str | None = None) -> str:
    """Array((role, text)) from flattened ``{prefix}N{role}`` / ``{prefix}N{text}`` keys, in index order; with
    `parts`, a message without `text` joins its ``{prefix}N{parts}M.message_content.text`` parts."""
    body = f"{_C}[{_indexed(prefix, text)}]"
    if parts is not None:
        part_prefix = _indexed(prefix, parts)
        joined = (
            "arrayStringConcat(arrayMap(k -> content[k], arraySort(arrayFilter(k -> startsWith(k, "
            f"{part_prefix}) AND endsWith(k, '.message_content.text'), mapKeys({_C})))), '\\n')"
        )
        body = f"if({body} != '', {body}, {joined})"
    return f"arrayMap(i -> ({_C}[{_indexed(prefix, role)}], {body}), {_indices(prefix)})"


def _in_messages() -> str:
    system = f"{_part_texts(_get('gen_ai.system_instructions'), 'content')}"
    genai = f"arrayConcat(if({system} != '', [('system', {system})], []), {_json_messages(A.GEN_AI_INPUT_MESSAGES)})"
    return _first_array(
        genai,
        _flattened_messages("llm.input_messages.", ".message.role", ".message.content", ".message.contents."),
        _flattened_messages("gen_ai.prompt.", ".role", ".content"),
    )


def _joined(messages: str) -> str:
    return f"arrayStringConcat(arrayFilter(s -> s != '', arrayMap(m -> m.2, {messages})), '\\n')"


def _out_text() -> str:
    return _first_text(
        _joined(_json_messages(A.GEN_AI_OUTPUT_MESSAGES)),
        # the older GenAI attribute could also be plain text
        f"if(isValidJSON({_get(A.GEN_AI_OUTPUT_MESSAGES)}), '', {_get(A.GEN_AI_OUTPUT_MESSAGES)})",
        _joined(_flattened_messages("llm.output_messages.", ".message.role", ".message.content", ".message.contents.")),
        _joined(_flattened_messages("gen_ai.completion.", ".role", ".content")),
    )


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


def _io_text(oi_key: str, traceloop_key: str, keys: tuple[str, ...]) -> str:
    return _first_text(_json_pick(_get(oi_key), keys), _json_pick(_get(traceloop_key), keys))


def _flattened_document_texts(prefix: str) -> str:
    return f"arrayMap(i -> {_C}[{_indexed(prefix, '.document.content')}], {_indices(prefix)})"


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


def _output_documents() -> str:
    """The documents in a retriever span's output (``traceloop.entity.output``, else OpenInference's
    ``output.value``, which holds the ids its flattened documents lack): a JSON list, or one under ``outputs``
    (LangChain chains) or ``documents`` (LangChain retrievers); LlamaIndex lists each node as a JSON string."""
    v = f"if({_get('traceloop.entity.output')} != '', {_get('traceloop.entity.output')}, {_get(A.OI_OUTPUT_VALUE)})"
    listed = (
        f"multiIf(JSONHas({v}, 'outputs'), JSONExtractRaw({v}, 'outputs'), "
        f"JSONHas({v}, 'documents'), JSONExtractRaw({v}, 'documents'), {v})"
    )
    return (
        f"arrayMap(l -> if(isValidJSON(l) AND JSONType(l) = 'Array', arrayFilter(d -> {_DOC_TEXT} != '', "
        "arrayMap(e -> if(JSONType(e) = 'String', JSONExtractString(e), e), JSONExtractArrayRaw(l))), []), "
        f"[{listed}])[1]"
    )


def span_text_columns() -> list[str]:
    """SELECT-list items over a `span_content` row: the per-span roles of the module docstring, each named."""
    texts = _get(A.RAGMON_DOCUMENT_TEXTS)
    output_docs = "output_docs"
    # Each role is parsed only on the spans the per-trace pass reads it from (`copy_payloads_sql`): messages on
    # generate spans, inputs and outputs on chains and retrievers, documents on retrievers and rerankers.
    generate = "stage = 'generate'"
    io_stage = "stage IN ('request', 'other', 'search', 'rerank')"
    retrieval_stage = "stage IN ('search', 'rerank')"
    return [
        f"if({generate}, {_in_messages()}, []) AS in_messages",
        f"if({generate}, {_out_text()}, '') AS out_text",
        f"if({io_stage}, {_io_text(A.OI_INPUT_VALUE, 'traceloop.entity.input', QUESTION_KEYS)}, '') AS io_in",
        f"if({io_stage}, {_io_text(A.OI_OUTPUT_VALUE, 'traceloop.entity.output', ANSWER_KEYS)}, '') AS io_out",
        f"{_first_text(_get(A.GEN_AI_RETRIEVAL_QUERY_TEXT), _get(A.OI_RERANKER_QUERY))} AS query_text",
        f"if({retrieval_stage}, {_output_documents()}, []) AS {output_docs}",
        f"if({retrieval_stage}, CAST("
        + _first_array(
            f"if(isValidJSON({texts}), JSONExtract({texts}, 'Array(String)'), [])",
            f"if(stage = 'rerank', {_flattened_document_texts(A.OI_RERANKER_OUTPUT_DOCUMENTS + '.')}, [])",
            _flattened_document_texts(A.OI_RETRIEVAL_DOCUMENTS + "."),
            f"arrayMap(d -> {_DOC_TEXT}, {output_docs})",
        )
        + ", 'Array(String)'), []) AS doc_texts",
        f"if(notEmpty(retrieved_ids), retrieved_ids, arrayMap(d -> {_DOC_ID}, {output_docs})) AS doc_ids",
        # scores only when every document has one (LangChain documents carry none: no made-up zeros)
        f"if(notEmpty(retrieved_ids), retrieved_scores, if(arrayAll(d -> JSONHas(d, 'score'), {output_docs}), "
        f"arrayMap(d -> toFloat32(JSONExtractFloat(d, 'score')), {output_docs}), [])) AS doc_scores",
    ]
