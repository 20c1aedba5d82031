"""The content model: what a span's captured text says, in every dialect, as SQL over its `span_content` row.

The payload copy (`ragmon.sinks.sampler_sql.copy_payloads_sql`) turns the captured text of a kept trace into the judge's
inputs — question, answer, passages, the generate call's prompt messages, tool calls. Apps write that text under
their instrumentation's names, so each role is read from every dialect, highest precedence first, as the numeric
fields are (`ragmon.sinks.dialects_sql`): ragmon's own names > OTel GenAI (current and legacy) > OpenInference >
OpenLLMetry / Traceloop.

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

Why SQL and not Python: the copy runs in the engine (INSERT … SELECT) so the sampler never holds span text in
Python, and this text is parsed only for the kept traces, once. What it costs is mostly planning, paid per copy
(every 2 s under load): the expressions are kept small, each read once (see `copy_payloads_sql`).
"""

from __future__ import annotations

from typing import Final

from ragmon.sinks.backend import quote_string as quote

from ragmon import attributes as A

__all__ = [
    "ANSWER_KEYS",
    "QUESTION_KEYS",
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
]

# Keys of a JSON input or output object that hold the question / the answer, in the order they are tried.
QUESTION_KEYS: Final = ("question", "query", "query_str", "input", "user_input", "q", "prompt", "text", "message")
ANSWER_KEYS: Final = ("answer", "output", "result", "response", "output_text", "text", "content", "message")

# Every function below takes `c`, the SQL of a span's Map(String, String) of captured text (a missing key reads '').


def _get(c: str, key: str) -> str:
    return f"{c}[{quote(key)}]"


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


def _indices(c: str, prefix: str) -> str:
    """The numeric indices N of keys ``{prefix}N.…`` in the span's content, in numeric order."""
    pattern = quote("^" + prefix.replace(".", "\\.") + "([0-9]+)\\.")
    return (
        "arraySort(arrayDistinct(arrayFilter(i -> i IS NOT NULL, "
        f"arrayMap(k -> toUInt32OrNull(extract(k, {pattern})), mapKeys({c})))))"
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


# A JSON message, GenAI's {role, parts: [{type, content}]} or the older {role, content}, read in one typed parse
# (one call per message array: cheaper to plan and to run than a JSONExtractString per field and element).
_MESSAGE_TYPE: Final = "Array(Tuple(role String, content String, parts Array(Tuple(content String))))"


def _json_messages(c: str, key: str) -> str:
    """Array((role, text)) from a JSON array of messages under `key`; [] when it is not one."""
    text = "if(notEmpty(m.3), arrayStringConcat(arrayFilter(s -> s != '', arrayMap(p -> p.1, m.3)), '\\n'), m.2)"
    return f"arrayMap(m -> (m.1, {text}), JSONExtract({_get(c, key)}, {quote(_MESSAGE_TYPE)}))"


def _flattened_messages(c: str, prefix: str, role: str, text: str, parts: str | None = None) -> str:
    """Array((role, text)) from flattened ``{prefix}N{role}`` / ``{prefix}N{text}`` keys, in index order; with
    `parts`, a message without `text` joins its ``{prefix}N{parts}M.message_content.text`` parts."""
    body = f"{c}[{_indexed(prefix, text)}]"
    if parts is not None:
        part_prefix = _indexed(prefix, parts)
        joined = (
            f"arrayStringConcat(arrayMap(k -> {c}[k], arraySort(arrayFilter(k -> startsWith(k, "
            f"{part_prefix}) AND endsWith(k, '.message_content.text'), mapKeys({c})))), '\\n')"
        )
        body = f"if({body} != '', {body}, {joined})"
    return f"arrayMap(i -> ({c}[{_indexed(prefix, role)}], {body}), {_indices(c, prefix)})"


_PROMPT_PREFIXES: Final = ("llm.input_messages.", "gen_ai.prompt.")
_OUTPUT_PREFIXES: Final = ("llm.output_messages.", "gen_ai.completion.")


def prompt_messages(c: str) -> str:
    """Array((role, text)): the prompt of an LLM call."""
    system = f"{_part_texts(_get(c, 'gen_ai.system_instructions'), 'content')}"
    genai = f"arrayConcat(if({system} != '', [('system', {system})], []), {_json_messages(c, A.GEN_AI_INPUT_MESSAGES)})"
    return _first_array(
        genai,
        _flattened_messages(c, "llm.input_messages.", ".message.role", ".message.content", ".message.contents."),
        _flattened_messages(c, "gen_ai.prompt.", ".role", ".content"),
    )


def has_prompt(c: str) -> str:
    """Whether `c` holds prompt messages in some dialect (key lookups and prefix tests only: nothing parsed)."""
    return (
        f"({_has_key(c, A.GEN_AI_INPUT_MESSAGES, 'gen_ai.system_instructions')} OR {_has_prefix(c, *_PROMPT_PREFIXES)})"
    )


def _joined(messages: str) -> str:
    return f"arrayStringConcat(arrayFilter(s -> s != '', arrayMap(m -> m.2, {messages})), '\\n')"


def output_text(c: str) -> str:
    """What an LLM call answered."""
    output = _get(c, A.GEN_AI_OUTPUT_MESSAGES)
    return _first_text(
        _joined(_json_messages(c, A.GEN_AI_OUTPUT_MESSAGES)),
        f"if(isValidJSON({output}), '', {output})",  # the older GenAI attribute could also be plain text
        _joined(
            _flattened_messages(c, "llm.output_messages.", ".message.role", ".message.content", ".message.contents.")
        ),
        _joined(_flattened_messages(c, "gen_ai.completion.", ".role", ".content")),
    )


def has_output(c: str) -> str:
    """Whether `c` holds an LLM call's output in some dialect (nothing parsed)."""
    return f"({_has_key(c, A.GEN_AI_OUTPUT_MESSAGES)} OR {_has_prefix(c, *_OUTPUT_PREFIXES)})"


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


_INPUT_KEYS: Final = (A.OI_INPUT_VALUE, "traceloop.entity.input")
_OUTPUT_KEYS: Final = (A.OI_OUTPUT_VALUE, "traceloop.entity.output")
_QUERY_KEYS: Final = (A.GEN_AI_RETRIEVAL_QUERY_TEXT, A.OI_RERANKER_QUERY)


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


def _flattened_document_texts(c: str, prefix: str) -> str:
    return f"arrayMap(i -> {c}[{_indexed(prefix, '.document.content')}], {_indices(c, prefix)})"


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
    traceloop = _get(c, "traceloop.entity.output")
    v = f"if({traceloop} != '', {traceloop}, {_get(c, A.OI_OUTPUT_VALUE)})"
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


_DOCUMENT_PREFIXES: Final = (A.OI_RETRIEVAL_DOCUMENTS + ".", A.OI_RERANKER_OUTPUT_DOCUMENTS + ".")


def has_documents(c: str, retrieved_ids: str) -> str:
    """Whether a retriever or reranker span carries documents in some dialect (nothing parsed). OpenInference's
    output.value alone does not count: LlamaIndex's inner `_retrieve` span has it, but its documents are on the
    outer `retrieve` span."""
    keys = _has_key(c, A.RAGMON_DOCUMENT_TEXTS, "traceloop.entity.output")
    return f"(notEmpty({retrieved_ids}) OR {keys} OR {_has_prefix(c, *_DOCUMENT_PREFIXES)})"


def document_texts(c: str, stage: str, output_docs: str) -> str:
    """Array(String): the documents' texts in rank order; `output_docs` is `output_documents(c)`, computed once."""
    texts = _get(c, A.RAGMON_DOCUMENT_TEXTS)
    return (
        "CAST("
        + _first_array(
            f"if(isValidJSON({texts}), JSONExtract({texts}, 'Array(String)'), [])",
            f"if({stage} = 'rerank', {_flattened_document_texts(c, A.OI_RERANKER_OUTPUT_DOCUMENTS + '.')}, [])",
            _flattened_document_texts(c, A.OI_RETRIEVAL_DOCUMENTS + "."),
            f"arrayMap(t -> t.2, {output_docs})",
        )
        + ", 'Array(String)')"
    )


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
