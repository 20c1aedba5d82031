"""The OTLP/gRPC receiver against the real OpenTelemetry OTLP/gRPC exporter and a raw grpcio stub."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.sdk.trace.export import SpanExportResult
from ragmon.collectors import Backpressure, ConsumerUnavailable, GrpcReceiver
from ragmon.collectors.auth import ApiKeyAuth

from tests.collectors.collector_fakes import (
    API_KEYS,
    MemoryExporter,
    RecordingConsumer,
    provider_with,
    sdk_request,
)

AUTH = (("authorization", f"Bearer {API_KEYS['acme']}"),)
_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


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
    # Not retryable: the same message cannot fit next time, so no RetryInfo (exporters retry only with it).
    trailers = dict(caught.value.trailing_metadata() or ())
    assert "google.rpc.retryinfo-bin" not in trailers and "grpc-status-details-bin" not in trailers
    assert consumer.calls == 0


class HeldConsumer(RecordingConsumer):
    """Keeps each export inside `consume` until `release` is set, so a test fills the receiver without timing."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.inside = threading.Semaphore(0)

    def consume(self, tenant: str, body: bytes, spans: int) -> None:
        self.inside.release()
        assert self.release.wait(30), "the test never released the consumer"
        super().consume(tenant, body, spans)


def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait for a state another thread reaches (a bound for a broken receiver, not a guess at its speed)."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _held_receiver(consumer: HeldConsumer, **options: Any) -> GrpcReceiver:
    return GrpcReceiver(consumer, port=0, auth=ApiKeyAuth(API_KEYS), **options).start()


def test_over_the_concurrency_cap_the_answer_carries_retry_info() -> None:
    consumer = HeldConsumer()
    # One worker and room for two: the first RPC runs (held), the second waits for the worker, the third is over.
    receiver = _held_receiver(consumer, worker_threads=1, max_concurrent_rpcs=2, busy_retry_after_s=1.5)
    try:
        with grpc.insecure_channel(receiver.endpoint) as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            request = sdk_request(rag_trace)
            admitted = [stub.Export.future(request, metadata=AUTH, timeout=30) for _ in range(2)]
            assert consumer.inside.acquire(timeout=30)
            _until(lambda: receiver.rpcs_in_progress == 2, "the second RPC to wait for the worker")
            with pytest.raises(grpc.RpcError) as caught:
                stub.Export(request, metadata=AUTH, timeout=30)
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            trailers = dict(caught.value.trailing_metadata())
            retry = error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
            assert retry.retry_delay.ToTimedelta().total_seconds() == 1.5
            status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
            assert status.details[0].Is(error_details_pb2.RetryInfo.DESCRIPTOR)
            assert consumer.calls == 0  # the refused RPC never reached the consumer (nor a worker)

            consumer.release.set()
            for future in admitted:
                future.result(timeout=30)
            _until(lambda: receiver.rpcs_in_progress == 0, "the admitted RPCs to finish")
            stub.Export(request, metadata=AUTH, timeout=30)  # room again
    finally:
        consumer.release.set()
        receiver.stop(timeout_s=2.0)
    assert consumer.calls == 3
    assert receiver.counters.get("ragmon_receiver_requests_total", transport="grpc", outcome="overloaded") == 1
    assert receiver.counters.get("ragmon_receiver_requests_total", transport="grpc", outcome="ok") == 3


def test_a_refusal_does_not_wait_for_the_message() -> None:
    """A client over the cap that is slow to send (here: never, until told) is refused at once, and does not hold
    up the refusal of the next one."""
    consumer = HeldConsumer()
    receiver = _held_receiver(consumer, worker_threads=1, max_concurrent_rpcs=1)
    sending = threading.Event()

    def slow_body() -> Iterator[bytes]:
        sending.wait(30)
        yield sdk_request(rag_trace).SerializeToString()

    try:
        with grpc.insecure_channel(receiver.endpoint) as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            holder = stub.Export.future(sdk_request(rag_trace), metadata=AUTH, timeout=30)
            assert consumer.inside.acquire(timeout=30)
            # The same method as a client-streaming call: the message is sent only once `sending` is set.
            export = channel.stream_unary(_EXPORT, request_serializer=None, response_deserializer=None)
            slow = export.future(slow_body(), metadata=AUTH, timeout=30)
            error = slow.exception(timeout=30)
            assert isinstance(error, grpc.RpcError) and not sending.is_set()
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "google.rpc.retryinfo-bin" in dict(error.trailing_metadata())
            with pytest.raises(grpc.RpcError) as caught:
                stub.Export(sdk_request(rag_trace), metadata=AUTH, timeout=30)
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            consumer.release.set()
            holder.result(timeout=30)
    finally:
        sending.set()
        consumer.release.set()
        receiver.stop(timeout_s=2.0)
    assert consumer.calls == 1


def test_the_sdk_exporter_waits_the_retry_info_delay_and_delivers(caplog: pytest.LogCaptureFixture) -> None:
    memory = MemoryExporter()
    rag_trace(provider_with(memory, "busy-app").get_tracer("test"))
    consumer = HeldConsumer()
    # 1.5 s: apart from the exporter's own backoff without RetryInfo (1 s, then 2 s, ± 20 %), and five retries of it
    # leave the released slot far more time to free than it needs.
    receiver = _held_receiver(consumer, worker_threads=1, max_concurrent_rpcs=1, busy_retry_after_s=1.5)
    results: list[SpanExportResult] = []
    try:
        with grpc.insecure_channel(receiver.endpoint) as channel:
            holder = trace_service_pb2_grpc.TraceServiceStub(channel).Export.future(
                sdk_request(rag_trace), metadata=AUTH, timeout=30
            )
            assert consumer.inside.acquire(timeout=30)  # the one slot is taken
            exporter = OTLPSpanExporter(endpoint=receiver.endpoint, insecure=True, headers=AUTH, timeout=20)
            caplog.set_level(logging.WARNING, "opentelemetry.exporter.otlp.proto.grpc.exporter")
            sending = threading.Thread(target=lambda: results.append(exporter.export(memory.spans)))
            sending.start()
            overloaded = ("ragmon_receiver_requests_total", {"transport": "grpc", "outcome": "overloaded"})
            _until(lambda: receiver.counters.get(overloaded[0], **overloaded[1]) >= 1, "the exporter to be refused")
            consumer.release.set()  # the slot frees while the exporter waits the RetryInfo delay
            holder.result(timeout=30)
            sending.join(30)
            exporter.shutdown()
    finally:
        consumer.release.set()
        receiver.stop(timeout_s=2.0)
    assert results == [SpanExportResult.SUCCESS]
    # It waited the delay the receiver asked for, not its own backoff.
    assert "retrying in 1.50s" in caplog.text
    assert consumer.spans == 4  # the held request's two spans and the exporter's two
