"""The question of a trace, stated once: which span's captured text it is read from, and in which order the roles
are tried. The payload copy (`sampler_sql.copy_payloads_sql`) and the question grouping
(`questions_sql.trace_questions_sql`) both read it from here, so a trace's question in `payloads` and in
`trace_questions` is the same text.

In order: ragmon's own `ragmon.question` (the root span's, else any span's); the input of the app's outermost span
with an input or output (its chain, workflow or request span); the query of the last retriever or reranker; the last
user message of the prompt of the LLM call that answered (an app traced only at its client).

Three steps, as both queries are shaped: per span the cheap tests of `span_flags` (key lookups, nothing parsed),
per trace the aggregates of `PER_TRACE` (which span each role is read from), then per trace the parse of those spans
(`content_sql` readers) and `question` over them.
"""

from __future__ import annotations

from ragmon.sinks import content_sql as C
from ragmon.sinks.backend import quote_string as quote
from ragmon.sinks.dialects import ragmon_names as RAGMON

_ROOT = "parent_span_id = ''"
_KEY = quote(RAGMON.QUESTION)


def span_flags(c: str) -> str:
    """Per span (`c`: its content map): the tests `PER_TRACE` chooses spans by, as columns."""
    return (
        f"{C.has_output(c)} AS has_output, {C.has_prompt(c)} AS has_prompt, "
        f"{C.has_input_or_output(c)} AS has_io, {C.has_retrieval_query(c)} AS has_query"
    )


# Per trace, over span rows with `content`, `stage`, `start_time`, `parent_span_id` and `span_flags`' columns.
PER_TRACE = f"""anyIf(content[{_KEY}], mapContains(content, {_KEY}) AND {_ROOT}) AS root_question,
        anyIf(content[{_KEY}], mapContains(content, {_KEY})) AS any_question,
        -- the app's own outermost span with an input or output (its chain, workflow or request span: the root,
        -- or the top of the app's part of the trace under a server span): the user's question, the answer shown
        argMinIf(content, start_time, stage IN ('request', 'other') AND has_io) AS chain_content,
        argMaxIf(content, start_time, stage IN ('search', 'rerank') AND has_query) AS retrieval_content,
        -- the LLM call that answered (the last with an output), and the prompt it was given
        argMaxIf(content, (has_output, start_time), stage = 'generate' AND has_prompt) AS prompt_content"""


def chain_input(chain_content: str) -> str:
    return C.input_text(chain_content)


def retrieval_query(retrieval_content: str) -> str:
    return C.retrieval_query(retrieval_content)


def prompt_messages(prompt_content: str) -> str:
    return C.prompt_messages(prompt_content)


def question(root_question: str, any_question: str, chain_input: str, retrieval_query: str, messages: str) -> str:
    """The question from the parsed roles (each a column, parsed once): the first that is not empty."""
    return (
        f"multiIf({root_question} != '', {root_question}, {any_question} != '', {any_question}, "
        f"{chain_input} != '', {chain_input}, {retrieval_query} != '', {retrieval_query}, "
        f"arrayReverse(arrayFilter(m -> m.1 = 'user' AND m.2 != '', {messages}))[1].2)"
    )
