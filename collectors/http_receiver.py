"""OTLP/HTTP receiver: ``POST /v1/traces`` (protobuf or JSON, gzip/deflate), ``GET /health``, ``GET /metrics``, and
``POST /v1/feedback`` when the agent gives it a `FeedbackEndpoint` (end users' feedback: `feedback_endpoint.py`).

The HTTP/1.1 server is `http_server.py` (h11 on asyncio, shared with the agent's API port): framing, keep-alive,
pipelining, ``Expect: 100-continue``, body limits while the client sends, read deadlines, lingering close and the
memory guard live there. This module is the OTLP policy on top. Bodies come with a Content-Length or
``Transfer-Encoding: chunked`` (what the OpenTelemetry JS exporters send).

Order of checks for a POST, all before any body byte is read: auth (401) → framing present (411: neither length
nor chunked) → content type (415) → content encoding (415) → then the server's: a declared length within
`max_body_bytes` (413) → the memory guard (429 + Retry-After while the agent's resident memory is over its
high-water mark, `collectors/memory_guard.py`) → in-flight byte budget (503 + Retry-After). A chunked body is
answered 413 as soon as the bytes received pass `max_body_bytes`. Then the body is decoded (400 / 413 for a
too-large decompressed body), handed to the consumer (429 / 503 + Retry-After on backpressure) and answered 200,
with ``partial_success`` when spans were rejected. Responses use the request's content type. The loop only parses
and buffers bodies; decoding, validating and the consumer run in a small thread pool so a slow consumer (fsync,
store) never stalls it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Final

from ragmon.collectors.auth import ApiKeyAuth
from ragmon.collectors.consumer import SpanConsumer
from ragmon.collectors.counters import CollectorCounters
from ragmon.collectors.decode import SUPPORTED_ENCODINGS
from ragmon.collectors.errors import Backpressure, ConsumerUnavailable, DecodeError, PayloadTooLargeError
from ragmon.collectors.export_handler import BodyEncoding, ExportHandler
from ragmon.collectors.exposition import MetricsSource, render_metrics
from ragmon.collectors.feedback_endpoint import FEEDBACK_PATH, FeedbackEndpoint
from ragmon.collectors.http_server import Handle, HttpServer, Reply, RequestHead, text_reply
from ragmon.collectors.memory_guard import MemoryGuard
from ragmon.collectors.responses import JSON, PROTOBUF, export_response, status_response

__all__ = ["HttpReceiver"]

_log = logging.getLogger(__name__)

TRACES_PATH: Final = "/v1/traces"
_ENCODING_BY_TYPE: Final[dict[str, BodyEncoding]] = {
    "application/x-protobuf": "protobuf",
    "application/protobuf": "protobuf",
    "application/json": "json",
}


class HttpReceiver:
    """OTLP/HTTP receiver. `start()` binds (raising OSError at once if the port is taken); `stop()` drains."""

    def __init__(
        self,
        consumer: SpanConsumer,
        *,
        host: str = "127.0.0.1",
        port: int = 4318,
        auth: ApiKeyAuth | None = None,
        counters: CollectorCounters | None = None,
        max_body_bytes: int = 16 * 1024 * 1024,
        max_inflight_bytes: int = 256 * 1024 * 1024,
        worker_threads: int = 2,
        max_connections: int = 4096,
        idle_timeout_s: float = 75.0,
        read_timeout_s: float = 30.0,
        extra_metrics: Iterable[MetricsSource] = (),
        memory_guard: MemoryGuard | None = None,
        feedback: FeedbackEndpoint | None = None,
    ) -> None:
        self.host = host
        self.feedback = feedback  # POST /v1/feedback (`feedback_endpoint.py`), when the agent stores feedback
        self.memory_guard = memory_guard
        self.auth = auth or ApiKeyAuth()
        self.counters = counters if counters is not None else CollectorCounters()
        self.handler = ExportHandler(consumer, counters=self.counters, max_body_bytes=max_body_bytes)
        self.max_body_bytes = max_body_bytes
        self.metrics_sources: tuple[MetricsSource, ...] = (self.counters, *extra_metrics)
        self.server = HttpServer(
            self,
            name="http",
            host=host,
            port=port,
            max_inflight_bytes=max_inflight_bytes,
            worker_threads=worker_threads,
            max_connections=max_connections,
            idle_timeout_s=idle_timeout_s,
            read_timeout_s=read_timeout_s,
            memory_guard=memory_guard,
            refused=self.count,
        )

    # --- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> HttpReceiver:
        if self.feedback is not None:
            self.feedback.start()  # its writer first: the port takes feedback as soon as it is bound
        try:
            self.server.start()
        except BaseException:
            if self.feedback is not None:
                self.feedback.stop()
            raise
        return self

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def endpoint(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:4318`` (append ``/v1/traces``)."""
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish for up to `timeout_s`, close every connection."""
        # Feedback first: what waits for its INSERT is stored (or answered 503) while the server still writes
        # answers; the server's drain would otherwise wait on those requests and then drop their connections.
        if self.feedback is not None:
            self.feedback.stop(timeout_s)
        self.server.stop(timeout_s)

    def __enter__(self) -> HttpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def count(self, outcome: str) -> None:
        self.counters.add("ragmon_receiver_requests_total", transport="http", outcome=outcome)

    # --- the OTLP policy (`http_server.HttpApp`) ------------------------------------------------------------
    def route(self, head: RequestHead) -> Reply | Handle:
        if head.path == FEEDBACK_PATH and self.feedback is not None:
            return self.feedback.route(head)
        if head.path != TRACES_PATH:
            if head.method in ("GET", "HEAD") and head.path in ("/health", "/metrics"):
                if head.path == "/health":
                    return Reply(200, b'{"status":"ok"}\n', "application/json")
                body, content_type = render_metrics(*self.metrics_sources, accept=head.headers.get("accept"))
                return Reply(200, body, content_type)
            if head.path in ("/health", "/metrics"):
                return text_reply(405, "use GET", {"Allow": "GET, HEAD"})
            return text_reply(404, "not found; POST /v1/traces")
        if head.method != "POST":
            return text_reply(405, "use POST", {"Allow": "POST"})

        media_type = head.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        encoding = _ENCODING_BY_TYPE.get(media_type)
        reply_type = PROTOBUF if encoding == "protobuf" else JSON if encoding == "json" else "text/plain"

        def refusal(status: int, message: str) -> Reply:
            return Reply(status, status_response(reply_type, status, message), reply_type)

        tenant = self.auth.tenant_for(head.headers.get("authorization"), head.headers.get("x-api-key"))
        if tenant is None:
            self.count("unauthenticated")
            message = "missing or invalid API key (Authorization: Bearer <key> or x-api-key)"
            reply = refusal(401, message)
            return Reply(reply.status, reply.body, reply.content_type, {"WWW-Authenticate": "Bearer"})
        if not head.framed:
            self.count("length_required")
            message = "Content-Length or Transfer-Encoding: chunked required"
            return Reply(411, status_response(reply_type, 411, message), reply_type, close=True)
        if encoding is None:
            self.count("unsupported_media_type")
            message = f"unsupported Content-Type {media_type!r}; use application/x-protobuf or application/json"
            return text_reply(415, message)
        content_encoding = head.headers.get("content-encoding", "").strip().lower()
        if content_encoding not in SUPPORTED_ENCODINGS:
            self.count("unsupported_media_type")
            message = f"unsupported Content-Encoding {content_encoding!r}; use gzip, deflate or none"
            return refusal(415, message)
        return Handle(
            run=lambda body: self._export(body, encoding, content_encoding, tenant),
            refusal=refusal,
            max_body_bytes=self.max_body_bytes,
        )

    def _export(self, body: bytes, encoding: BodyEncoding, content_encoding: str, tenant: str) -> Reply:
        """Decode → validate → consume (in the server's pool); the outcome as an OTLP answer."""
        content_type = PROTOBUF if encoding == "protobuf" else JSON
        try:
            outcome = self.handler.export_body(
                body, encoding=encoding, content_encoding=content_encoding, tenant=tenant
            )
        except DecodeError as exc:
            return Reply(400, status_response(content_type, 400, str(exc)), content_type)
        except PayloadTooLargeError as exc:
            return Reply(413, status_response(content_type, 413, str(exc)), content_type)
        except Backpressure as exc:
            status = 503 if isinstance(exc, ConsumerUnavailable) else 429
            retry_after = str(max(1, math.ceil(exc.retry_after_s)))
            body = status_response(content_type, status, str(exc))
            return Reply(status, body, content_type, {"Retry-After": retry_after})
        except Exception:
            _log.exception("unexpected error handling an OTLP/HTTP export")
            self.count("internal_error")
            return Reply(500, status_response(content_type, 500, "internal error"), content_type)
        return Reply(200, export_response(content_type, outcome.rejected_spans, outcome.error_message), content_type)
