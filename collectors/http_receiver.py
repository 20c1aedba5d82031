"""OTLP/HTTP receiver: ``POST /v1/traces`` (protobuf or JSON, gzip/deflate), ``GET /health``, ``GET /metrics``.

HTTP/1.1 framing, keep-alive, pipelining and ``Expect: 100-continue`` come from `h11` (a sans-I/O protocol state
machine: it parses, we do the I/O); this module is the asyncio glue and the OTLP policy, on an event loop in a
background thread. Why not `http.server`: a thread per connection and blocking reads that cannot enforce a body
cap or a read deadline; aiohttp/uvicorn are not dependencies of ragmon. The loop only parses and buffers bodies;
decoding, validating and the consumer run in a small thread pool so a slow consumer (fsync, store) never stalls it.

Bodies come with a Content-Length or ``Transfer-Encoding: chunked`` (what the OpenTelemetry JS exporters send).
Order of checks for a POST, all before any body byte is read (with ``Expect: 100-continue`` the client does not
even send it): auth (401) → framing present (411: neither length nor chunked) and a declared length within
`max_body_bytes` (413) → content type (415) → content encoding (415) → the memory guard (429 + Retry-After while
the agent's resident memory is over its high-water mark, `collectors/memory_guard.py`) → in-flight byte budget
(503 + Retry-After). A chunked body is answered 413 as soon as the bytes received pass `max_body_bytes`. Then the
body is decoded (400 / 413 for a too-large decompressed body), handed to the consumer (429 / 503 + Retry-After on
backpressure) and answered 200, with ``partial_success`` when spans were rejected. Responses use the request's
content type. Malformed HTTP is 400 (431 for a head over 64 KiB, 501 for an unknown transfer coding, 505 for a
version other than 1.0/1.1) and closes the connection; a request head or body slower than `read_timeout_s` is 408.

A refusal sent while the client is still uploading (413, or any refusal of a body too big to read and drop)
closes the connection the way nginx's lingering close does: send the answer, shut down our sending side, then
read and drop what keeps coming for a bounded time and amount. Closing at once would make the kernel reset the
connection over the unread bytes, and the client would see a reset (which OTLP exporters retry) instead of the 413.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

import h11
from ragmon.collectors.auth import ApiKeyAuth
from ragmon.collectors.consumer import SpanConsumer
from ragmon.collectors.counters import CollectorCounters, MetricsSource, render_metrics
from ragmon.collectors.decode import SUPPORTED_ENCODINGS
from ragmon.collectors.errors import Backpressure, ConsumerUnavailable, DecodeError, PayloadTooLargeError
from ragmon.collectors.export_handler import BodyEncoding, ExportHandler
from ragmon.collectors.memory_guard import MemoryGuard
from ragmon.collectors.responses import JSON, PROTOBUF, export_response, status_response

__all__ = ["HttpReceiver"]

_log = logging.getLogger(__name__)

TRACES_PATH: Final = b"/v1/traces"
_MAX_HEAD_BYTES: Final = 64 * 1024  # h11 answers 431 past this without a complete head (its default is 16 KiB)
_DISCARD_MAX_BYTES: Final = 64 * 1024  # refused bodies up to this declared size are read and dropped (keep-alive)
# Lingering close (see the module docstring): nginx's lingering_time / lingering_timeout, plus a byte cap. Dropping
# bytes costs well under 1 ms of CPU per MiB; these only bound a client that never stops.
_LINGER_MAX_S: Final = 30.0
_LINGER_QUIET_S: Final = 5.0
_LINGER_MAX_BYTES: Final = 256 * 1024 * 1024
_ENCODING_BY_TYPE: Final[dict[str, BodyEncoding]] = {
    "application/x-protobuf": "protobuf",
    "application/protobuf": "protobuf",
    "application/json": "json",
}
_REASONS: Final = {
    100: b"Continue",
    200: b"OK",
    400: b"Bad Request",
    401: b"Unauthorized",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    411: b"Length Required",
    413: b"Content Too Large",
    415: b"Unsupported Media Type",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    501: b"Not Implemented",
    503: b"Service Unavailable",
    505: b"HTTP Version Not Supported",
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
        memory_guard: MemoryGuard | None = None,
    ) -> None:
        self.host = host
        self.memory_guard = memory_guard
        self._requested_port = port
        self.auth = auth or ApiKeyAuth()
        self.counters = counters if counters is not None else CollectorCounters()
        self.handler = ExportHandler(consumer, counters=self.counters, max_body_bytes=max_body_bytes)
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
                lambda: self.handler.export_body(
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


@dataclass(slots=True)
class _Upload:
    """An accepted export whose body is arriving."""

    encoding: BodyEncoding
    content_encoding: str
    tenant: str
    chunked: bool
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0


class _Connection(asyncio.Protocol):
    """One client connection: feeds bytes to h11, acts on its events, answers in order."""

    def __init__(self, receiver: HttpReceiver) -> None:
        self.receiver = receiver
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.http = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD_BYTES)
        self.method = b""
        self.upload: _Upload | None = None
        self.reserved = 0  # in-flight budget held by `upload`, released when it is answered or dropped
        self.busy = False  # an export is in the pool; later (pipelined) bytes wait, reading paused
        self.paused = False
        self.idle = True  # no byte of a next request yet: the idle timeout applies, not the read timeout
        self.closing = False
        self.close_after_idle = False
        self.linger_until = 0.0
        self.linger_bytes = 0
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
        if not self.busy:
            self._release()

    def data_received(self, data: bytes) -> None:
        if self.linger_until:
            self._drop_lingering(len(data))
            return
        if self.closing:
            return
        if self.idle:
            self.idle = False
            self._arm(self.receiver.read_timeout_s)  # a new request started: it must arrive in time
        self.http.receive_data(data)
        if self.busy:
            # Pipelined bytes wait in h11's buffer; TCP holds the rest, so that buffer stays small.
            if not self.paused and self.transport is not None:
                self.transport.pause_reading()
                self.paused = True
            return
        self._advance()

    # state machine
    def _advance(self) -> None:
        while not self.busy and not self.closing:
            try:
                event = self.http.next_event()
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint if exc.error_status_hint in _REASONS else 400
                self._reply(status, "text/plain", f"malformed request: {exc}\n".encode(), close=True)
                return
            if isinstance(event, h11.Data):
                self._on_data(event.data)
            elif isinstance(event, h11.Request):
                self._on_request(event)
            elif isinstance(event, h11.EndOfMessage):
                self._on_end()
            else:  # NEED_DATA; PAUSED (our answer is pending); ConnectionClosed (never fed: EOF closes us)
                return

    def _on_request(self, request: h11.Request) -> None:
        receiver = self.receiver
        self.method = request.method
        if request.http_version not in (b"1.1", b"1.0"):
            self._reply(505, "text/plain", b"HTTP/1.1 only\n", close=True)
            return
        fields: dict[bytes, bytes] = dict(request.headers)  # h11 lower-cases names, validated Content-Length
        length_text = fields.get(b"content-length")
        chunked = b"transfer-encoding" in fields  # h11 refuses (501) any coding other than chunked
        if chunked and length_text is not None:
            # RFC 9112 §6.3: a request smuggling pattern; a server may refuse it, and must close after it.
            self._reply(400, "text/plain", b"both Content-Length and Transfer-Encoding\n", close=True)
            return
        # The body's declared size: None when chunked, 0 without framing (h11 reads no body then).
        length = int(length_text) if length_text is not None else None if chunked else 0
        path = request.target.split(b"?", 1)[0]

        if path != TRACES_PATH:
            if request.method in (b"GET", b"HEAD") and path in (b"/health", b"/metrics"):
                if path == b"/health":
                    body, content_type = b'{"status":"ok"}\n', "application/json"
                else:
                    text = render_metrics(receiver.metrics_sources)
                    body, content_type = text.encode("utf-8"), "text/plain; version=0.0.4; charset=utf-8"
                self._refuse(length, 200, content_type, body)
            elif path in (b"/health", b"/metrics"):
                self._refuse(length, 405, "text/plain", b"use GET\n", {"Allow": "GET, HEAD"})
            else:
                self._refuse(length, 404, "text/plain", b"not found; POST /v1/traces\n")
            return
        if request.method != b"POST":
            self._refuse(length, 405, "text/plain", b"use POST\n", {"Allow": "POST"})
            return

        media_type = fields.get(b"content-type", b"").decode("latin-1").split(";", 1)[0].strip().lower()
        encoding = _ENCODING_BY_TYPE.get(media_type)
        reply_type = PROTOBUF if encoding == "protobuf" else JSON if encoding == "json" else "text/plain"
        authorization, api_key = fields.get(b"authorization"), fields.get(b"x-api-key")
        tenant = receiver.auth.tenant_for(
            authorization.decode("latin-1") if authorization is not None else None,
            api_key.decode("latin-1") if api_key is not None else None,
        )
        if tenant is None:
            receiver.count("unauthenticated")
            message = "missing or invalid API key (Authorization: Bearer <key> or x-api-key)"
            self._refuse(
                length, 401, reply_type, status_response(reply_type, 401, message), {"WWW-Authenticate": "Bearer"}
            )
            return
        if length_text is None and not chunked:
            receiver.count("length_required")
            message = "Content-Length or Transfer-Encoding: chunked required"
            self._reply(411, reply_type, status_response(reply_type, 411, message), close=True)
            return
        if length is not None and length > receiver.max_body_bytes:
            receiver.count("too_large")
            message = f"body of {length} bytes exceeds the limit of {receiver.max_body_bytes} bytes"
            self._reply(413, reply_type, status_response(reply_type, 413, message), close=True)
            return
        if encoding is None:
            receiver.count("unsupported_media_type")
            message = f"unsupported Content-Type {media_type!r}; use application/x-protobuf or application/json"
            self._refuse(length, 415, "text/plain", message.encode() + b"\n")
            return
        content_encoding = fields.get(b"content-encoding", b"").decode("latin-1").strip().lower()
        if content_encoding not in SUPPORTED_ENCODINGS:
            receiver.count("unsupported_media_type")
            message = f"unsupported Content-Encoding {content_encoding!r}; use gzip, deflate or none"
            self._refuse(length, 415, reply_type, status_response(reply_type, 415, message))
            return
        # A declared length is reserved whole, now. A chunked body is reserved as its bytes arrive: reserving
        # max_body_bytes up front would admit only max_inflight / max_body (16 by default) chunked uploads at once
        # though OTLP bodies are ~100 KB, throttling Node.js apps for nothing; the price is that a budget refusal
        # may come mid-upload (answered like a 413, with a lingering close).
        # Before the body is read: a refused request costs the agent no memory (the client retries after the wait).
        guard = receiver.memory_guard
        if guard is not None and (wait_s := guard.admit("http")) is not None:
            receiver.count("memory")
            refusal = status_response(reply_type, 429, guard.reason)
            self._refuse(length, 429, reply_type, refusal, {"Retry-After": str(max(1, math.ceil(wait_s)))})
            return
        if receiver._stopping or not receiver.reserve(length or 0):
            self._overloaded(reply_type, length)
            return
        self.reserved = length or 0
        self.upload = _Upload(encoding, content_encoding, tenant, chunked)
        if self.http.they_are_waiting_for_100_continue:
            self._write(self.http.send(h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")))

    def _on_data(self, data: bytes) -> None:
        upload = self.upload
        if upload is None:  # the rest of a refused request's small body: dropped
            return
        upload.size += len(data)
        if upload.chunked:
            receiver = self.receiver
            reply_type = PROTOBUF if upload.encoding == "protobuf" else JSON
            if upload.size > receiver.max_body_bytes:
                self.upload = None
                receiver.count("too_large")
                message = f"chunked body exceeds the limit of {receiver.max_body_bytes} bytes"
                self._reply(413, reply_type, status_response(reply_type, 413, message), close=True)
                return
            if not receiver.reserve(len(data)):
                self._overloaded(reply_type, None)
                return
            self.reserved += len(data)
        upload.chunks.append(data)

    def _on_end(self) -> None:
        upload = self.upload
        if upload is None:  # a refused request, already answered
            self._next_cycle()
            return
        self.upload = None
        body = b"".join(upload.chunks)  # one copy, into the immutable bytes the pool may share (h11 gives bytearrays)
        self.busy = True
        if self.timer is not None:
            self.timer.cancel()
        self.loop.create_task(self._export(body, upload.encoding, upload.content_encoding, upload.tenant))

    def _overloaded(self, reply_type: str, length: int | None) -> None:
        self.receiver.count("overloaded")
        message = status_response(reply_type, 503, "receiver is busy; retry later")
        self._refuse(length, 503, reply_type, message, {"Retry-After": "1"})

    def _refuse(
        self,
        length: int | None,
        status: int,
        content_type: str,
        body: bytes,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer without using the request body: read and drop a small declared one to keep the connection;
        close (lingering) for a large or chunked one, or one the client holds back for a 100 Continue."""
        self._release()
        self.upload = None
        waiting = self.http.they_are_waiting_for_100_continue
        close = length is None or length > _DISCARD_MAX_BYTES or (waiting and length > 0)
        self._reply(status, content_type, body, headers, close=close)

    async def _export(self, body: bytes, encoding: BodyEncoding, content_encoding: str, tenant: str) -> None:
        try:
            status, payload, headers = await self.receiver.handle_export(body, encoding, content_encoding, tenant)
            self._release()  # before answering: a client that has its answer finds the budget free
            reply_type = PROTOBUF if encoding == "protobuf" else JSON
            self._reply(status, reply_type, payload, headers, close=self.close_after_idle)
        finally:
            self._release()
            self.busy = False
            if not self.closing:
                if self.paused and self.transport is not None:
                    self.paused = False
                    self.transport.resume_reading()
                if not self.idle:  # pipelined bytes are waiting (h11 has nothing to say otherwise)
                    self._advance()

    def _reply(
        self,
        status: int,
        content_type: str,
        body: bytes,
        headers: dict[str, str] | None = None,
        *,
        close: bool = False,
        linger: bool = True,
    ) -> None:
        if self.transport is None or self.closing:
            return
        fields = [(b"Content-Type", content_type.encode()), (b"Content-Length", str(len(body)).encode())]
        fields.extend((name.encode(), value.encode("latin-1")) for name, value in (headers or {}).items())
        if close:
            fields.append((b"Connection", b"close"))
        http = self.http
        try:
            data = http.send(h11.Response(status_code=status, headers=fields, reason=_REASONS.get(status, b"")))
            if body and self.method != b"HEAD":
                data += http.send(h11.Data(data=body))
            data += http.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            # No answer possible in this state (the request was already answered, e.g. a timeout while
            # dropping a refused body): closing is all that is left.
            self._close(linger)
            return
        self._write(data)
        if http.our_state is h11.MUST_CLOSE:  # we said close, or the client did (or it speaks HTTP/1.0)
            self._close(linger)
        else:
            self._next_cycle()

    def _next_cycle(self) -> None:
        """After an answer, once the request is also fully read: get ready for the next one on this connection."""
        http = self.http
        if http.our_state is h11.MUST_CLOSE or http.their_state is h11.MUST_CLOSE:
            self._close()
            return
        if http.our_state is not h11.DONE or http.their_state is not h11.DONE:
            return  # our answer is pending, or the rest of a refused body is still being dropped
        http.start_next_cycle()
        self.method = b""
        self.idle = not http.trailing_data[0]  # pipelined bytes already here: the read timeout applies
        if self.close_after_idle and self.idle:
            self._close()
            return
        self._arm(self.receiver.idle_timeout_s if self.idle else self.receiver.read_timeout_s)

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _close(self, linger: bool = True) -> None:
        """Close; linger first (unless told not to) when the client is still sending a body we did not read."""
        transport = self.transport
        self.closing = True
        self._release()
        if transport is None or transport.is_closing():
            return
        if not linger or not self._body_pending() or not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()  # the answer, then FIN: the client reads it, we keep reading until it stops
        self.linger_until = self.loop.time() + _LINGER_MAX_S
        if self.paused:
            self.paused = False
            transport.resume_reading()
        self._arm(_LINGER_QUIET_S)

    def _body_pending(self) -> bool:
        """Whether the client may still be sending a body we will not read. Drains what h11 already holds,
        so a request whose (empty or small) body is all here is not taken for one still coming."""
        http = self.http
        with contextlib.suppress(h11.RemoteProtocolError):
            while http.their_state is h11.SEND_BODY:
                if http.next_event() is h11.NEED_DATA:
                    return True
        return False

    def _drop_lingering(self, size: int) -> None:
        self.linger_bytes += size
        left_s = self.linger_until - self.loop.time()
        if self.linger_bytes > _LINGER_MAX_BYTES or left_s <= 0:
            self.abort()
        else:
            self._arm(min(_LINGER_QUIET_S, left_s))

    def _release(self) -> None:
        if self.reserved:
            self.receiver.release(self.reserved)
            self.reserved = 0

    # timers and shutdown
    def _arm(self, delay_s: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(delay_s, self._on_timeout)

    def _on_timeout(self) -> None:
        if self.linger_until:
            self.abort()
        elif self.busy or self.closing:
            return
        elif self.idle:
            self._close()
        else:
            # No lingering: a client this slow is the one to be rid of, not one to wait for.
            self.upload = None
            self._reply(408, "text/plain", b"request not received in time\n", close=True, linger=False)

    def close_when_idle(self) -> None:
        self.close_after_idle = True
        if not self.busy and self.idle:
            self._close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
