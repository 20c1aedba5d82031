"""The content model: question, answer, passages and prompt of kept traces from every dialect's captured text.

Each trace below is shaped like what a real instrumentation sent (the attribute names and value shapes were read
off the LangChain, LlamaIndex and openai apps of tests/thirdparty under OpenInference, OpenLLMetry and the OTel
GenAI instrumentation), trimmed to the spans that matter. They go through the real normalising SQL
(`ragmon.sinks.otlp_views.install`) and the real payload copy.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from ragmon.sinks import Store, envelope, otlp_views

from tests.support.synth import encode_otlp_request

NOW_NS = (int(time.time()) // 60 * 60 - 600) * 10**9
QUESTION = "Which wireless protocols does the Aurora X2 thermostat use?"
ANSWER = "The Aurora X2 thermostat uses Wi-Fi and Zigbee."
DOCS = [
    ("thermostat.md", 0.48, "The Aurora X2 thermostat connects over Wi-Fi and Zigbee."),
    ("privacy.md", 0.25, "Aurora stores camera clips in Frankfurt for thirty days."),
]
SYSTEM = "You are the Aurora support assistant. Answer only from the context below."


class Trace:
    """Span dicts of one trace, each child under the span named by `parent`."""

    def __init__(self, n: int) -> None:
        self.trace_id = f"{n:032x}"
        self.spans: list[dict[str, Any]] = []

    def span(self, name: str, parent: str | None = None, status: int = 1, **attributes: Any) -> str:
        span_id = f"{len(self.spans) + 1:016x}"
        parent_id = next(s["span_id"] for s in self.spans if s["name"] == parent) if parent else ""
        self.spans.append(
            {
                "trace_id": self.trace_id,
                "span_id": span_id,
                "parent_span_id": parent_id,
                "name": name,
                "start_ns": NOW_NS + len(self.spans) * 1_000_000,
                "duration_ms": 50.0 - len(self.spans),
                "status_code": status,
                "attributes": attributes,
            }
        )
        return span_id


def _openinference_langchain(n: int) -> Trace:
    t = Trace(n)
    t.span("RunnableSequence", **{"openinference.span.kind": "CHAIN", "input.value": QUESTION, "output.value": ANSWER})
    documents = {"documents": [{"id": i, "metadata": {"source": i}, "page_content": text} for i, _, text in DOCS]}
    t.span(
        "VectorStoreRetriever",
        "RunnableSequence",
        **{"openinference.span.kind": "RETRIEVER", "input.value": QUESTION, "output.value": json.dumps(documents)},
        **{f"retrieval.documents.{i}.document.content": text for i, (_, _, text) in enumerate(DOCS)},
    )
    t.span(
        "format_docs",
        "RunnableSequence",
        **{"openinference.span.kind": "CHAIN", "input.value": "[]", "output.value": "\n\n".join(d[2] for d in DOCS)},
    )
    t.span(
        "ChatOpenAI",
        "RunnableSequence",
        **{
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-mini",
            "llm.token_count.prompt": 231,
            "llm.token_count.completion": 12,
            "llm.input_messages.0.message.role": "system",
            "llm.input_messages.0.message.content": SYSTEM,
            "llm.input_messages.1.message.role": "user",
            "llm.input_messages.1.message.content": QUESTION,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": ANSWER,
        },
    )
    return t


def _openllmetry_langchain(n: int) -> Trace:
    t = Trace(n)
    wrapped = {"inputs": QUESTION, "tags": [], "metadata": {}, "kwargs": {"name": "RunnableSequence"}}
    t.span(
        "RunnableSequence.workflow",
        **{
            "traceloop.span.kind": "workflow",
            "gen_ai.operation.name": "invoke_agent",
            "traceloop.entity.input": json.dumps(wrapped),
            "gen_ai.task.input": json.dumps(wrapped),
            "traceloop.entity.output": json.dumps({"outputs": ANSWER, "kwargs": {"tags": []}}),
        },
    )
    documents = {"documents": [{"page_content": text, "metadata": {"source": i}} for i, _, text in DOCS]}
    t.span(
        "vector_db_retrieve VectorStoreRetriever",
        "RunnableSequence.workflow",
        **{
            "traceloop.span.kind": "task",
            "gen_ai.operation.name": "vector_db_retrieve",
            "traceloop.entity.name": "VectorStoreRetriever",
            "traceloop.entity.input": json.dumps({"query": QUESTION, "tags": []}),
            "traceloop.entity.output": json.dumps(documents),
            "gen_ai.task.output": json.dumps(documents),
        },
    )
    t.span(
        "ChatOpenAI.chat",
        "RunnableSequence.workflow",
        **{
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.input_tokens": 231,
            "gen_ai.usage.output_tokens": 12,
            "gen_ai.system_instructions": json.dumps([{"type": "text", "content": SYSTEM}]),
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": QUESTION}]}]),
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": ANSWER}], "finish_reason": "stop"}]
            ),
        },
    )
    return t


def _openllmetry_llamaindex(n: int) -> Trace:
    t = Trace(n)
    t.span(
        "RetrieverQueryEngine.workflow",
        **{
            "traceloop.span.kind": "workflow",
            "traceloop.entity.input": json.dumps({"str_or_query_bundle": QUESTION}),
            "traceloop.entity.output": json.dumps({"response": ANSWER, "metadata": {}}),
        },
    )
    nodes = [json.dumps({"node": {"id_": f"{i}#0", "text": text}, "score": score}) for i, score, text in DOCS]
    for name in ("RetrieverQueryEngine.task", "VectorIndexRetriever.task"):
        t.span(
            name,
            "RetrieverQueryEngine.workflow" if name.startswith("Retriever") else "RetrieverQueryEngine.task",
            **{
                "traceloop.span.kind": "task",
                "traceloop.entity.name": name,
                "traceloop.entity.input": json.dumps({"query_bundle": {"query_str": QUESTION}}),
                "traceloop.entity.output": json.dumps(nodes) if "Index" in name else json.dumps({"response": ANSWER}),
            },
        )
    t.span(
        "openai.chat",
        "RetrieverQueryEngine.task",
        **{
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": SYSTEM,
            "gen_ai.prompt.1.role": "user",
            "gen_ai.prompt.1.content": f"Context: {DOCS[0][2]}\nQuery: {QUESTION}",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": ANSWER,
        },
    )
    return t


def _genai_client_only(n: int, *, failed: bool = False) -> Trace:
    """An app that retrieves by itself and instruments only its LLM client: the context is in the prompt."""
    t = Trace(n)
    messages = [
        {"role": "system", "parts": [{"type": "text", "content": f"{SYSTEM}\nContext: {DOCS[0][2]}"}]},
        {"role": "user", "parts": [{"type": "text", "content": QUESTION}]},
    ]
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.input.messages": json.dumps(messages),
    }
    if failed:
        attributes["error.type"] = "InternalServerError"
    else:
        attributes["gen_ai.output.messages"] = json.dumps([{"role": "assistant", "content": ANSWER}])  # older shape
    t.span("chat gpt-4o-mini", status=2 if failed else 1, **attributes)
    return t


@pytest.fixture
def real_store(chdb_store: Store) -> Store:
    otlp_views.install(chdb_store)
    return chdb_store


def _payload(store: Store, trace: Trace) -> dict[str, Any]:
    store.insert_otlp([envelope.seal(encode_otlp_request(trace.spans), "acme", 1)], dedup_token=trace.trace_id)
    store.copy_payloads([{"tenant": "acme", "trace_id": trace.trace_id, "reasons": ["error"], "probability": 1.0}])
    rows = store.query(
        f"SELECT * FROM {store.topology.database}.payloads FINAL WHERE trace_id = {{t:String}}", {"t": trace.trace_id}
    )
    assert len(rows) == 1
    return rows[0]


@pytest.mark.parametrize(
    ("make", "ids", "scores"),
    [
        (_openinference_langchain, ["thermostat.md", "privacy.md"], [None, None]),
        (_openllmetry_langchain, ["thermostat.md", "privacy.md"], [None, None]),
        (_openllmetry_llamaindex, ["thermostat.md#0", "privacy.md#0"], [0.48, 0.25]),
    ],
)
def test_framework_traces_give_question_answer_and_the_retrieved_passages(
    real_store: Store, make: Any, ids: list[str], scores: list[float | None]
) -> None:
    row = _payload(real_store, make(7))
    assert (row["question"], row["answer"], row["context_source"]) == (QUESTION, ANSWER, "passages")
    assert [p["id"] for p in row["passages"]] == ids
    assert [p["text"] for p in row["passages"]] == [d[2] for d in DOCS]
    assert [p["score"] for p in row["passages"]] == [pytest.approx(s) if s else None for s in scores]
    assert row["messages"][0] == {"role": "system", "content": SYSTEM}
    assert row["messages"][-1]["role"] == "user" and QUESTION in row["messages"][-1]["content"]
    judged = real_store.payloads_for_judging("acme", [make(7).trace_id])[make(7).trace_id]
    assert judged["passage_texts"] == [d[2] for d in DOCS] and judged["context_source"] == "passages"


def test_openllmetry_retrievers_are_search_spans(real_store: Store) -> None:
    for make in (_openllmetry_langchain, _openllmetry_llamaindex):
        trace = make(8 if make is _openllmetry_langchain else 9)
        real_store.insert_otlp([envelope.seal(encode_otlp_request(trace.spans), "acme", 2)], dedup_token=trace.trace_id)
    rows = real_store.query(f"SELECT name, stage FROM {real_store.topology.database}.spans ORDER BY name")
    stages = {r["name"]: r["stage"] for r in rows}
    assert stages["vector_db_retrieve VectorStoreRetriever"] == "search"
    assert stages["VectorIndexRetriever.task"] == "search"
    assert stages["RetrieverQueryEngine.task"] == "other"  # a query engine is not a retriever
    assert stages["RetrieverQueryEngine.workflow"] == stages["RunnableSequence.workflow"] == "request"


def test_framework_text_is_content_not_a_slim_attribute(real_store: Store) -> None:
    trace = _openllmetry_langchain(10)
    real_store.insert_otlp([envelope.seal(encode_otlp_request(trace.spans), "acme", 3)], dedup_token="slim")
    rows = real_store.query(f"SELECT mapKeys(attributes) AS keys FROM {real_store.topology.database}.spans")
    keys = {k for r in rows for k in r["keys"]}
    assert not keys & {"gen_ai.task.input", "gen_ai.task.output", "traceloop.entity.input", "traceloop.entity.output"}


def test_a_client_only_trace_is_judged_against_its_prompt(real_store: Store) -> None:
    trace = _genai_client_only(11)
    row = _payload(real_store, trace)
    assert (row["question"], row["answer"], row["passages"]) == (QUESTION, ANSWER, [])
    assert row["context_source"] == "prompt"
    judged = real_store.payloads_for_judging("acme", [trace.trace_id])[trace.trace_id]
    # the prompt less the question: what the model was given to answer from
    assert judged["passage_texts"] == [f"{SYSTEM}\nContext: {DOCS[0][2]}"]
    assert judged["context_source"] == "prompt"


def test_a_failed_call_keeps_its_question_and_has_no_answer(real_store: Store) -> None:
    row = _payload(real_store, _genai_client_only(12, failed=True))
    assert (row["question"], row["answer"]) == (QUESTION, "")


def test_ragmon_names_win_over_the_dialects(real_store: Store) -> None:
    trace = _openinference_langchain(13)
    trace.spans[0]["attributes"] |= {"ragmon.question": "the SDK's question", "ragmon.answer": "the SDK's answer"}
    row = _payload(real_store, trace)
    assert (row["question"], row["answer"]) == ("the SDK's question", "the SDK's answer")
