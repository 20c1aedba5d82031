"""The OTLP/HTTP receiver against the official OpenTelemetry exporters: JavaScript (Node.js, `js/send.js`, protobuf
and JSON, gzip on and off), Python, and the JavaScript one end to end into `ragmon serve`.

The JS exporters send every body with ``Transfer-Encoding: chunked`` (`otlp-exporter-base`'s `compressAndSend`
pipes a stream into the request, so Node.js cannot know the length, gzip or not); the receiver once answered that
411 and Node.js apps lost every span. A relay in front of the receiver keeps the bytes on the wire, so these tests
also check that the exporters still send chunked bodies, i.e. that they still test that regression.

The session installs the pinned npm packages (`npm ci` into js/node_modules, ignored by git); without `node` and
`npm` on PATH the JS tests are skipped, and a failing install fails them.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SpanExportResult
from ragmon.collectors import CollectorCounters, HttpReceiver

from tests.agent.harness import AgentProcess
from tests.collectors.collector_fakes import MemoryExporter, RecordingConsumer, provider_with

JS_DIR = Path(__file__).resolve().parent / "js"
SpanKey = tuple[str, str, str, str]  # trace id, span id, parent span id (hex, '' for a root), name


@pytest.fixture(scope="session")
def js_dir() -> Path:
    """js/ with its node_modules installed from package-lock.json, once per session."""
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        pytest.skip("node and npm must be on PATH to run the OpenTelemetry JS exporters (Node.js >= 20.6)")
    result = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"], cwd=JS_DIR, capture_output=True, text=True, timeout=600
    )
    if result.returncode != 0:
        pytest.fail(f"npm ci in {JS_DIR} failed ({result.returncode}):\n{result.stdout[-4000:]}{result.stderr[-4000:]}")
    return JS_DIR


def send_js(js_dir: Path, url: str, exporter: str, gzip: bool, spans: int, batch: int = 512) -> list[SpanKey]:
    """Run send.js; the spans it exported (it exits 0 only if every export succeeded)."""
    command = ["node", "send.js", "--exporter", exporter, "--gzip", "on" if gzip else "off", "--url", url]
    command += ["--spans", str(spans), "--batch", str(batch)]
    result = subprocess.run(command, cwd=js_dir, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"send.js failed ({result.returncode}): {result.stderr}"
    sent = json.loads(result.stdout)["spans"]
    assert len(sent) == spans
    return [(s["trace_id"], s["span_id"], s["parent_span_id"], s["name"]) for s in sent]


def received(consumer: RecordingConsumer) -> list[SpanKey]:
    out = []
    for _, body, _ in consumer.requests:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    out.append((s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name))
    return out


def assert_each_once(got: list[SpanKey], sent: list[SpanKey]) -> None:
    duplicated = [key for key, n in Counter(got).items() if n > 1]
    assert not duplicated, f"{len(duplicated)} spans arrived more than once, e.g. {duplicated[0]}"
    assert sorted(got) == sorted(sent)


class RecordingRelay:
    """A TCP relay in front of a port that keeps every byte the clients sent (one stream per connection)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = int(self.listener.getsockname()[1])
        self.streams: list[bytearray] = []
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._start(self._accept)

    def _start(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            client.settimeout(None)
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._sockets += [client, upstream]
            stream = bytearray()
            self.streams.append(stream)
            self._start(self._pump, client, upstream, stream)
            self._start(self._pump, upstream, client, None)

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket, record: bytearray | None) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if record is not None:
                    record += data  # before forwarding: by the time an answer comes back, its request is here
                target.sendall(data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)

    def request_heads(self) -> list[dict[str, str]]:
        """The header fields (names lower-cased) of every POST the clients sent, in order."""
        heads = []
        for stream in self.streams:
            for part in bytes(stream).split(b"POST /v1/traces HTTP/1.1\r\n")[1:]:
                lines = part.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
                heads.append({k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)})
        return heads

    def close(self) -> None:
        self._stopping.set()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(5)
        for sock in self._sockets:
            sock.close()
        self.listener.close()


@pytest.fixture
def receiver(consumer: RecordingConsumer, counters: CollectorCounters) -> Iterator[HttpReceiver]:
    """The receiver with the agent's default limits (16 MiB bodies): a batch of 512 spans in JSON is ~300 KB."""
    with HttpReceiver(consumer, port=0, counters=counters) as receiver:
        yield receiver


@pytest.fixture
def relay(receiver: HttpReceiver) -> Iterator[RecordingRelay]:
    relay = RecordingRelay(receiver.port)
    yield relay
    relay.close()


@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("exporter", ["proto", "json"])
def test_js_exporters_deliver_every_span_once(
    js_dir: Path,
    receiver: HttpReceiver,
    relay: RecordingRelay,
    consumer: RecordingConsumer,
    exporter: str,
    gzip: bool,
) -> None:
    sent = send_js(js_dir, f"http://127.0.0.1:{relay.port}/v1/traces", exporter, gzip, spans=600, batch=256)
    assert_each_once(received(consumer), sent)
    heads = relay.request_heads()
    assert len(heads) == 3 == len(consumer.requests)  # 256 + 256 + 88 spans
    content_type = "application/x-protobuf" if exporter == "proto" else "application/json"
    for head in heads:
        assert head.get("transfer-encoding") == "chunked" and "content-length" not in head, (
            f"the JS exporter no longer sends chunked bodies, so this test no longer covers them: {head}"
        )
        assert head["content-type"] == content_type
        assert head.get("content-encoding") == ("gzip" if gzip else None)
    assert len(relay.streams) == 1  # one kept-alive connection for the three requests
    rows = consumer.rows()  # through the store's normalising SQL: what the JS SDK put in the spans
    assert {row["service"] for row in rows} == {"js-rag-app"}
    chats = [row for row in rows if row["name"] == "chat gpt-4o-mini"]
    assert chats and all(r["model"] == "gpt-4o-mini" and r["input_tokens"] == 1000 for r in chats)
    assert receiver.counters.get("ragmon_receiver_spans_accepted_total", transport="http") == 600


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip], ids=["plain", "gzip"])
def test_python_exporter_delivers_every_span_once(
    receiver: HttpReceiver, relay: RecordingRelay, consumer: RecordingConsumer, compression: Compression
) -> None:
    memory = MemoryExporter()
    provider = provider_with(memory, "py-rag-app")
    tracer = provider.get_tracer("test")
    for _ in range(50):
        with tracer.start_as_current_span("rag.request"), tracer.start_as_current_span("chat gpt-4o-mini") as span:
            span.set_attribute("gen_ai.request.model", "gpt-4o-mini")
    provider.shutdown()
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{relay.port}/v1/traces", compression=compression)
    assert exporter.export(memory.spans[:60]) is SpanExportResult.SUCCESS
    assert exporter.export(memory.spans[60:]) is SpanExportResult.SUCCESS
    exporter.shutdown()  # type: ignore[no-untyped-call]  # (untyped in opentelemetry-exporter-otlp-proto-http)
    sent = [
        (
            f"{s.context.trace_id:032x}",
            f"{s.context.span_id:016x}",
            f"{s.parent.span_id:016x}" if s.parent else "",
            s.name,
        )
        for s in memory.spans
    ]
    assert_each_once(received(consumer), sent)
    heads = relay.request_heads()
    assert len(heads) == 2 and all("content-length" in head for head in heads)  # requests knows the length
    assert all(head.get("content-encoding") == ("gzip" if compression is Compression.Gzip else None) for head in heads)


@pytest.mark.slow
def test_js_spans_are_stored_once_by_ragmon_serve(js_dir: Path, tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path / "data", grpc=False).start()
    try:
        url = f"{agent.otlp_http}/v1/traces"
        sent = send_js(js_dir, url, "proto", gzip=True, spans=300) + send_js(js_dir, url, "json", gzip=False, spans=300)
        assert agent.wait_for("SELECT count() AS n FROM spans", len(sent)) == len(sent), agent.log()[-3000:]
        rows = agent.query("SELECT trace_id, span_id, parent_span_id, name, service FROM spans")
        assert_each_once([(r["trace_id"], r["span_id"], r["parent_span_id"], r["name"]) for r in rows], sent)
        assert {r["service"] for r in rows} == {"js-rag-app"}
    finally:
        agent.stop()
