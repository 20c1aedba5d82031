"""Shared fakes for the collectors' tests: a recording consumer and helpers that make spans with the real
OpenTelemetry SDK (synchronous export, so a test never waits for a background thread)."""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from tests.collectors.sql_store import SqlStore

API_KEYS = {"acme": "key-acme-0123456789", "globex": "key-globex-9876543210"}


class RecordingConsumer:
    """Keeps every (tenant, body, spans) it is given; can be told to push back (raise) for the next N calls.

    `rows()` normalises what it kept through a `SqlStore` — the same SQL the agent's store runs.
    """

    def __init__(self, store: SqlStore | None = None) -> None:
        self.store = store
        self.requests: list[tuple[str, bytes, int]] = []
        self.calls = 0
        self.fail_with: list[BaseException] = []
        self._lock = threading.Lock()
        self._stored = 0

    def consume(self, tenant: str, body: bytes, spans: int) -> None:
        with self._lock:
            self.calls += 1
            if self.fail_with:
                raise self.fail_with.pop(0)
            self.requests.append((tenant, body, spans))

    def push_back(self, error: BaseException, times: int = 1) -> None:
        with self._lock:
            self.fail_with.extend([error] * times)

    @property
    def spans(self) -> int:
        with self._lock:
            return sum(spans for _, _, spans in self.requests)

    def _flush(self) -> SqlStore:
        assert self.store is not None, "RecordingConsumer needs a SqlStore to normalise"
        with self._lock:
            pending = self.requests[self._stored :]
            self._stored = len(self.requests)
        if pending:
            self.store.insert((tenant, body) for tenant, body, _ in pending)
        return self.store

    def rows(self) -> list[dict[str, Any]]:
        """The received spans, normalised, as dicts (column -> value)."""
        return self._flush().spans()

    def by_name(self) -> dict[str, dict[str, Any]]:
        return self._flush().by_name()


class MemoryExporter(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def provider_with(exporter: SpanExporter, service: str = "rag-api", **resource: Any) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service, **resource}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def sdk_request(emit: Any, service: str = "rag-api", **resource: Any) -> ExportTraceServiceRequest:
    """Run `emit(tracer)` under the real SDK and encode its spans as the OTLP exporters do."""
    exporter = MemoryExporter()
    provider = provider_with(exporter, service, **resource)
    emit(provider.get_tracer("test"))
    provider.shutdown()
    return encode_spans(exporter.spans)
