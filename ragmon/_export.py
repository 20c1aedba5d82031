"""Getting finished spans out of the app: a bounded queue, one export thread, and two transports.

`QueueSpanProcessor.on_end` is the only part on the app's request path: one bounded-deque append, no lock, no
I/O. The export thread sends a batch as soon as `export.batch_max_spans` spans are queued, and a smaller one only
when `ragmon.force_flush` asks or no batch went out for `export.flush_interval_ms` (each request has a fixed CPU
cost, so a steady stream goes out in full batches). It hands batches to a transport:

- `OtlpHttpTransport` — ragmon's own OTLP/HTTP protobuf client: the lean encoder (`_otlp`), a persistent
  `http.client` connection, and the shared retry policy (retry only 429/502/503/504 and connection errors,
  honour Retry-After, bounded attempts and deadline, interrupted by shutdown). Bodies are sent uncompressed by
  default (`export.compression = "none"`): to an agent on the same host or pod, bytes are cheap and CPU in the
  app is not — gzip, even at level 1, is a sizeable share of the whole export path's CPU (docs/results.md).
  `"gzip"` (level 1: the cheapest level, and it already shrinks RAG spans several times over) is for
  exporting across a network; `OTEL_EXPORTER_OTLP_COMPRESSION` sets it too.
- `SpanExporterTransport` — any OpenTelemetry `SpanExporter` (the in-memory one in tests, gRPC, vendors').

Every span that does not reach the transport's destination is counted in `ExportStats` with a reason, and the
running total travels with each export request as a scope attribute, so the agent sees SDK-side loss too.
"""

from __future__ import annotations

import gzip
import http.client
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ragmon import attributes as attr
from ragmon.batch_queue import BatchQueue
from ragmon.diagnostics import logger, warn_limited
from ragmon.otlp_encoding import SpanEncoder
from ragmon.retry import Outcome, RetryPolicy, classify_http_status, parse_retry_after


@dataclass
class ExportStats:
    """Counters of the export path. Plain ints: one writer thread, readers tolerate a torn read."""

    attempted: int = 0  # taken from the queue and handed to the transport
    exported: int = 0
    batches: int = 0
    retries: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> spans

    def drop(self, reason: str, spans: int) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + spans

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())


@dataclass(frozen=True, slots=True)
class TransportResult:
    exported: int
    failed: int = 0
    reason: str = ""  # why `failed` spans were lost


class Transport(Protocol):
    def send(self, spans: Sequence[ReadableSpan], dropped_so_far: int, stop: threading.Event) -> TransportResult: ...

    def close(self) -> None: ...


class SpanExporterTransport:
    """Adapts an OpenTelemetry SpanExporter. Its own retries, if any, are its business."""

    def __init__(self, exporter: SpanExporter) -> None:
        self._exporter = exporter

    def send(self, spans: Sequence[ReadableSpan], dropped_so_far: int, stop: threading.Event) -> TransportResult:
        try:
            result = self._exporter.export(spans)
        except Exception as exc:  # a broken exporter must never take the export thread down
            warn_limited("exporter_raised", "span exporter %s raised: %r", type(self._exporter).__name__, exc)
            return TransportResult(0, len(spans), "exporter_error")
        if result is SpanExportResult.SUCCESS:
            return TransportResult(len(spans))
        return TransportResult(0, len(spans), "exporter_failure")

    def close(self) -> None:
        try:
            self._exporter.shutdown()
        except Exception as exc:
            warn_limited("exporter_shutdown", "span exporter shutdown raised: %r", exc)


class OtlpHttpTransport:
    """OTLP/HTTP protobuf to `{endpoint}/v1/traces` over one persistent connection."""

    def __init__(
        self,
        endpoint: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
        compression: str = "none",
        policy: RetryPolicy | None = None,
    ) -> None:
        url = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"OTLP endpoint must be http(s)://host[:port][/path], got {endpoint!r}")
        self._https = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port or (443 if self._https else 80)
        path = url.path.rstrip("/")
        self._path = path if path.endswith("/v1/traces") else f"{path}/v1/traces"
        self._headers = {"Content-Type": "application/x-protobuf", **(headers or {})}
        if compression not in ("none", "gzip"):
            raise ValueError(f"compression must be 'none' or 'gzip', got {compression!r}")
        self._gzip = compression == "gzip"
        if self._gzip:
            self._headers["Content-Encoding"] = "gzip"
        self._timeout_s = timeout_s
        self._policy = policy or RetryPolicy()
        self._encoder = SpanEncoder()
        self._connection: http.client.HTTPConnection | None = None
        self.retries = 0

    def send(self, spans: Sequence[ReadableSpan], dropped_so_far: int, stop: threading.Event) -> TransportResult:
        scope_extra = {attr.RAGMON_SDK_DROPPED_SPANS: dropped_so_far} if dropped_so_far else None
        try:
            body = self._encoder.encode(spans, scope_extra)
        except Exception as exc:  # a span we cannot encode is a bug; lose this batch, say so, keep going
            logger.exception("cannot encode %d spans for OTLP export", len(spans))
            return TransportResult(0, len(spans), f"encode_error:{type(exc).__name__}")
        if self._gzip:
            body = gzip.compress(body, compresslevel=1)
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            status, retry_after, detail = self._post(body)
            outcome = Outcome.RETRYABLE if status == 0 else classify_http_status(status)
            if outcome is Outcome.OK:
                rejected = _rejected_spans(detail)
                if rejected:
                    warn_limited("partial_success", "OTLP receiver rejected %d spans", rejected)
                return TransportResult(len(spans) - rejected, rejected, "rejected_by_receiver" if rejected else "")
            reason = f"http_{status}" if status else "connection_error"
            if outcome is Outcome.PERMANENT:
                warn_limited(reason, "OTLP export failed with %s, not retryable: %s", reason, detail[:200])
                return TransportResult(0, len(spans), reason)
            delay = self._policy.next_delay_s(attempt, time.monotonic() - started, retry_after)
            if delay is None:
                warn_limited("export_gave_up", "OTLP export gave up after %d attempts (%s)", attempt, reason)
                return TransportResult(0, len(spans), f"retries_exhausted:{reason}")
            self.retries += 1
            if stop.wait(delay):
                return TransportResult(0, len(spans), "shutdown_during_retry")

    def _post(self, body: bytes) -> tuple[int, float | None, bytes]:
        """(status, retry-after seconds, response body); status 0 for a connection-level failure."""
        try:
            if self._connection is None:
                factory = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
                self._connection = factory(self._host, self._port, timeout=self._timeout_s)
            self._connection.request("POST", self._path, body=body, headers=self._headers)
            response = self._connection.getresponse()
            payload = response.read()
            if response.will_close:
                self._close_connection()
            return response.status, parse_retry_after(response.getheader("Retry-After")), payload
        except (OSError, http.client.HTTPException) as exc:
            self._close_connection()
            return 0, None, repr(exc).encode()

    def _close_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def close(self) -> None:
        self._close_connection()


def _rejected_spans(response_body: bytes) -> int:
    """`partial_success.rejected_spans` from an ExportTraceServiceResponse; 0 if absent or unreadable."""
    if not response_body:
        return 0
    try:
        # here, not at the top: the generated protobuf modules would slow the app's `import ragmon`, and only
        # a receiver that rejected spans needs them
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        response = ExportTraceServiceResponse.FromString(response_body)
        return int(response.partial_success.rejected_spans)
    except Exception:
        return 0


class QueueSpanProcessor(SpanProcessor):
    """Bounded queue + one export thread (`ragmon.batch_queue`). Never blocks or raises on the app's threads."""

    def __init__(
        self,
        transport: Transport,
        *,
        queue_max_spans: int = 65_536,
        batch_max_spans: int = 512,
        flush_interval_s: float = 0.2,
    ) -> None:
        self.stats = ExportStats()
        self._transport = transport
        self._drop_lock = threading.Lock()  # app threads drop (queue full) while the export thread counts failures
        self._queue: BatchQueue[ReadableSpan] = BatchQueue(
            self._send,
            on_drop=self._count_drop,
            queue_max=queue_max_spans,
            batch_max=batch_max_spans,
            flush_interval_s=flush_interval_s,
            thread_name="ragmon-export",
        )
        self._queue_max = queue_max_spans

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    # -- app threads ---------------------------------------------------------------------------------------
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if not self._queue.offer(span) and not self._queue.closed:
            warn_limited("queue_full", "ragmon export queue full (%d spans); dropping spans", self._queue_max)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._queue.flush(timeout_millis / 1000)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        if self._queue.closed:
            return
        self._queue.close(timeout_s)
        self._transport.close()

    # -- export thread -------------------------------------------------------------------------------------
    def _count_drop(self, reason: str, spans: int) -> None:
        with self._drop_lock:
            self.stats.drop(reason, spans)

    def _send(self, batch: list[ReadableSpan], stop: threading.Event) -> None:
        count = len(batch)
        self.stats.attempted += count
        try:
            result = self._transport.send(batch, self.stats.dropped_total, stop)
        except Exception as exc:  # defensive: a transport bug must not kill the thread
            logger.exception("ragmon export transport failed")
            result = TransportResult(0, count, f"transport_error:{type(exc).__name__}")
        self.stats.batches += 1
        self.stats.exported += result.exported
        if result.failed:
            self._count_drop(result.reason or "unknown", result.failed)
        self.stats.retries = getattr(self._transport, "retries", 0)
