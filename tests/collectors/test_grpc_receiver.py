"""The OTLP/gRPC receiver against the real OpenTelemetry OTLP/gRPC exporter and a raw grpcio stub."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from ragmon.collectors import Backpressure, ConsumerUnavailable, GrpcReceiver

from tests.collectors.collector_fakes import API_KEYS, RecordingConsumer, provider_with, sdk_request

AUTH = (("authorization", f"Bearer {API_KEYS['acme']}"),)


def rag_trace(tracer: Any) -> None:
    with tracer.start_as_current_span("rag.request") as root:
        root.set_attribute("ragmon.feature", "qa")
        root.set_attribute("ragmon.tenant", "globex")
        with tracer.start_as_current_span("chat") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.request.model", "gpt-4o-mini")
            span.set_attribute("gen_ai.usage.input_tokens", 100)


@pytest.fixture
def stub(grpc_receiver: GrpcReceiver) -> Iterator[trace_service_pb2_grpc.TraceServiceStub]:
    with grpc.insecure_channel(grpc_receiver.endpoint) as channel:
        yield trace_service_pb2_grpc.TraceServiceStub(channel)


def test_sdk_grpc_exporter_with_key_and_gzip(grpc_receiver: GrpcReceiver, consumer: RecordingConsumer) -> None:
    for compression in (grpc.Compression.NoCompression, grpc.Compression.Gzip):
        exporter = OTLPSpanExporter(
            endpoint=grpc_receiver.endpoint, insecure=True, headers=AUTH, compression=compression, timeout=5
        )
        provider = provider_with(exporter, "grpc-app")
        rag_trace(provider.get_tracer("test"))
        provider.shutdown()
    rows = consumer.rows()
    assert len(rows) == 4 and {row["tenant"] for row in rows} == {"acme"}
    chat = consumer.by_name()["chat"]
    assert (chat["stage"], chat["model"], chat["input_tokens"], chat["service"]) == (
        "generate",
        "gpt-4o-mini",
        100,
        "grpc-app",
    )
    assert chat["cost_usd"] == pytest.approx(100 * 0.15 / 1e6)
    assert grpc_receiver.counters.get("ragmon_receiver_spans_accepted_total", transport="grpc") == 4


def test_missing_or_wrong_key_is_unauthenticated(
    stub: trace_service_pb2_grpc.TraceServiceStub, consumer: RecordingConsumer
) -> None:
    request = sdk_request(rag_trace)
    for metadata in ((), (("x-api-key", "wrong"),)):
        with pytest.raises(grpc.RpcError) as caught:
            stub.Export(request, metadata=metadata, timeout=5)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    stub.Export(request, metadata=(("x-api-key", API_KEYS["globex"]),), timeout=5)
    assert {row["tenant"] for row in consumer.rows()} == {"globex"} and consumer.calls == 1


def test_partial_success(stub: trace_service_pb2_grpc.TraceServiceStub, consumer: RecordingConsumer) -> None:
    request = sdk_request(rag_trace)
    request.resource_spans[0].scope_spans[0].spans[0].trace_id = b"\x01" * 5
    response = stub.Export(request, metadata=AUTH, timeout=5)
    assert response.partial_success.rejected_spans == 1
    assert "invalid_trace_id=1" in response.partial_success.error_message
    assert len(consumer.rows()) == 1


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (Backpressure(1.5, "queue full"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (ConsumerUnavailable(3, "store down"), grpc.StatusCode.UNAVAILABLE),
    ],
)
def test_backpressure_carries_retry_info(
    stub: trace_service_pb2_grpc.TraceServiceStub, consumer: RecordingConsumer, error: Backpressure, code: Any
) -> None:
    consumer.push_back(error)
    with pytest.raises(grpc.RpcError) as caught:
        stub.Export(sdk_request(rag_trace), metadata=AUTH, timeout=5)
    assert caught.value.code() == code
    trailers = dict(caught.value.trailing_metadata())
    retry = error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
    assert retry.retry_delay.ToTimedelta().total_seconds() == error.retry_after_s
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert status.code == code.value[0] and status.details[0].Is(error_details_pb2.RetryInfo.DESCRIPTOR)
    assert consumer.rows() == []


def test_oversized_message_is_resource_exhausted(
    stub: trace_service_pb2_grpc.TraceServiceStub, consumer: RecordingConsumer
) -> None:
    def huge(tracer: Any) -> None:
        with tracer.start_as_current_span("big") as span:
            span.set_attribute("blob", "x" * (300 * 1024))

    with pytest.raises(grpc.RpcError) as caught:
        stub.Export(sdk_request(huge), metadata=AUTH, timeout=5, compression=grpc.Compression.Gzip)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # decompressed size is capped too
    assert consumer.calls == 0
