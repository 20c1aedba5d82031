"""The HTTP/1.1 server both of the agent's HTTP ports run on: the OTLP receiver (`http_receiver.py`) and the read
API with the dashboard (`ragmon.agent.api`).

h11 (a sans-I/O HTTP/1.1 state machine: it parses and frames, we do the I/O) handles the protocol — keep-alive,
pipelining, chunked bodies, ``Expect: 100-continue``; this module is the asyncio glue on an event loop in a
background thread and the rules every request meets, whatever it is for. Why not the standard library's
`http.server` (the API's stack before): a thread per connection and blocking reads, so no body cap while the client
sends, no read deadline, and a body read before its key was checked. Why not uvicorn: it has no deadline on
receiving a request (its keep-alive timer is reset by every byte; uvicorn issue #157, open since 2018), which is
what a slowloris client exploits.

An application (`HttpApp`) sees each request twice:

1. `route(head)`, on the loop thread, once the head is complete and before any body byte is read. It answers at
   once (`Reply`: a refusal such as 401, 404, 405, 415, or something cheap such as /health), or takes the request
   (`Handle`), naming the largest body it accepts and the function that answers it.
2. `Handle.run(body)`, in a bounded thread pool, once the whole body is here; it returns the `Reply`, or a
   `concurrent.futures.Future` of it when the answer waits for work done elsewhere (the feedback endpoint's group
   commit): the server awaits that on its loop, so a waiting request holds no pool thread and cannot starve the
   port's other requests. Such a handle must resolve its future in bounded time.

Between the two the server enforces, in this order and before any body byte is read (with ``Expect: 100-continue``
the client does not even send it): the declared length against the handle's limit (413), the memory guard (429 +
Retry-After while the agent's resident memory is over its high-water mark, `memory_guard.py`), the in-flight byte
budget shared by the port's uploads (503 + Retry-After).
A chunked body is answered 413 as soon as its bytes pass the limit. Malformed HTTP is 400 (431 for a
head over 64 KiB, 501 for an unknown transfer coding, 505 for a version other than 1.0/1.1) and closes the
connection; a request head or body slower than `read_timeout_s` is 408; a connection idle for `idle_timeout_s` is
closed; a connection past `max_connections` is answered 503 and closed, so connections cost a bounded amount.
A client that half-closes after its request (shuts down its sending side) still gets its answer. One that goes
away while its request runs has the handle's `abandon` called (the API cancels its query in the engine); a FIN is
all the server sees of either, so a half-close during a handle with `abandon` abandons it too (the answer then
says so).

A refusal sent while the client is still uploading (413, or any refusal of a body too big to read and drop)
closes the connection the way nginx's lingering close does: send the answer, shut down our sending side, then
read and drop what keeps coming for a bounded time and amount. Closing at once would make the kernel reset the
connection over the unread bytes, and the client would see a reset (which OTLP exporters retry) instead of the
answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

import h11
from ragmon.collectors.memory_guard import MemoryGuard

__all__ = ["Handle", "HttpApp", "HttpServer", "Reply", "RequestHead"]

_log = logging.getLogger(__name__)

_MAX_HEAD_BYTES: Final = 64 * 1024  # h11 answers 431 past this without a complete head (its default is 16 KiB)
_DISCARD_MAX_BYTES: Final = 64 * 1024  # refused bodies up to this declared size are read and dropped (keep-alive)
# Lingering close (see the module docstring): nginx's lingering_time / lingering_timeout, plus a byte cap. Dropping
# bytes is cheap (docs/results.md); these only bound a client that never stops.
_LINGER_MAX_S: Final = 30.0
_LINGER_QUIET_S: Final = 5.0
_LINGER_MAX_BYTES: Final = 256 * 1024 * 1024
TEXT: Final = "text/plain"
_REASONS: Final = {
    100: b"Continue",
    200: b"OK",
    204: b"No Content",
    304: b"Not Modified",
    400: b"Bad Request",
    401: b"Unauthorized",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    411: b"Length Required",
    413: b"Content Too Large",
    415: b"Unsupported Media Type",
    421: b"Misdirected Request",
    422: b"Unprocessable Content",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    501: b"Not Implemented",
    503: b"Service Unavailable",
    504: b"Gateway Timeout",
    505: b"HTTP Version Not Supported",
}
_TOO_MANY_BODY: Final = b"too many connections; retry later\n"
_TOO_MANY_CONNECTIONS: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    + f"Content-Length: {len(_TOO_MANY_BODY)}\r\n".encode()
    + b"Retry-After: 1\r\nConnection: close\r\n\r\n"
    + _TOO_MANY_BODY
)


@dataclass(frozen=True, slots=True)
class RequestHead:
    """A request as far as its head: what `HttpApp.route` decides on."""

    method: str
    path: str
    query: str  # the raw query string, without the '?'
    headers: Mapping[str, str]  # lower-case names, latin-1 values; a repeated header keeps its last value
    length: int | None  # the declared Content-Length; None for a chunked body; 0 for no body
    framed: bool  # a Content-Length or Transfer-Encoding was sent (h11 reads no body without either)


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes = b""
    content_type: str = TEXT
    headers: Mapping[str, str] = field(default_factory=dict)
    close: bool = False  # close the connection after this answer


def text_reply(status: int, message: str, headers: Mapping[str, str] | None = None) -> Reply:
    return Reply(status, message.encode() + b"\n", TEXT, headers or {})


@dataclass(frozen=True, slots=True)
class Handle:
    """An accepted request: its body (at most `max_body_bytes`) goes to `run`, in the server's thread pool.

    `refusal(status, message)` builds the application's answer when the server refuses the request on its behalf
    (413, 429, 503, 500), in the application's content type. `abandon`, if given, is called (on a thread of
    its own) when the client goes away, or the server stops, while `run` is still running."""

    run: Callable[[bytes], Reply | concurrent.futures.Future[Reply]]
    refusal: Callable[[int, str], Reply] = text_reply
    max_body_bytes: int = 0
    abandon: Callable[[], None] | None = None


class HttpApp(Protocol):
    def route(self, head: RequestHead) -> Reply | Handle:
        """Answer now or take the request; called on the loop thread, so it must not block."""
        ...


class HttpServer:
    """`start()` binds (raising OSError at once if the port is taken); `stop()` drains, then closes everything.

    `refused(outcome)` is told of each refusal the server makes for the application: "too_large", "memory",
    "overloaded", "connections"."""

    def __init__(
        self,
        app: HttpApp,
        *,
        name: str,
        host: str = "127.0.0.1",
        port: int = 0,
        max_inflight_bytes: int = 256 * 1024 * 1024,
        worker_threads: int = 2,
        max_connections: int = 1024,
        idle_timeout_s: float = 75.0,
        read_timeout_s: float = 30.0,
        memory_guard: MemoryGuard | None = None,
        refused: Callable[[str], None] | None = None,
    ) -> None:
        self.app = app
        self.name = name  # in thread names, and the transport the memory guard counts refusals under
        self.host = host
        self.memory_guard = memory_guard
        self.max_inflight_bytes = max_inflight_bytes
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.read_timeout_s = read_timeout_s
        self._refused = refused
        self._requested_port = port
        self._worker_threads = worker_threads
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._connections: set[_Connection] = set()
        self._inflight_bytes = 0
        self.stopping = False
        self.port = 0

    # --- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> HttpServer:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} server already started")
        self._executor = concurrent.futures.ThreadPoolExecutor(self._worker_threads, f"ragmon-{self.name}")
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
        self._thread = threading.Thread(target=run, name=f"ragmon-{self.name}-loop", daemon=True)
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
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    @property
    def inflight_bytes(self) -> int:
        return self._inflight_bytes

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, let running requests finish for up to `timeout_s` (then abandon them), close every
        connection."""
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

    async def _shutdown(self, timeout_s: float) -> None:
        self.stopping = True
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

    def admit(self, connection: _Connection) -> bool:
        if len(self._connections) >= self.max_connections:
            self.count("connections")
            return False
        self._connections.add(connection)
        return True

    def forget(self, connection: _Connection) -> None:
        self._connections.discard(connection)

    def count(self, outcome: str) -> None:
        if self._refused is not None:
            self._refused(outcome)

    async def run(self, handle: Handle, body: bytes) -> Reply:
        loop = asyncio.get_running_loop()
        reply = await loop.run_in_executor(self._executor, _call, handle, body)
        if isinstance(reply, Reply):
            return reply
        try:  # a deferred answer: awaited here, on the loop, not in a pool thread
            return await asyncio.wrap_future(reply)
        except Exception:
            _log.exception("HTTP request failed")
            return handle.refusal(500, "internal error")


def _call(handle: Handle, body: bytes) -> Reply | concurrent.futures.Future[Reply]:
    try:
        return handle.run(body)
    except Exception:  # a bug in a handler must not take the server down, nor leak a traceback to the client
        _log.exception("HTTP request failed")
        return handle.refusal(500, "internal error")


def _abandon(handle: Handle) -> None:
    if handle.abandon is None:
        return

    def run() -> None:
        try:
            handle.abandon()  # type: ignore[misc]
        except Exception:
            _log.exception("abandoning a request failed")

    threading.Thread(target=run, name="ragmon-http-abandon", daemon=True).start()


@dataclass(slots=True)
class _Upload:
    """An accepted request whose body is arriving."""

    handle: Handle
    chunked: bool
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0


class _Connection(asyncio.Protocol):
    """One client connection: feeds bytes to h11, acts on its events, answers in order."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.http = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD_BYTES)
        self.method = b""
        self.upload: _Upload | None = None
        self.running: Handle | None = None  # the handle whose `run` is in the pool
        self.reserved = 0  # in-flight budget held by `upload`, released when it is answered or dropped
        self.busy = False  # a request is in the pool; later (pipelined) bytes wait, reading paused
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
        if not self.server.admit(self):
            # Answered before any request: the client reads the 503 whatever it sends; what it sends is dropped.
            self.closing = True
            transport.write(_TOO_MANY_CONNECTIONS)
            if transport.can_write_eof():
                transport.write_eof()
            self.linger_until = self.loop.time() + _LINGER_QUIET_S
            self._arm(_LINGER_QUIET_S)
            return
        self._arm(self.server.idle_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.forget(self)
        if self.timer is not None:
            self.timer.cancel()
        if self.busy and self.running is not None:
            _abandon(self.running)  # nobody will read the answer: stop the work it waits for
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
            self._arm(self.server.read_timeout_s)  # a new request started: it must arrive in time
        self.http.receive_data(data)
        if self.busy:
            # Pipelined bytes wait in h11's buffer; TCP holds the rest, so that buffer stays small.
            if not self.paused and self.transport is not None:
                self.transport.pause_reading()
                self.paused = True
            return
        self._advance()

    def eof_received(self) -> bool:
        """The client shut its sending side (or closed). Keep ours open: a request that is all here is still
        answered (then we close); one cut short is a 400; a connection between requests just closes."""
        if self.linger_until or self.closing:
            return False
        with contextlib.suppress(RuntimeError):  # h11 refuses a second EOF; there is nothing more to read anyway
            self.http.receive_data(b"")
        if self.busy and self.running is not None:
            # A closed tab and a half-close look the same from here (a FIN): the work is abandoned as for a
            # client that is gone — the answer is still written if the client reads it. Handles without
            # `abandon` (an OTLP export) simply finish and answer.
            _abandon(self.running)
            self.running = None
        if not self.busy:
            self._advance()
        return True

    # state machine
    def _advance(self) -> None:
        while not self.busy and not self.closing:
            try:
                event = self.http.next_event()
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint if exc.error_status_hint in _REASONS else 400
                self._reply(text_reply(status, f"malformed request: {exc}"), close=True)
                return
            if isinstance(event, h11.Data):
                self._on_data(event.data)
            elif isinstance(event, h11.Request):
                self._on_request(event)
            elif isinstance(event, h11.EndOfMessage):
                self._on_end()
            elif isinstance(event, h11.ConnectionClosed):
                self._close()  # the client half-closed between requests: every request it sent is answered
                return
            else:  # NEED_DATA; PAUSED (our answer is pending)
                return

    def _on_request(self, request: h11.Request) -> None:
        server = self.server
        self.method = request.method
        if request.http_version not in (b"1.1", b"1.0"):
            self._reply(text_reply(505, "HTTP/1.1 only"), close=True)
            return
        fields: dict[bytes, bytes] = dict(request.headers)  # h11 lower-cases names, validated Content-Length
        length_text = fields.get(b"content-length")
        chunked = b"transfer-encoding" in fields  # h11 refuses (501) any coding other than chunked
        if chunked and length_text is not None:
            # RFC 9112 §6.3: a request smuggling pattern; a server may refuse it, and must close after it.
            self._reply(text_reply(400, "both Content-Length and Transfer-Encoding"), close=True)
            return
        # The body's declared size: None when chunked, 0 without framing (h11 reads no body then).
        length = int(length_text) if length_text is not None else None if chunked else 0
        target = request.target.decode("latin-1")
        path, _, query = target.partition("?")
        head = RequestHead(
            method=request.method.decode("latin-1"),
            path=path,
            query=query,
            headers={name.decode("latin-1"): value.decode("latin-1") for name, value in fields.items()},
            length=length,
            framed=length_text is not None or chunked,
        )
        try:
            routed = server.app.route(head)
        except Exception:
            _log.exception("routing an HTTP request failed")
            routed = text_reply(500, "internal error")
        if isinstance(routed, Reply):
            self._refuse(length, routed)
            return
        handle = routed
        if length is not None and length > handle.max_body_bytes:
            server.count("too_large")
            message = f"body of {length} bytes exceeds the limit of {handle.max_body_bytes} bytes"
            self._reply(handle.refusal(413, message), close=True)
            return
        # A declared length is reserved whole, now. A chunked body is reserved as its bytes arrive: reserving
        # max_body_bytes up front would admit only max_inflight / max_body (16 by default) chunked uploads at once
        # though OTLP bodies are ~100 KB, throttling Node.js apps for nothing; the price is that a budget refusal
        # may come mid-upload (answered like a 413, with a lingering close).
        # Before the body is read: a refused request costs the agent no memory (the client retries after the wait).
        guard = server.memory_guard
        if guard is not None and (wait_s := guard.admit(server.name)) is not None:
            server.count("memory")
            retry_after = {"Retry-After": str(max(1, math.ceil(wait_s)))}
            self._refuse(length, _with_headers(handle.refusal(429, guard.reason), retry_after))
            return
        if server.stopping or not server.reserve(length or 0):
            self._overloaded(handle, length)
            return
        self.reserved = length or 0
        self.upload = _Upload(handle, chunked)
        if self.http.they_are_waiting_for_100_continue:
            self._write(self.http.send(h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")))

    def _on_data(self, data: bytes) -> None:
        upload = self.upload
        if upload is None:  # the rest of a refused request's small body: dropped
            return
        upload.size += len(data)
        if upload.chunked:
            server, handle = self.server, upload.handle
            if upload.size > handle.max_body_bytes:
                self.upload = None
                server.count("too_large")
                message = f"chunked body exceeds the limit of {handle.max_body_bytes} bytes"
                self._reply(handle.refusal(413, message), close=True)
                return
            if not server.reserve(len(data)):
                self._overloaded(handle, None)
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
        self.running = upload.handle
        if self.timer is not None:
            self.timer.cancel()
        self.loop.create_task(self._run(upload.handle, body))

    def _overloaded(self, handle: Handle, length: int | None) -> None:
        self.server.count("overloaded")
        refusal = _with_headers(handle.refusal(503, "server is busy; retry later"), {"Retry-After": "1"})
        self._refuse(length, refusal)

    def _refuse(self, length: int | None, reply: Reply) -> None:
        """Answer without using the request body: read and drop a small declared one to keep the connection;
        close (lingering) for a large or chunked one, or one the client holds back for a 100 Continue."""
        self._release()
        self.upload = None
        waiting = self.http.they_are_waiting_for_100_continue
        close = length is None or length > _DISCARD_MAX_BYTES or (waiting and length > 0)
        self._reply(reply, close=close)

    async def _run(self, handle: Handle, body: bytes) -> None:
        try:
            reply = await self.server.run(handle, body)
            self._release()  # before answering: a client that has its answer finds the budget free
            self._reply(reply, close=self.close_after_idle)
        finally:
            self._release()
            self.busy = False
            self.running = None
            if not self.closing:
                if self.paused and self.transport is not None:
                    self.paused = False
                    self.transport.resume_reading()
                if not self.idle:  # pipelined bytes, or the client's end of stream, are waiting
                    self._advance()

    def _reply(self, reply: Reply, *, close: bool = False, linger: bool = True) -> None:
        if self.transport is None or self.closing:
            return
        body = reply.body
        fields = [(b"Content-Type", reply.content_type.encode()), (b"Content-Length", str(len(body)).encode())]
        fields.extend((name.encode(), value.encode("latin-1")) for name, value in reply.headers.items())
        if close or reply.close:
            fields.append((b"Connection", b"close"))
        http = self.http
        try:
            status = reply.status
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
        pending, ended = http.trailing_data
        self.idle = not pending and not ended  # pipelined bytes, or the client's EOF, are here: read on
        if self.close_after_idle and self.idle:
            self._close()
            return
        self._arm(self.server.idle_timeout_s if self.idle else self.server.read_timeout_s)

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
            self.server.release(self.reserved)
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
            self._reply(text_reply(408, "request not received in time"), close=True, linger=False)

    def close_when_idle(self) -> None:
        self.close_after_idle = True
        if not self.busy and self.idle:
            self._close()

    def abort(self) -> None:
        if self.busy and self.running is not None:
            _abandon(self.running)
            self.running = None
        if self.transport is not None:
            self.transport.abort()


def _with_headers(reply: Reply, headers: Mapping[str, str]) -> Reply:
    return Reply(reply.status, reply.body, reply.content_type, {**reply.headers, **headers}, reply.close)
