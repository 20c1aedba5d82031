"""OTLP/HTTP receiver: ``POST /v1/traces`` (protobuf or JSON, gzip/deflate), ``GET /health``, ``GET /metrics``.

A small HTTP/1.1 server on asyncio (stdlib only, keep-alive, pipelining-safe), running its own event loop in a
background thread. Why not `http.server`: a thread per connection and a line-by-line header parser cost
~0.3 ms a request before any decoding, and its blocking reads cannot enforce a body cap or a read deadline
cleanly; aiohttp/uvicorn are not dependencies of ragmon. The loop only parses heads and buffers bodies; decoding,
validating and the consumer run in a small thread pool so a slow consumer (fsync, store) never stalls the loop.

Order of checks for a POST, all before the body is read (with ``Expect: 100-continue`` the client does not even
send it): auth (401) → length present (411) and within `max_body_bytes` (413) → content type (415) → content
encoding (415) → in-flight byte budget (503 + Retry-After). Then the body is decoded (400 / 413 for a
too-large decompressed body), handed to the consumer (429 / 503 + Retry-After on backpressure) and answered
200, with ``partial_success`` when spans were rejected. Responses use the request's content type.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import threading
from collections.abc import Iterable
from typing import Final

from collectors.auth import ApiKeyAuth
from collectors.consumer import SpanConsumer
from collectors.counters import CollectorCounters, MetricsSource, render_metrics
from collectors.decode import SUPPORTED_ENCODINGS
from collectors.errors import Backpressure, ConsumerUnavailable, DecodeError, PayloadTooLargeError
from collectors.ingest import BodyEncoding, Ingest
from collectors.responses import JSON, PROTOBUF, export_response, status_response

__all__ = ["HttpReceiver"]

_log = logging.getLogger(__name__)

TRACES_PATH: Final = "/v1/traces"
_MAX_HEAD_BYTES: Final = 64 * 1024
_DISCARD_MAX_BYTES: Final = 64 * 1024  # bodies of refused requests up to this size are read and dropped
_ENCODING_BY_TYPE: Final[dict[str, BodyEncoding]] = {
    "application/x-protobuf": "protobuf",
    "application/protobuf": "protobuf",
    "application/json": "json",
}
_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
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
        idle_timeout_s: float = 75.0,
        read_timeout_s: float = 30.0,
        extra_metrics: Iterable[MetricsSource] = (),
    ) -> None:
        self.host = host
        self._requested_port = port
        self.auth = auth or ApiKeyAuth()
        self.counters = counters if counters is not None else CollectorCounters()
        self.ingest = Ingest(consumer, counters=self.counters, max_body_bytes=max_body_bytes)
        self.max_body_bytes = max_body_bytes
        self.max_inflight_bytes = max_inflight_bytes
        self.idle_timeout_s = idle_timeout_s
        self.read_timeout_s = read_timeout_s
        self.metrics_sources: tuple[MetricsSource, ...] = (self.counters, *extra_metrics)
        self._worker_threads = worker_threads
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._connections: set[_Connection] = set()
        self._inflight_bytes = 0
        self._stopping = False
        self.port = 0

    # --- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> HttpReceiver:
        if self._thread is not None:
            raise RuntimeError("receiver already started")
        self._executor = concurrent.futures.ThreadPoolExecutor(self._worker_threads, "ragmon-otlp-http")
        loop = asyncio.new_event_loop()
        ready: concurrent.futures.Future[int] = concurrent.futures.Future()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                server = loop.run_until_complete(
                    loop.create_server(lambda: _Connection(self), self.host, self._requested_port, backlog=1024)
                )
            except BaseException as exc:
                ready.set_exception(exc)
                loop.close()
                return
            self._server = server
            ready.set_result(server.sockets[0].getsockname()[1])
            loop.run_forever()
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="ragmon-otlp-http-loop", daemon=True)
        self._thread.start()
        try:
            self.port = ready.result()
        except BaseException:
            self._thread.join()
            self._thread = None
            self._executor.shutdown(wait=False)
            raise
        return self

    @property
    def endpoint(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:4318`` (append ``/v1/traces``)."""
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish for up to `timeout_s`, close every connection."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._shutdown(timeout_s), loop)
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            future.result(timeout_s + 1.0)  # stop anyway after the deadline: shutdown must not hang the agent
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s + 1.0)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        self._thread = None
        self._loop = None

    def __enter__(self) -> HttpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _shutdown(self, timeout_s: float) -> None:
        self._stopping = True
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.close_when_idle()
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self._connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self._connections):
            connection.abort()

    # --- called by connections, on the loop thread ---------------------------------------------------------
    def reserve(self, size: int) -> bool:
        if self._inflight_bytes + size > self.max_inflight_bytes and self._inflight_bytes > 0:
            return False
        self._inflight_bytes += size
        return True

    def release(self, size: int) -> None:
        self._inflight_bytes -= size

    def track(self, connection: _Connection, alive: bool) -> None:
        if alive:
            self._connections.add(connection)
        else:
            self._connections.discard(connection)

    async def handle_export(
        self, body: bytes, encoding: BodyEncoding, content_encoding: str, tenant: str
    ) -> tuple[int, bytes, dict[str, str]]:
        """Run decode → validate → consume in the pool; map the outcome to (status, body, extra headers)."""
        content_type = PROTOBUF if encoding == "protobuf" else JSON
        loop = asyncio.get_running_loop()
        try:
            outcome = await loop.run_in_executor(
                self._executor,
                lambda: self.ingest.export_body(
                    body, encoding=encoding, content_encoding=content_encoding, tenant=tenant
                ),
            )
        except DecodeError as exc:
            return 400, status_response(content_type, 400, str(exc)), {}
        except PayloadTooLargeError as exc:
            return 413, status_response(content_type, 413, str(exc)), {}
        except Backpressure as exc:
            status = 503 if isinstance(exc, ConsumerUnavailable) else 429
            retry_after = str(max(1, math.ceil(exc.retry_after_s)))
            return status, status_response(content_type, status, str(exc)), {"Retry-After": retry_after}
        except Exception:
            _log.exception("unexpected error handling an OTLP/HTTP export")
            self.counters.add("ragmon_receiver_requests_total", transport="http", outcome="internal_error")
            return 500, status_response(content_type, 500, "internal error"), {}
        return 200, export_response(content_type, outcome.rejected_spans, outcome.error_message), {}

    def count(self, outcome: str) -> None:
        self.counters.add("ragmon_receiver_requests_total", transport="http", outcome=outcome)


class _Connection(asyncio.Protocol):
    """One client connection: parses request heads, buffers bodies, answers in order."""

    def __init__(self, receiver: HttpReceiver) -> None:
        self.receiver = receiver
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.busy = False  # a request is being processed; later (pipelined) bytes wait in the buffer
        self.closing = False
        self.close_after_idle = False
        self.discard_bytes = 0
        self.pending: tuple[int, BodyEncoding, str, str, bool] | None = None  # body size, encoding, ...
        self.reserved = 0
        self.timer: asyncio.TimerHandle | None = None

    # asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.receiver.track(self, True)
        self._arm(self.receiver.idle_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.receiver.track(self, False)
        if self.timer is not None:
            self.timer.cancel()
        if self.reserved and not self.busy:
            self.receiver.release(self.reserved)
            self.reserved = 0

    def data_received(self, data: bytes) -> None:
        if self.discard_bytes:
            dropped = min(self.discard_bytes, len(data))
            self.discard_bytes -= dropped
            data = data[dropped:]
        if not self.buffer and data and self.pending is None and not self.busy:
            self._arm(self.receiver.read_timeout_s)  # a new request started: it must arrive in time
        self.buffer += data
        if not self.busy:
            self._advance()

    # state machine
    def _advance(self) -> None:
        while not self.busy and not self.closing:
            if self.pending is None:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(self.buffer) > _MAX_HEAD_BYTES:
                        self._reply(431, "text/plain", b"request head too large\n", close=True)
                    return
                head = bytes(self.buffer[:end])
                del self.buffer[: end + 4]
                self._on_head(head)
                continue
            size = self.pending[0]
            if len(self.buffer) < size:
                return
            body = bytes(self.buffer[:size])
            del self.buffer[:size]
            _, encoding, content_encoding, tenant, keep_alive = self.pending
            self.pending = None
            self.busy = True
            if self.timer is not None:
                self.timer.cancel()
            self.loop.create_task(self._export(body, encoding, content_encoding, tenant, keep_alive))

    def _on_head(self, head: bytes) -> None:
        receiver = self.receiver
        try:
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, target, version = request_line.split(" ")
        except ValueError:
            self._reply(400, "text/plain", b"malformed request line\n", close=True)
            return
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            self._reply(505, "text/plain", b"HTTP/1.1 only\n", close=True)
            return
        headers: dict[str, str] = {}
        for line in header_lines:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                self._reply(400, "text/plain", b"malformed header line\n", close=True)
                return
            name = name.lower()
            value = value.strip()
            if name == "content-length" and name in headers and headers[name] != value:
                self._reply(400, "text/plain", b"conflicting Content-Length headers\n", close=True)
                return
            headers[name] = value
        connection = headers.get("connection", "").lower()
        keep_alive = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
        if "transfer-encoding" in headers:
            self._reply(411, "text/plain", b"send a Content-Length; chunked bodies are not supported\n", close=True)
            return
        length_text = headers.get("content-length", "")
        if length_text and not length_text.isdigit():
            self._reply(400, "text/plain", b"invalid Content-Length\n", close=True)
            return
        length = int(length_text) if length_text else 0
        path = target.split("?", 1)[0]

        if path != TRACES_PATH:
            if method in ("GET", "HEAD") and path in ("/health", "/metrics"):
                if path == "/health":
                    body, content_type = b'{"status":"ok"}\n', "application/json"
                else:
                    text = render_metrics(receiver.metrics_sources)
                    body, content_type = text.encode("utf-8"), "text/plain; version=0.0.4; charset=utf-8"
                self._refuse_body(length, keep_alive, 200, content_type, b"" if method == "HEAD" else body)
            elif path in ("/health", "/metrics"):
                self._refuse_body(length, keep_alive, 405, "text/plain", b"use GET\n", {"Allow": "GET, HEAD"})
            else:
                self._refuse_body(length, keep_alive, 404, "text/plain", b"not found; POST /v1/traces\n")
            return
        if method != "POST":
            self._refuse_body(length, keep_alive, 405, "text/plain", b"use POST\n", {"Allow": "POST"})
            return

        media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        encoding = _ENCODING_BY_TYPE.get(media_type)
        reply_type = PROTOBUF if encoding == "protobuf" else JSON if encoding == "json" else "text/plain"
        tenant = receiver.auth.tenant_for(headers.get("authorization"), headers.get("x-api-key"))
        if tenant is None:
            receiver.count("unauthenticated")
            self._refuse_body(
                length,
                keep_alive,
                401,
                reply_type,
                status_response(
                    reply_type, 401, "missing or invalid API key (Authorization: Bearer <key> or x-api-key)"
                ),
                {"WWW-Authenticate": "Bearer"},
            )
            return
        if not length_text:
            receiver.count("length_required")
            self._reply(411, reply_type, status_response(reply_type, 411, "Content-Length required"), close=True)
            return
        if length > receiver.max_body_bytes:
            receiver.count("too_large")
            message = f"body of {length} bytes exceeds the limit of {receiver.max_body_bytes} bytes"
            self._reply(413, reply_type, status_response(reply_type, 413, message), close=True)
            return
        if encoding is None:
            receiver.count("unsupported_media_type")
            message = f"unsupported Content-Type {media_type!r}; use application/x-protobuf or application/json"
            self._refuse_body(length, keep_alive, 415, "text/plain", message.encode() + b"\n")
            return
        content_encoding = headers.get("content-encoding", "").strip().lower()
        if content_encoding not in SUPPORTED_ENCODINGS:
            receiver.count("unsupported_media_type")
            message = f"unsupported Content-Encoding {content_encoding!r}; use gzip, deflate or none"
            self._refuse_body(length, keep_alive, 415, reply_type, status_response(reply_type, 415, message))
            return
        if receiver._stopping or not receiver.reserve(length):
            receiver.count("overloaded")
            self._refuse_body(
                length,
                keep_alive,
                503,
                reply_type,
                status_response(reply_type, 503, "receiver is busy; retry later"),
                {"Retry-After": "1"},
            )
            return
        self.reserved = length
        if headers.get("expect", "").lower() == "100-continue" and self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self.pending = (length, encoding, content_encoding, tenant, keep_alive)

    def _refuse_body(
        self,
        length: int,
        keep_alive: bool,
        status: int,
        content_type: str,
        body: bytes,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer without using the request body: drop a small one to keep the connection, else close."""
        close = not keep_alive or length > _DISCARD_MAX_BYTES
        if not close and length:
            taken = min(length, len(self.buffer))
            del self.buffer[:taken]
            self.discard_bytes = length - taken
        self._reply(status, content_type, body, headers, close=close)

    async def _export(
        self, body: bytes, encoding: BodyEncoding, content_encoding: str, tenant: str, keep_alive: bool
    ) -> None:
        try:
            status, payload, headers = await self.receiver.handle_export(body, encoding, content_encoding, tenant)
            reply_type = PROTOBUF if encoding == "protobuf" else JSON
            self._reply(status, reply_type, payload, headers, close=not keep_alive or self.close_after_idle)
        finally:
            self.receiver.release(self.reserved)
            self.reserved = 0
            self.busy = False
            if not self.closing:
                self._arm(self.receiver.idle_timeout_s)
                self._advance()

    def _reply(
        self,
        status: int,
        content_type: str,
        body: bytes,
        headers: dict[str, str] | None = None,
        *,
        close: bool = False,
    ) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        lines = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
        ]
        for name, value in (headers or {}).items():
            lines.append(f"{name}: {value}")
        if close:
            lines.append("Connection: close")
        transport.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        if close:
            self.closing = True
            transport.close()

    # timers and shutdown
    def _arm(self, delay_s: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(delay_s, self._on_timeout)

    def _on_timeout(self) -> None:
        if self.busy or self.closing:
            return
        if self.buffer or self.pending is not None:
            self._reply(408, "text/plain", b"request not received in time\n", close=True)
        elif self.transport is not None:
            self.closing = True
            self.transport.close()

    def close_when_idle(self) -> None:
        self.close_after_idle = True
        if not self.busy and self.pending is None and not self.buffer and self.transport is not None:
            self.closing = True
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
