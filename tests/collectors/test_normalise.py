"""Normalisation of each dialect in ClickHouse (the store's SQL, run in chDB), from spans made by the real
OpenTelemetry SDK and encoded as its exporters do."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.trace import Status, StatusCode
from ragmon.collectors.otlp_json import request_from_json
from ragmon.collectors.validate import validate

from ragmon.pricing import ModelPrice, PriceTable
from tests.collectors.collector_fakes import sdk_request
from tests.collectors.sql_store import SqlStore


def normalise(store: SqlStore, request: ExportTraceServiceRequest, tenant: str = "t") -> dict[str, dict[str, Any]]:
    """Rows by span name after the receive path (validate) and the store's SQL; each with its `content`."""
    validation = validate(request)
    store.insert([(tenant, validation.body)])
    return store.by_name()


def approx_list(values: list[float]) -> Any:
    return pytest.approx(values, rel=1e-6)  # retrieved_scores are Float32


def test_ragmon_dialect_maps_every_column_and_computes_cost_and_gap(store: SqlStore) -> None:
    scores = [0.91, 0.85, 0.7, 0.6, 0.55, 0.5, 0.45, 0.4, 0.35, 0.3, 0.1]

    def emit(tracer: Any) -> None:
        with tracer.start_as_current_span("rag.request") as root:
            root.set_attributes({"ragmon.feature": "qa", "ragmon.user": "u-1", "ragmon.session": "s-1"})
            root.set_attribute("ragmon.question", "What is RAG?")
            root.set_attribute("ragmon.tenant", "evil-tenant")  # must never become the tenant
            with tracer.start_as_current_span("search") as span:
                span.set_attributes(
                    {
                        "ragmon.stage": "search",
                        "ragmon.feature": "qa",
                        "ragmon.retrieval.document_ids": [f"d{i}" for i in range(11)],
                        "ragmon.retrieval.document_scores": scores,
                        "ragmon.retrieval.document_texts": ["passage one", "passage two"],
                        "ragmon.embedding.query_norm_deviation": 0.002,
                        "gen_ai.data_source.id": "kb-main",
                    }
                )
            with tracer.start_as_current_span("chat gpt-4o-mini") as span:
                span.set_attributes(
                    {
                        "ragmon.stage": "generate",
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": "openai",
                        "gen_ai.request.model": "gpt-4o-mini",
                        "gen_ai.usage.input_tokens": 1000,
                        "gen_ai.usage.output_tokens": 200,
                        "ragmon.generate.time_to_first_token_ms": 123.5,
                        "ragmon.answer": "RAG is retrieval-augmented generation.",
                    }
                )

    request = sdk_request(emit, "rag-api")
    assert validate(request).rejected_by_reason == {} and validate(request).spans_total == 3
    got = normalise(store, request, tenant="acme")
    root, search, chat = got["rag.request"], got["search"], got["chat gpt-4o-mini"]
    assert {r["tenant"] for r in got.values()} == {"acme"}
    assert root["stage"] == "request" and root["parent_span_id"] == ""
    assert (root["feature"], root["user"], root["session"], root["service"]) == ("qa", "u-1", "s-1", "rag-api")
    assert root["content"] == {"ragmon.question": "What is RAG?"}
    assert "ragmon.tenant" not in root["attributes"]
    assert search["stage"] == "search" and search["parent_span_id"] == root["span_id"]
    assert search["retrieved_ids"] == [f"d{i}" for i in range(11)]
    assert search["retrieved_scores"] == approx_list(scores)
    assert search["top1_score"] == pytest.approx(0.91)
    assert search["similarity_gap"] == pytest.approx(0.91 - 0.3)  # rank 1 minus rank 10
    assert search["norm_deviation"] == pytest.approx(0.002)
    assert search["attributes"] == {"gen_ai.data_source.id": "kb-main"}
    assert json.loads(search["content"]["ragmon.retrieval.document_texts"]) == ["passage one", "passage two"]
    assert chat["stage"] == "generate" and chat["model"] == "gpt-4o-mini" and chat["provider"] == "openai"
    assert (chat["input_tokens"], chat["output_tokens"]) == (1000, 200)
    assert chat["cost_usd"] == pytest.approx(1000 * 0.15 / 1e6 + 200 * 0.60 / 1e6)
    assert chat["ttft_ms"] == 123.5
    assert chat["feature"] == "rag-api"  # no feature on the span or resource: the service name
    assert chat["content"] == {"ragmon.answer": "RAG is retrieval-augmented generation."}
    assert len(root["trace_id"]) == 32 and len(root["span_id"]) == 16
    assert all(r["status"] == "unset" for r in got.values())
    assert chat["duration_ms"] >= 0 and chat["start_time"] > "2020-01-01"
    assert {r["ingest_seq"] for r in got.values()} == {1}
    assert search["content_row"]["retrieved_ids"] == search["retrieved_ids"]  # the content table has them too


def test_otel_genai_current_and_legacy_names_and_errors(store: SqlStore) -> None:
    documents = json.dumps([{"id": "a", "score": 0.9}, {"id": "b", "score": 0.4}])

    def emit(tracer: Any) -> None:
        with tracer.start_as_current_span("invoke_workflow") as root:
            root.set_attribute("user.id", "u-7")
            root.set_attribute("session.id", "sess-7")
            with tracer.start_as_current_span("retrieval kb") as span:
                span.set_attribute("gen_ai.operation.name", "retrieval")
                span.set_attribute("gen_ai.retrieval.documents", documents)
                span.set_attribute("gen_ai.retrieval.query.text", "the question")
            with tracer.start_as_current_span("chat legacy") as span:
                span.set_attributes(
                    {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.system": "anthropic",
                        "gen_ai.request.model": "claude-sonnet-4",
                        "gen_ai.response.model": "claude-sonnet-4-20250514",
                        "gen_ai.usage.prompt_tokens": 100,
                        "gen_ai.usage.completion_tokens": 10,
                        "gen_ai.response.time_to_first_chunk": 0.25,
                        "gen_ai.request.temperature": 0.2,
                    }
                )
            with tracer.start_as_current_span("embeddings") as span:
                span.set_attribute("gen_ai.operation.name", "embeddings")
                span.set_attribute("gen_ai.request.model", "some-private-model")
                span.set_attribute("gen_ai.usage.input_tokens", 12)
                span.set_attribute("error.type", "timeout")
                span.set_status(Status(StatusCode.ERROR, "upstream timed out"))
            span = tracer.start_span("execute_tool lookup")
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.call.arguments", '{"q": 1}')
            span.record_exception(KeyError("missing"))
            span.set_status(Status(StatusCode.ERROR))
            span.end()

    got = normalise(store, sdk_request(emit))
    root = got["invoke_workflow"]
    assert root["stage"] == "request" and (root["user"], root["session"]) == ("u-7", "sess-7")
    retrieval = got["retrieval kb"]
    assert retrieval["stage"] == "search" and retrieval["retrieved_ids"] == ["a", "b"]
    assert retrieval["retrieved_scores"] == approx_list([0.9, 0.4])
    assert retrieval["top1_score"] == pytest.approx(0.9) and retrieval["similarity_gap"] == pytest.approx(0.5)
    assert retrieval["content"] == {"gen_ai.retrieval.query.text": "the question"}
    chat = got["chat legacy"]
    assert (chat["provider"], chat["model"]) == ("anthropic", "claude-sonnet-4-20250514")
    assert (chat["input_tokens"], chat["output_tokens"]) == (100, 10)
    assert chat["cost_usd"] == pytest.approx(100 * 3.0 / 1e6 + 10 * 15.0 / 1e6)  # date suffix resolved
    assert chat["ttft_ms"] == pytest.approx(250.0)
    assert chat["attributes"] == {"gen_ai.request.temperature": "0.2"}  # non-strings JSON-encoded
    embed = got["embeddings"]
    assert embed["stage"] == "embed" and embed["cost_usd"] is None  # unknown model: NULL, not 0
    assert (embed["status"], embed["error_type"]) == ("error", "timeout")
    assert embed["attributes"]["otel.status_description"] == "upstream timed out"
    tool = got["execute_tool lookup"]
    assert tool["stage"] == "tool" and tool["error_type"] == "KeyError"
    assert tool["attributes"]["exception.message"] == "'missing'"
    assert "KeyError" in tool["content"]["exception.stacktrace"]
    assert tool["content"]["gen_ai.tool.call.arguments"] == '{"q": 1}'


def test_openinference_dialect(store: SqlStore) -> None:
    def emit(tracer: Any) -> None:
        with tracer.start_as_current_span("query") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", "what is otel?")
            root.set_attribute("output.value", "a standard")
            with tracer.start_as_current_span("embed") as span:
                span.set_attribute("openinference.span.kind", "EMBEDDING")
                span.set_attribute("embedding.model_name", "text-embedding-3-small")
                span.set_attribute("embedding.embeddings.0.embedding.text", "what is otel?")
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                for i, (doc, score) in enumerate([("x1", 0.8), ("x2", 0.6), ("x3", 0.2)]):
                    span.set_attribute(f"retrieval.documents.{i}.document.id", doc)
                    span.set_attribute(f"retrieval.documents.{i}.document.score", score)
                    span.set_attribute(f"retrieval.documents.{i}.document.content", f"text of {doc}")
            with tracer.start_as_current_span("rerank") as span:
                span.set_attribute("openinference.span.kind", "RERANKER")
                span.set_attribute("reranker.model_name", "rerank-v3.5")
                span.set_attribute("reranker.query", "what is otel?")
                span.set_attribute("reranker.input_documents.0.document.id", "x1")
                span.set_attribute("reranker.output_documents.0.document.id", "x3")
                span.set_attribute("reranker.output_documents.0.document.score", 0.99)
                span.set_attribute("reranker.output_documents.1.document.id", "x1")
                span.set_attribute("reranker.output_documents.1.document.score", 0.5)
            with tracer.start_as_current_span("llm") as span:
                span.set_attribute("openinference.span.kind", "LLM")
                span.set_attribute("llm.model_name", "gpt-4o")
                span.set_attribute("llm.provider", "openai")
                span.set_attribute("llm.token_count.prompt", 500)
                span.set_attribute("llm.token_count.completion", 50)
                span.set_attribute("llm.token_count.total", 550)
                span.set_attribute("llm.cost.total", 0.0042)
                span.set_attribute("llm.input_messages.0.message.content", "hi")
                span.set_attribute("user.id", "oi-user")

    got = normalise(store, sdk_request(emit, "phoenix-app"))
    root = got["query"]
    assert root["stage"] == "request" and root["feature"] == "phoenix-app"
    assert root["content"] == {"input.value": "what is otel?", "output.value": "a standard"}
    embed = got["embed"]
    assert embed["stage"] == "embed" and embed["model"] == "text-embedding-3-small"
    assert embed["content"] == {"embedding.embeddings.0.embedding.text": "what is otel?"}
    retrieve = got["retrieve"]
    assert retrieve["stage"] == "search" and retrieve["retrieved_ids"] == ["x1", "x2", "x3"]
    assert retrieve["retrieved_scores"] == approx_list([0.8, 0.6, 0.2])
    assert retrieve["similarity_gap"] == pytest.approx(0.6)
    assert retrieve["content"]["retrieval.documents.1.document.content"] == "text of x2"
    assert retrieve["attributes"] == {}
    rerank = got["rerank"]
    assert rerank["stage"] == "rerank" and rerank["model"] == "rerank-v3.5"
    assert rerank["retrieved_ids"] == ["x3", "x1"] and rerank["retrieved_scores"] == approx_list([0.99, 0.5])
    assert rerank["attributes"] == {"reranker.input_documents.0.document.id": "x1"}
    assert rerank["content"] == {"reranker.query": "what is otel?"}
    llm = got["llm"]
    assert (llm["stage"], llm["model"], llm["provider"]) == ("generate", "gpt-4o", "openai")
    assert (llm["input_tokens"], llm["output_tokens"], llm["cost_usd"]) == (500, 50, 0.0042)
    assert llm["user"] == "oi-user" and llm["content"] == {"llm.input_messages.0.message.content": "hi"}


def test_openllmetry_dialect(store: SqlStore) -> None:
    def emit(tracer: Any) -> None:
        with tracer.start_as_current_span("rag.workflow") as root:
            root.set_attribute("traceloop.span.kind", "workflow")
            root.set_attribute("traceloop.entity.input", '{"q": "x"}')
            with tracer.start_as_current_span("openai.chat") as span:
                span.set_attribute("llm.request.type", "chat")
                span.set_attribute("gen_ai.system", "openai")
                span.set_attribute("gen_ai.request.model", "gpt-4o-mini")
                span.set_attribute("gen_ai.usage.prompt_tokens", 10)
                span.set_attribute("gen_ai.usage.completion_tokens", 5)
                span.set_attribute("gen_ai.prompt.0.content", "hello")
                span.set_attribute("gen_ai.completion.0.content", "hi!")
            with tracer.start_as_current_span("lookup.tool") as span:
                span.set_attribute("traceloop.span.kind", "tool")
            with tracer.start_as_current_span("some.task") as span:
                span.set_attribute("traceloop.span.kind", "task")

    got = normalise(store, sdk_request(emit))
    assert got["rag.workflow"]["stage"] == "request"
    assert got["rag.workflow"]["content"] == {"traceloop.entity.input": '{"q": "x"}'}
    chat = got["openai.chat"]
    assert (chat["stage"], chat["provider"], chat["model"]) == ("generate", "openai", "gpt-4o-mini")
    assert (chat["input_tokens"], chat["output_tokens"]) == (10, 5)
    assert chat["content"] == {"gen_ai.prompt.0.content": "hello", "gen_ai.completion.0.content": "hi!"}
    assert chat["attributes"] == {}
    assert got["lookup.tool"]["stage"] == "tool"
    assert got["some.task"]["stage"] == "other"


def test_resource_feature_and_kept_resource_attributes(store: SqlStore) -> None:
    def emit(tracer: Any) -> None:
        with tracer.start_as_current_span("child-less root"):
            pass

    request = sdk_request(emit, "svc", **{"ragmon.feature": "billing", "service.version": "2.1"})
    row = normalise(store, request)["child-less root"]
    assert row["feature"] == "billing" and row["service"] == "svc"
    assert row["attributes"] == {"service.version": "2.1"}


def test_document_ids_that_are_numbers_or_a_json_text_list(store: SqlStore) -> None:
    # Ids are text: numbers become their JSON text; some SDKs flatten a list into a JSON string, read the same way.
    def emit(tracer: Any) -> None:
        with tracer.start_as_current_span("root"):
            with tracer.start_as_current_span("numbers") as span:
                span.set_attributes({"ragmon.retrieval.document_ids": [7, 12345678901], "ragmon.stage": "search"})
            with tracer.start_as_current_span("json text") as span:
                span.set_attribute("ragmon.retrieval.document_ids", '["a\\"b", 3, 1.5e3, null, "ü"]')
                span.set_attribute("ragmon.retrieval.document_scores", "[0.9, 0.8, 0.7, 0.6, 0.5]")
            with tracer.start_as_current_span("not a list") as span:
                span.set_attribute("ragmon.retrieval.document_ids", "d1")

    got = normalise(store, sdk_request(emit))
    assert got["numbers"]["retrieved_ids"] == ["7", "12345678901"] and got["numbers"]["retrieved_scores"] == []
    assert got["json text"]["retrieved_ids"] == ['a"b', "3", "1500", "null", "ü"]
    assert got["json text"]["retrieved_scores"] == approx_list([0.9, 0.8, 0.7, 0.6, 0.5])
    assert got["not a list"]["retrieved_ids"] == []


def test_a_span_key_in_the_reserved_namespace_is_dropped_and_spoofs_nothing(store: SqlStore) -> None:
    # The store files the exception event's attributes under NUL-prefixed keys; a span key there must not pose as one.
    def emit(tracer: Any) -> None:
        with tracer.start_as_current_span("root") as span:
            span.set_attribute("\0e:exception.type", "Spoofed")
            span.set_attribute("\0r:service.version", "9.9")
            span.set_attribute("kept", "yes")
            span.set_status(Status(StatusCode.ERROR))

    row = normalise(store, sdk_request(emit))["root"]
    assert row["attributes"] == {"kept": "yes"}
    assert row["error_type"] == "_OTHER"  # not "Spoofed"


def test_truncation_and_values_kept_verbatim(make_store: Any) -> None:
    hostile = "x'); DROP TABLE spans; --"

    def emit(tracer: Any) -> None:
        with tracer.start_as_current_span("root") as span:
            span.set_attribute("ragmon.feature", hostile)
            span.set_attribute("big", "y" * 500)
            span.set_attribute("flags", [True, False])
            span.set_attribute("count", 7)
            span.set_attribute("ragmon.answer", "z" * 300)

    store = make_store(max_attribute_chars=100, max_content_chars=200)
    row = normalise(store, sdk_request(emit))["root"]
    assert row["feature"] == hostile
    assert row["attributes"] == {"big": "y" * 100, "flags": "[true,false]", "count": "7"}
    assert row["content"] == {"ragmon.answer": "z" * 200}


def test_invalid_spans_are_rejected_individually_with_reasons(store: SqlStore) -> None:
    def emit(tracer: Any) -> None:
        for i in range(6):
            with tracer.start_as_current_span(f"s{i}"):
                pass

    request = sdk_request(emit)
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].trace_id = bytes(16)  # all zero
    spans[1].span_id = b"\x01\x02"  # wrong length
    spans[2].start_time_unix_nano = 0
    spans[3].end_time_unix_nano = spans[3].start_time_unix_nano - 1
    spans[4].parent_span_id = b"\x01" * 3
    result = validate(request)
    assert result.rejected_by_reason == {
        "invalid_trace_id": 1,
        "invalid_span_id": 1,
        "missing_start_time": 1,
        "end_before_start": 1,
        "invalid_parent_span_id": 1,
    }
    assert result.spans_total == 6 and result.spans_accepted == 1
    assert "rejected 5 of 6 spans" in result.error_message()
    store.insert([("t", result.body)])
    assert [row["name"] for row in store.spans()] == ["s5"]
    # The SQL filters by the same rules, even when handed the unvalidated body.
    raw = make_invalid_store_check(store, request)
    assert raw == ["s5"]


def test_cost_table_is_injectable_and_missing_usage_gives_null(make_store: Any) -> None:
    table = PriceTable("test", {"tiny": ModelPrice(input_per_1m=1.0, output_per_1m=2.0)})

    def emit(tracer: Any) -> None:
        with tracer.start_as_current_span("with usage") as span:
            span.set_attributes({"gen_ai.request.model": "tiny", "gen_ai.usage.input_tokens": 1_000_000})
        with tracer.start_as_current_span("no usage") as span:
            span.set_attribute("gen_ai.request.model", "tiny")

    got = normalise(make_store(prices=table), sdk_request(emit))
    assert got["with usage"]["cost_usd"] == pytest.approx(1.0)
    assert got["no usage"]["cost_usd"] is None


def test_otlp_json_converts_to_the_same_rows(store: SqlStore) -> None:
    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-svc"}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5B8EFFF798038103D269B633813FC60C",  # hex is case-insensitive
                                "spanId": "EEE19B7EC3C1B174",
                                "parentSpanId": "",
                                "name": "chat",
                                "kind": 3,
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": 1700000000250000000,
                                "status": {"code": 2, "message": "boom"},
                                "attributes": [
                                    {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                                    {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}},
                                    {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "1000"}},
                                    {"key": "gen_ai.usage.output_tokens", "value": {"intValue": 100}},
                                    {"key": "ratio", "value": {"doubleValue": 0.5}},
                                    {"key": "ok", "value": {"boolValue": True}},
                                    {"key": "tags", "value": {"arrayValue": {"values": [{"stringValue": "a"}]}}},
                                    {
                                        "key": "meta",
                                        "value": {
                                            "kvlistValue": {"values": [{"key": "k", "value": {"intValue": "1"}}]}
                                        },
                                    },
                                ],
                                "events": [
                                    {
                                        "name": "exception",
                                        "attributes": [
                                            {"key": "exception.type", "value": {"stringValue": "ValueError"}}
                                        ],
                                    }
                                ],
                            }
                        ]
                    }
                ],
            }
        ]
    }
    request, malformed = request_from_json(doc)
    assert malformed == 0
    row = normalise(store, request)["chat"]
    assert row["trace_id"] == "5b8efff798038103d269b633813fc60c" and row["span_id"] == "eee19b7ec3c1b174"
    assert row["service"] == "json-svc" and row["stage"] == "generate"
    assert (row["input_tokens"], row["output_tokens"]) == (1000, 100)
    assert row["cost_usd"] == pytest.approx(1000 * 2.5 / 1e6 + 100 * 10.0 / 1e6)
    assert row["duration_ms"] == pytest.approx(250.0)
    assert (row["status"], row["error_type"]) == ("error", "ValueError")
    assert row["attributes"] == {
        "ratio": "0.5",
        "ok": "true",
        "tags": '["a"]',
        "meta": '{"k":1}',
        "otel.status_description": "boom",
    }


def make_invalid_store_check(store: SqlStore, request: ExportTraceServiceRequest) -> list[str]:
    """Names of the spans the SQL keeps from `request` inserted as is (no validation), in a fresh insert."""
    before = {row["span_id"] for row in store.spans()}
    store.insert([("t", request.SerializeToString())])
    return [row["name"] for row in store.spans() if row["span_id"] not in before or row["ingest_seq"] == 2]
