"""The OTLP/HTTP receiver against the real OpenTelemetry OTLP/HTTP exporter and raw HTTP clients."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from ragmon.collectors import Backpressure, CollectorCounters, ConsumerUnavailable, HttpReceiver, metrics_registry

from tests.collectors.collector_fakes import API_KEYS, RecordingConsumer, provider_with, sdk_request
from tests.support import prometheus

PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}


def export_with_sdk(receiver: HttpReceiver, emit: Any, headers: dict[str, str] | None = None, **kwargs: Any) -> None:
    exporter = OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces", headers=headers, timeout=5, **kwargs)
    provider = provider_with(exporter, "http-app")
    emit(provider.get_tracer("test"))
    provider.shutdown()


def rag_trace(tracer: Any) -> None:
    with tracer.start_as_current_span("rag.request") as root:
        root.set_attribute("ragmon.feature", "x'); DROP TABLE spans; --")
        root.set_attribute("ragmon.tenant", "globex")  # spoofing attempt: ignored
        with tracer.start_as_current_span("embeddings") as span:
            span.set_attribute("gen_ai.operation.name", "embeddings")
            span.set_attribute("gen_ai.request.model", "text-embedding-3-small")
        with tracer.start_as_current_span("retrieve") as span:
            span.set_attribute("openinference.span.kind", "RETRIEVER")
            span.set_attribute("retrieval.documents.0.document.id", "d1")
            span.set_attribute("retrieval.documents.0.document.score", 0.7)
        with tracer.start_as_current_span("llm") as span:
            span.set_attribute("traceloop.span.kind", "task")
            span.set_attribute("llm.request.type", "chat")
            span.set_attribute("gen_ai.usage.prompt_tokens", 3)


def protobuf_body(emit: Any = rag_trace) -> bytes:
    return bytes(sdk_request(emit).SerializeToString())


def status_message(response: httpx.Response) -> str:
    if response.headers["content-type"] == "application/json":
        return str(response.json()["message"])
    return str(status_pb2.Status.FromString(response.content).message)


def test_sdk_exporter_protobuf_and_gzip(http_receiver: HttpReceiver, consumer: RecordingConsumer) -> None:
    export_with_sdk(http_receiver, rag_trace)
    export_with_sdk(http_receiver, rag_trace, compression=Compression.Gzip)
    rows = consumer.rows()
    assert len(rows) == 8 and len(consumer.requests) == 8  # SimpleSpanProcessor: one span per export
    stages = {row["name"]: row["stage"] for row in rows}
    assert stages == {"rag.request": "request", "embeddings": "embed", "retrieve": "search", "llm": "generate"}
    root = consumer.by_name()["rag.request"]
    assert root["feature"] == "x'); DROP TABLE spans; --" and root["tenant"] == "default"
    assert root["service"] == "http-app"
    counters = http_receiver.counters
    assert counters.get("ragmon_receiver_spans_accepted_total", transport="http") == 8
    assert counters.get("ragmon_receiver_requests_total", transport="http", outcome="ok") == 8
    assert counters.get("ragmon_receiver_tenant_attributes_dropped_total") == 2


def test_api_key_stamps_tenant_and_missing_key_is_refused(
    keyed_http_receiver: HttpReceiver, consumer: RecordingConsumer
) -> None:
    export_with_sdk(keyed_http_receiver, rag_trace, headers={"Authorization": f"Bearer {API_KEYS['acme']}"})
    assert {row["tenant"] for row in consumer.rows()} == {"acme"}  # not "globex" from the span attribute
    url = f"{keyed_http_receiver.endpoint}/v1/traces"
    body = protobuf_body()
    with httpx.Client() as client:
        missing = client.post(url, content=body, headers=PROTOBUF)
        wrong = client.post(url, content=body, headers={**PROTOBUF, "Authorization": "Bearer nope"})
        by_header = client.post(url, content=body, headers={**PROTOBUF, "x-api-key": API_KEYS["globex"]})
    assert missing.status_code == 401 and wrong.status_code == 401
    assert "API key" in status_message(missing)
    assert by_header.status_code == 200
    assert [row["tenant"] for row in consumer.rows()].count("globex") == 4
    assert len(consumer.requests) == 5  # 4 single-span SDK exports + 1; the refused ones stored nothing
    assert (
        keyed_http_receiver.counters.get("ragmon_receiver_requests_total", transport="http", outcome="unauthenticated")
        == 2
    )


def test_json_body_and_partial_success(http_receiver: HttpReceiver, consumer: RecordingConsumer) -> None:
    good = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "name": "json-root",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001000000000",
        "attributes": [{"key": "ragmon.feature", "value": {"stringValue": "qa"}}],
    }
    bad_ids = {**good, "name": "bad", "traceId": "00000000000000000000000000000000"}
    bad_time = {**good, "name": "late", "spanId": "b7ad6b7169203332", "endTimeUnixNano": "1"}
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [good, bad_ids, bad_time]}]}]}
    with httpx.Client() as client:
        response = client.post(f"{http_receiver.endpoint}/v1/traces", content=json.dumps(doc), headers=JSON)
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    partial = response.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "2"
    assert "invalid_trace_id=1" in partial["errorMessage"] and "end_before_start=1" in partial["errorMessage"]
    assert consumer.by_name()["json-root"]["feature"] == "qa" and len(consumer.rows()) == 1


def test_protobuf_partial_success(http_receiver: HttpReceiver, consumer: RecordingConsumer) -> None:
    request = sdk_request(rag_trace)
    request.resource_spans[0].scope_spans[0].spans[0].span_id = bytes(8)
    with httpx.Client() as client:
        response = client.post(
            f"{http_receiver.endpoint}/v1/traces", content=request.SerializeToString(), headers=PROTOBUF
        )
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-protobuf"
    parsed = ExportTraceServiceResponse.FromString(response.content)
    assert parsed.partial_success.rejected_spans == 1
    assert "invalid_span_id=1" in parsed.partial_success.error_message
    assert len(consumer.rows()) == 3


def test_full_success_leaves_partial_success_unset(http_receiver: HttpReceiver) -> None:
    with httpx.Client() as client:
        response = client.post(f"{http_receiver.endpoint}/v1/traces", content=protobuf_body(), headers=PROTOBUF)
        empty_json = client.post(f"{http_receiver.endpoint}/v1/traces", content=b"{}", headers=JSON)
    assert response.status_code == 200
    assert not ExportTraceServiceResponse.FromString(response.content).HasField("partial_success")
    assert empty_json.status_code == 200 and empty_json.json() == {}


@pytest.mark.parametrize(
    ("body", "headers", "status", "fragment"),
    [
        (b"\xff\xff\xff\xff", PROTOBUF, 400, "protobuf"),
        (b'{"resourceSpans": [', JSON, 400, "not valid JSON"),
        (b'{"resourceSpans": 5}', JSON, 400, "expected an array"),
        (b"not gzip at all", {**PROTOBUF, "Content-Encoding": "gzip"}, 400, "invalid gzip"),
        (gzip.compress(b"x" * 100)[:-8], {**PROTOBUF, "Content-Encoding": "gzip"}, 400, "truncated gzip"),
        (b"a", {**PROTOBUF, "Content-Encoding": "br"}, 415, "Content-Encoding"),
        (b"a", {"Content-Type": "text/plain"}, 415, "Content-Type"),
    ],
)
def test_bad_bodies_are_answered_with_a_reason_and_store_nothing(
    http_receiver: HttpReceiver,
    consumer: RecordingConsumer,
    body: bytes,
    headers: dict[str, str],
    status: int,
    fragment: str,
) -> None:
    with httpx.Client() as client:
        response = client.post(f"{http_receiver.endpoint}/v1/traces", content=body, headers=headers)
        health = client.get(f"{http_receiver.endpoint}/health")  # same connection still usable
    assert response.status_code == status
    text = response.text if response.headers["content-type"] == "text/plain" else status_message(response)
    assert fragment in text
    assert health.status_code == 200 and consumer.calls == 0


def test_gzip_bomb_stops_at_the_cap(http_receiver: HttpReceiver, consumer: RecordingConsumer) -> None:
    bomb = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = bomb.compress(bytes(64 * 1024 * 1024)) + bomb.flush()  # 64 MiB of zeros in ~64 KiB
    assert len(body) < http_receiver.max_body_bytes
    with httpx.Client() as client:
        response = client.post(
            f"{http_receiver.endpoint}/v1/traces", content=body, headers={**PROTOBUF, "Content-Encoding": "gzip"}
        )
    assert response.status_code == 413 and "decompressed" in status_message(response)
    assert consumer.calls == 0


def test_oversized_body_is_refused_from_content_length(http_receiver: HttpReceiver) -> None:
    # Only the head is sent: the 413 must come from Content-Length, before any body byte is read.
    with socket.create_connection(("127.0.0.1", http_receiver.port), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            b"Content-Length: 999999999\r\n\r\n"
        )
        reply = sock.recv(65536)
    assert reply.startswith(b"HTTP/1.1 413 ")
    assert b"exceeds the limit" in reply and b"Connection: close" in reply


@pytest.mark.parametrize(
    ("error", "status", "retry_after"),
    [
        (Backpressure(2.5, "queue full"), 429, "3"),
        (ConsumerUnavailable(7, "store down"), 503, "7"),
        (RuntimeError("bug in consumer"), 503, "1"),
    ],
)
def test_backpressure_maps_to_retryable_status(
    http_receiver: HttpReceiver, consumer: RecordingConsumer, error: BaseException, status: int, retry_after: str
) -> None:
    consumer.push_back(error)
    with httpx.Client() as client:
        refused = client.post(f"{http_receiver.endpoint}/v1/traces", content=protobuf_body(), headers=PROTOBUF)
        retried = client.post(f"{http_receiver.endpoint}/v1/traces", content=protobuf_body(), headers=PROTOBUF)
    assert refused.status_code == status and refused.headers["retry-after"] == retry_after
    assert retried.status_code == 200 and len(consumer.rows()) == 4
    reason = {429: "throttled", 503: "unavailable"}[status] if not isinstance(error, RuntimeError) else "consumer_error"
    assert http_receiver.counters.get("ragmon_receiver_spans_refused_total", transport="http", reason=reason) == 4


def test_health_metrics_and_unknown_paths(http_receiver: HttpReceiver) -> None:
    with httpx.Client() as client:
        client.post(f"{http_receiver.endpoint}/v1/traces", content=protobuf_body(), headers=PROTOBUF)
        health = client.get(f"{http_receiver.endpoint}/health")
        metrics = client.get(f"{http_receiver.endpoint}/metrics")
        missing = client.get(f"{http_receiver.endpoint}/nope")
        wrong_method = client.get(f"{http_receiver.endpoint}/v1/traces")
    assert health.json() == {"status": "ok"}
    assert prometheus.value(metrics.text, "ragmon_receiver_spans_accepted_total", transport="http") == 4
    assert "# TYPE ragmon_receiver_requests_total counter" in metrics.text
    assert metrics.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert missing.status_code == 404 and wrong_method.status_code == 405


class KeptSource:
    """A part's collector, as the agent's are: families read from its own count when scraped."""

    def __init__(self) -> None:
        self.kept = 3

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("ragmon_sampler_kept", "Kept traces.", self.kept)


def test_extra_metrics_sources_and_port_in_use(consumer: RecordingConsumer) -> None:
    counters, source = CollectorCounters(), KeptSource()
    # As the agent does: the receiver's counters are in the registry it is given too, and are exposed once.
    registry = metrics_registry(counters, source)
    with HttpReceiver(consumer, port=0, counters=counters, extra_metrics=[registry]) as receiver:
        metrics = httpx.get(f"{receiver.endpoint}/metrics").text
        assert prometheus.value(metrics, "ragmon_sampler_kept_total") == 3
        assert metrics.count("# TYPE ragmon_receiver_requests_total counter") == 1
        source.kept = 5  # read at scrape time
        assert prometheus.value(httpx.get(f"{receiver.endpoint}/metrics").text, "ragmon_sampler_kept_total") == 5
        openmetrics = httpx.get(
            f"{receiver.endpoint}/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        assert openmetrics.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
        assert openmetrics.text.endswith("# EOF\n")
        parsed = {f.name: f for f in openmetrics_families(openmetrics.text)}
        assert parsed["ragmon_sampler_kept"].samples[0].value == 5
        with pytest.raises(OSError):
            HttpReceiver(consumer, port=receiver.port).start()  # fail fast at start-up


def test_keep_alive_and_pipelined_requests(http_receiver: HttpReceiver, consumer: RecordingConsumer) -> None:
    body = protobuf_body()
    head = (
        f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", http_receiver.port), timeout=5) as sock:
        sock.sendall(head + body + head + body + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        replies = b""
        while chunk := sock.recv(65536):
            replies += chunk
    assert replies.count(b"HTTP/1.1 200 OK") == 3 and replies.endswith(b'{"status":"ok"}\n')
    assert len(consumer.requests) == 2


# --- chunked bodies, early refusals and the lingering close ---------------------------------------------------------
HEAD = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
CHUNKED_HEAD = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"


def chunked(*parts: bytes, trailer: bytes = b"") -> bytes:
    """A chunked body: one chunk per part (the first with a chunk extension, which must be ignored), a trailer."""
    chunks = [b"%x%s\r\n%s\r\n" % (len(p), b";ext=1" if i == 0 else b"", p) for i, p in enumerate(parts) if p]
    return b"".join(chunks) + b"0\r\n" + trailer + b"\r\n"


class RawClient:
    """A socket that reads back whole responses (the receiver always sends Content-Length)."""

    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.buffer = b""

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def response(self, *, head_only: bool = False) -> tuple[int, dict[str, str], bytes]:
        """The next response; `head_only` for an answer to HEAD (Content-Length without a body)."""
        while b"\r\n\r\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            assert chunk, f"connection closed before a response: {self.buffer[:200]!r}"
            self.buffer += chunk
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
        length = 0 if head_only else int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            self.buffer += self.sock.recv(65536)
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(status_line.split(" ")[1]), headers, body

    def closed_by_server(self, wait_s: float = 5.0) -> bool:
        self.sock.settimeout(wait_s)
        try:
            return self.sock.recv(65536) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True


def test_chunked_bodies_are_delivered_byte_for_byte_and_pipelined(
    http_receiver: HttpReceiver, consumer: RecordingConsumer
) -> None:
    body = protobuf_body()
    compressed = gzip.compress(body)
    third = len(body) // 3
    with RawClient(http_receiver.port) as client:
        client.sock.sendall(
            CHUNKED_HEAD
            + chunked(body[:third], body[third : 2 * third], body[2 * third :], trailer=b"X-Checksum: 1\r\n")
            + HEAD.replace(b"\r\nContent-Type", b"\r\nContent-Encoding: gzip\r\nContent-Type")
            + b"Transfer-Encoding: chunked\r\n\r\n"
            + chunked(compressed[:10], compressed[10:])
            + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        statuses = [client.response()[0] for _ in range(3)]
        assert client.closed_by_server()
    assert statuses == [200, 200, 200]
    assert [request[1] for request in consumer.requests] == [body, body]  # the gzip one decompressed
    # httpx sends a body given as an iterator chunked, as the OpenTelemetry JS exporters do.
    with httpx.Client() as http:
        response = http.post(
            f"{http_receiver.endpoint}/v1/traces", content=iter([body[:100], body[100:]]), headers=PROTOBUF
        )
    assert response.status_code == 200 and consumer.requests[-1][1] == body
    assert http_receiver.counters.get("ragmon_receiver_requests_total", transport="http", outcome="ok") == 3


def test_chunked_body_over_the_limit_is_refused_while_the_client_still_sends(http_receiver: HttpReceiver) -> None:
    piece = bytes(64 * 1024)
    over = http_receiver.max_body_bytes // len(piece) + 1
    with RawClient(http_receiver.port) as client:
        client.sock.sendall(CHUNKED_HEAD + b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(over)))
        status, headers, body = client.response()  # no last chunk sent: the answer cannot wait for it
        assert status == 413 and headers["connection"] == "close"
        assert "exceeds the limit" in status_pb2.Status.FromString(body).message
        client.sock.sendall(piece * 32)  # the server keeps reading and dropping: no reset while we send
        assert client.closed_by_server()
    assert http_receiver.counters.get("ragmon_receiver_requests_total", transport="http", outcome="too_large") == 1


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_64_mib_upload_gets_413_not_a_connection_error(consumer: RecordingConsumer, framing: str) -> None:
    """Closing at once over unread bytes makes the kernel reset the connection, and exporters retry a reset as
    transient; the lingering close lets the client finish sending and read the 413. The raw socket sends the
    whole body before reading, as a client that does not watch for an early answer does (httpx copes with a reset
    by reading the answer anyway; plain sockets, and Node.js, see the reset)."""
    body = bytes(64 * 1024 * 1024)
    with HttpReceiver(consumer, port=0, max_body_bytes=16 * 1024 * 1024) as receiver:
        if framing == "content-length":
            raw = HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body
        else:
            piece = body[: 1024 * 1024]
            raw = CHUNKED_HEAD + b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(64)) + b"0\r\n\r\n"
        with RawClient(receiver.port, timeout_s=30) as client:
            client.sock.sendall(raw)
            assert client.response()[0] == 413
            assert client.closed_by_server()
        pieces = (body[at : at + 1024 * 1024] for at in range(0, len(body), 1024 * 1024))
        content = body if framing == "content-length" else pieces
        response = httpx.post(f"{receiver.endpoint}/v1/traces", content=content, headers=PROTOBUF, timeout=30)
        assert response.status_code == 413
        assert receiver.counters.get("ragmon_receiver_requests_total", transport="http", outcome="too_large") == 2
    assert consumer.calls == 0


def test_the_lingering_close_is_bounded(http_receiver: HttpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    from ragmon.collectors import http_server as module

    monkeypatch.setattr(module, "_LINGER_QUIET_S", 0.3)
    monkeypatch.setattr(module, "_LINGER_MAX_BYTES", 1024 * 1024)
    refused = HEAD + b"Content-Length: 999999999\r\n\r\n"
    with RawClient(http_receiver.port) as silent, RawClient(http_receiver.port) as endless:
        silent.sock.sendall(refused)
        endless.sock.sendall(refused)
        assert silent.response()[0] == 413 and endless.response()[0] == 413
        with pytest.raises((ConnectionResetError, BrokenPipeError)):  # dropped past the byte cap, then reset
            for _ in range(1024):  # up to 64 MiB: what the kernel buffers on both sides, the RST comes after
                endless.sock.sendall(bytes(64 * 1024))
        deadline = time.monotonic() + 3.0  # the silent one is closed after the quiet time
        while http_receiver.server.open_connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not http_receiver.server.open_connections


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (HEAD + b"\r\n", 411),  # neither Content-Length nor chunked
        (HEAD + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),  # smuggling pattern
        (HEAD + b"Transfer-Encoding: gzip\r\n\r\n", 501),
        (CHUNKED_HEAD + b"zz\r\nabc\r\n0\r\n\r\n", 400),  # not a chunk size
        (CHUNKED_HEAD + b"3\r\nabcX\r\n0\r\n\r\n", 400),  # chunk longer than its size
        (b"POST /v1/traces HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 400),  # HTTP/1.1 without Host
    ],
    ids=["no-framing", "length-and-chunked", "unknown-coding", "bad-chunk-size", "bad-chunk-end", "no-host"],
)
def test_framing_errors_are_answered_and_close(http_receiver: HttpReceiver, raw: bytes, status: int) -> None:
    with RawClient(http_receiver.port) as client:
        client.sock.sendall(raw)
        assert client.response()[0] == status
        assert client.closed_by_server()
    assert httpx.get(f"{http_receiver.endpoint}/health").status_code == 200


def test_expect_100_continue(keyed_http_receiver: HttpReceiver, consumer: RecordingConsumer) -> None:
    body = protobuf_body()
    key = f"x-api-key: {API_KEYS['acme']}\r\nExpect: 100-continue\r\n".encode()
    with RawClient(keyed_http_receiver.port) as client:
        client.sock.sendall(HEAD + key + b"Content-Length: %d\r\n\r\n" % len(body))
        assert client.response()[0] == 100  # only now is the body sent
        client.sock.sendall(body)
        assert client.response()[0] == 200
        client.sock.sendall(HEAD + key + b"Transfer-Encoding: chunked\r\n\r\n")
        assert client.response()[0] == 100
        client.sock.sendall(chunked(body))
        assert client.response()[0] == 200
    with RawClient(keyed_http_receiver.port) as client:
        client.sock.sendall(HEAD + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        assert client.response()[0] == 401  # refused without asking for the body, and closed
        assert client.closed_by_server()
    assert [request[1] for request in consumer.requests] == [body, body]


class GatedConsumer:
    """Holds every consume() until `gate` is set, so the body stays in flight."""

    def __init__(self, inner: RecordingConsumer) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.gate = threading.Event()

    def consume(self, tenant: str, body: bytes, spans: int) -> None:
        self.entered.set()
        self.gate.wait(10)
        self.inner.consume(tenant, body, spans)


def released(receiver: HttpReceiver, within_s: float = 2.0) -> bool:
    """Whether the in-flight budget is back to 0 (the loop releases it just after writing the answer)."""
    deadline = time.monotonic() + within_s
    while receiver.server.inflight_bytes and time.monotonic() < deadline:
        time.sleep(0.01)
    return receiver.server.inflight_bytes == 0


def test_chunked_bytes_count_against_the_inflight_budget(consumer: RecordingConsumer) -> None:
    gated = GatedConsumer(consumer)
    body = protobuf_body()
    with HttpReceiver(gated, port=0, max_inflight_bytes=len(body) + 1000) as receiver:
        held = RawClient(receiver.port)
        held.sock.sendall(HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        assert gated.entered.wait(5)
        with RawClient(receiver.port) as client:
            client.sock.sendall(CHUNKED_HEAD + b"%x\r\n%s\r\n" % (2000, bytes(2000)))  # over what is left
            status, headers, _ = client.response()
            assert status == 503 and headers["retry-after"] == "1"
            assert client.closed_by_server()
        gated.gate.set()
        assert held.response()[0] == 200
        held.sock.close()
        assert released(receiver)  # every reservation, the refused chunked one's too
        response = httpx.post(f"{receiver.endpoint}/v1/traces", content=iter([body]), headers=PROTOBUF)
        assert response.status_code == 200 and released(receiver)
    assert receiver.counters.get("ragmon_receiver_requests_total", transport="http", outcome="overloaded") == 1
    assert len(consumer.requests) == 2


def test_a_slow_chunked_body_times_out(consumer: RecordingConsumer) -> None:
    with HttpReceiver(consumer, port=0, read_timeout_s=0.5) as receiver, RawClient(receiver.port) as client:
        client.sock.sendall(CHUNKED_HEAD + b"4\r\nabcd\r\n")  # and then nothing
        assert client.response()[0] == 408
        assert client.closed_by_server()
        assert released(receiver)
    assert consumer.calls == 0


def test_head_carries_the_get_headers_without_a_body(http_receiver: HttpReceiver) -> None:
    with RawClient(http_receiver.port) as client:
        client.sock.sendall(b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, body = client.response(head_only=True)
        assert status == 200 and body == b"" and headers["content-length"] == str(len(b'{"status":"ok"}\n'))
        assert client.response() == (200, headers, b'{"status":"ok"}\n')  # so the next answer is read right


def test_a_request_followed_by_a_half_close_is_answered(
    http_receiver: HttpReceiver, consumer: RecordingConsumer
) -> None:
    """A client that shuts down its sending side after its request (`nc -N`, some proxies) still reads the
    answer: the export is acknowledged to it, not only stored."""
    body = protobuf_body()
    head = f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: {len(body)}"
    with socket.create_connection(("127.0.0.1", http_receiver.port), timeout=30) as sock:
        sock.sendall(head.encode() + b"\r\n\r\n" + body)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert consumer.calls == 1
