"""Kept RAG traces with their text, as OTLP/HTTP request bodies, for the judging tests: every trace has an error
on its chat span, so the default sampler keeps it whatever its latency (the judges then have something to read)."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from ragmon.otlp_encoding import encode_spans


def kept_traces(
    n: int, *, per_request: int = 10, offset: int = 0, resource: dict[str, str] | None = None
) -> tuple[list[bytes], list[str]]:
    """(request bodies, trace ids) of `n` error traces with a question, a passage and an answer; `resource`: more
    resource attributes (e.g. the release, `service.version`)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "judging-test", **(resource or {})}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("judging-test")
    bodies: list[bytes] = []
    trace_ids: list[str] = []
    for i in range(offset, offset + n):
        root = tracer.start_span(
            "request docs-qa",
            attributes={
                "ragmon.stage": "request",
                "ragmon.feature": "docs-qa",
                "ragmon.question": f"When was the Eiffel Tower completed? ({i})",
                "ragmon.answer": "It was completed in 1889.",
            },
        )
        trace_ids.append(format(root.get_span_context().trace_id, "032x"))
        context = trace_api.set_span_in_context(root)
        retrieval = tracer.start_span(
            "retrieval docs",
            context=context,
            attributes={
                "gen_ai.operation.name": "retrieval",
                "ragmon.feature": "docs-qa",
                "gen_ai.retrieval.documents": json.dumps([{"id": f"d{i}", "score": 0.9}]),
                "ragmon.retrieval.document_texts": (f"The Eiffel Tower was completed in 1889. (source {i})",),
            },
        )
        retrieval.end()
        chat = tracer.start_span("chat", context=context, attributes={"gen_ai.operation.name": "chat"})
        chat.set_status(Status(StatusCode.ERROR, "boom"))  # an error trace: always kept
        chat.end()
        root.end()
        if len(exporter.get_finished_spans()) >= 3 * per_request:
            bodies.append(encode_spans(exporter.get_finished_spans()))
            exporter.clear()
    if exporter.get_finished_spans():
        bodies.append(encode_spans(exporter.get_finished_spans()))
    provider.shutdown()
    return bodies, trace_ids


def post(otlp_http: str, bodies: list[bytes]) -> None:
    """Send each body to an agent's OTLP/HTTP receiver; each must be acknowledged (200)."""
    for body in bodies:
        request = urllib.request.Request(
            f"{otlp_http}/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200


def wait_until(predicate: Callable[[], bool], timeout_s: float = 60.0, what: str = "condition") -> None:
    """Poll `predicate` (a state the system reaches, not a time to wait) until it holds."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
