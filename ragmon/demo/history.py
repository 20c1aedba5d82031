"""Synthetic history for `ragmon demo`: an hour of the demo app's own fault-free traffic, replayed into the past.

Drift detectors compare the current minutes with a baseline of many earlier minutes; a demo lasts seconds. So the
demo records a few dozen fault-free requests of the same app (its real OTLP export, caught by a loopback receiver),
then resamples whole traces from them into every minute of the past hour — new trace and span ids, start times
moved into that minute, durations, attributes and statuses unchanged — and sends them to the agent over OTLP like
any late spans. The replayed spans carry the service name `ragmon-demo-history`, so they are never mistaken for
the live run's (`ragmon-demo`) in the store.
"""

from __future__ import annotations

import gzip
import random
import threading
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

HISTORY_SERVICE = "ragmon-demo-history"
_TRACES_PER_REQUEST = 200


@dataclass(frozen=True)
class RecordedTrace:
    """One request's spans as the app exported them, with the resource and scope they came under."""

    resource: Resource
    scope: InstrumentationScope
    spans: tuple[Span, ...]

    @property
    def start_ns(self) -> int:
        return min(span.start_time_unix_nano for span in self.spans)


class _CaptureReceiver:
    """An OTLP/HTTP receiver on 127.0.0.1 that keeps every export request (protobuf) and answers 200."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                with receiver._lock:
                    receiver.requests.append(ExportTraceServiceRequest.FromString(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> _CaptureReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def record_traces(run_app: Callable[[str], object]) -> list[RecordedTrace]:
    """Run `run_app(endpoint)` against a capture receiver; return the traces it exported."""
    with _CaptureReceiver() as receiver:
        run_app(receiver.endpoint)
    by_trace: dict[bytes, list[tuple[Resource, InstrumentationScope, Span]]] = {}
    for request in receiver.requests:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    by_trace.setdefault(span.trace_id, []).append((resource_spans.resource, scope_spans.scope, span))
    return [
        RecordedTrace(spans_of[0][0], spans_of[0][1], tuple(span for _, _, span in spans_of))
        for spans_of in by_trace.values()
    ]


def _restamped(trace: RecordedTrace, start_ns: int, rng: random.Random) -> list[Span]:
    """A copy of the trace starting at `start_ns`, with fresh ids (parent links kept)."""
    shift_ns = start_ns - trace.start_ns
    trace_id = rng.getrandbits(128).to_bytes(16, "big")
    new_ids = {span.span_id: rng.getrandbits(64).to_bytes(8, "big") for span in trace.spans}
    out = []
    for original in trace.spans:
        span = Span()
        span.CopyFrom(original)
        span.trace_id = trace_id
        span.span_id = new_ids[original.span_id]
        if original.parent_span_id:
            span.parent_span_id = new_ids.get(original.parent_span_id, original.parent_span_id)
        span.start_time_unix_nano = original.start_time_unix_nano + shift_ns
        span.end_time_unix_nano = original.end_time_unix_nano + shift_ns
        out.append(span)
    return out


def history_requests(
    traces: Sequence[RecordedTrace], *, start_s: int, minutes: int, per_minute: int, seed: int = 0
) -> Iterator[bytes]:
    """OTLP request bodies for `minutes` minutes from `start_s`: `per_minute` traces drawn (with replacement) from
    `traces` per minute, each starting at a uniform time inside its minute (within its first 50 s, so that it
    ends inside it too)."""
    if not traces:
        raise ValueError("no recorded traces to replay")
    rng = random.Random(seed)
    pending: list[tuple[RecordedTrace, list[Span]]] = []
    for minute in range(minutes):
        minute_ns = (start_s + minute * 60) * 10**9
        for _ in range(per_minute):
            trace = rng.choice(traces)
            pending.append((trace, _restamped(trace, minute_ns + rng.randrange(0, 50 * 10**9), rng)))
            if len(pending) >= _TRACES_PER_REQUEST:
                yield _encode(pending)
                pending = []
    if pending:
        yield _encode(pending)


def _encode(traces: Sequence[tuple[RecordedTrace, list[Span]]]) -> bytes:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.CopyFrom(traces[0][0].resource)
    for attribute in resource_spans.resource.attributes:
        if attribute.key == "service.name":
            attribute.value.CopyFrom(AnyValue(string_value=HISTORY_SERVICE))
            break
    else:
        resource_spans.resource.attributes.append(
            KeyValue(key="service.name", value=AnyValue(string_value=HISTORY_SERVICE))
        )
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.CopyFrom(traces[0][0].scope)
    for _, spans in traces:
        scope_spans.spans.extend(spans)
    return request.SerializeToString()


def send(endpoint: str, bodies: Iterator[bytes], *, timeout_s: float = 30.0) -> int:
    """POST each body to `endpoint`/v1/traces; returns the requests sent. Raises on any refusal (the demo stops)."""
    sent = 0
    for body in bodies:
        request = urllib.request.Request(
            f"{endpoint}/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            if response.status != 200:
                raise RuntimeError(f"the agent answered {response.status} to a history request")
        sent += 1
    return sent
