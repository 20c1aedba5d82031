"""Shared test fakes: a scripted, OpenAI-compatible HTTP server on loopback.

`ScriptedOpenAIServer` is a real HTTP server (127.0.0.1, ephemeral port, one background thread per connection)
that speaks just enough of the OpenAI API for clients to be tested end to end — the official `openai` client,
httpx code such as the LLM judge, or anything else pointed at ``server.base_url``:

- ``POST /v1/chat/completions``, plain JSON or, with ``"stream": true``, server-sent events (``data: {...}``
  chunks, a final usage chunk when ``stream_options.include_usage`` is set, then ``data: [DONE]``);
- ``POST /v1/embeddings``, float vectors or base64 (the ``openai`` client asks for base64 unless told otherwise).

Tests script the replies::

    with ScriptedOpenAIServer() as server:
        server.script(ErrorReply(429, retry_after_s=0.05), Completion("Paris.", prompt_tokens=12))
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=1)
        ...
        assert [r.path for r in server.requests] == ["/v1/chat/completions"] * 2

Scripted replies are served first in, first out, whatever the path; an entry may also be a callable
``(request_json) -> Reply``. When the script is empty, ``default`` (a reply or a callable; a constructor argument
or ``server.default = ...``) answers; without one, chat requests get ``Completion("ok")`` and embedding requests
``EmbeddingsReply()``. A callable that raises produces a 500 and is kept in ``server.handler_errors`` so a test
can assert there were none.

Reply kinds: `Completion` (content, token usage incl. cached tokens, finish reason, model; streamed when the
request asks, with per-chunk delays), `EmbeddingsReply`, `ErrorReply` (status, Retry-After, body), `RawReply`
(any bytes: malformed JSON, wrong content type) and `TruncatedReply` (promises more bytes than it sends). Every
reply has ``delay_s``, waited before the status line, to trigger client timeouts.

`FlakyReplies` is a reply callable for fault tests: it fails a given share of requests (429 with Retry-After,
500, 503 with an HTML body, a reply slower than the client's timeout, a 200 with a garbage body, a body cut
short), chosen by a seeded generator so a run is reproducible, and logs every fault with the request it hit.

The server only uses the standard library, binds loopback only, answers every request with
``Connection: close`` (no idle keep-alive threads to wait for), and stops by itself when its ``with`` block ends:
scripted delays wake up at once on stop, and handler threads are joined with a bound.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import itertools
import json
import math
import random
import socket
import struct
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType, TracebackType
from typing import Any, Union

__all__ = [
    "Completion",
    "EmbeddingsReply",
    "ErrorReply",
    "FaultRecord",
    "FlakyReplies",
    "RawReply",
    "RecordedRequest",
    "Reply",
    "ReplyFn",
    "ScriptedOpenAIServer",
    "TruncatedReply",
    "malformed_json",
]

_JOIN_TIMEOUT_S = 2.0  # stop() waits at most this long for handler threads (delays are already woken)


# --- replies -----------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Reply:
    """Base of every scripted reply. `delay_s` is waited before the status line is sent."""

    delay_s: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)  # extra response headers


@dataclass(frozen=True)
class Completion(Reply):
    """A chat completion. Served as one JSON object, or as SSE chunks when the request has ``stream: true``.

    `content` is the answer; given as a sequence of strings, those are the streamed chunks (joined for a
    non-streaming request). A plain string is streamed word by word. `chunk_delay_s` is waited before each
    content chunk (a sequence gives one delay per chunk; the first one is the time to first token).
    `completion_tokens=None` counts the chunks. `model=None` echoes the request's model.
    `truncate_after_chunks` drops the connection after that many content chunks (a broken stream).
    """

    content: str | Sequence[str] = "ok"
    prompt_tokens: int = 10
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str = "stop"
    model: str | None = None
    chunk_delay_s: float | Sequence[float] = 0.0
    truncate_after_chunks: int | None = None

    @property
    def chunks(self) -> list[str]:
        if isinstance(self.content, str):
            words = self.content.split(" ")
            return [w if i == 0 else " " + w for i, w in enumerate(words)]
        return list(self.content)

    @property
    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(self.content)

    def chunk_delay(self, index: int) -> float:
        if isinstance(self.chunk_delay_s, int | float):
            return float(self.chunk_delay_s)
        return float(self.chunk_delay_s[index]) if index < len(self.chunk_delay_s) else 0.0


@dataclass(frozen=True)
class EmbeddingsReply(Reply):
    """An embeddings response. `vectors=None` makes one deterministic unit vector per input, of the request's
    ``dimensions`` (or `dimensions`). Encoded as base64 float32 when the request asks for it."""

    vectors: Sequence[Sequence[float]] | None = None
    dimensions: int = 8
    prompt_tokens: int | None = None  # None: the number of whitespace-separated words in the inputs
    model: str | None = None


@dataclass(frozen=True)
class ErrorReply(Reply):
    """An HTTP error. `body=None` sends an OpenAI-style ``{"error": {...}}`` object.

    `retry_after_s` becomes a ``Retry-After`` header (seconds; fractions allowed, as the openai client reads
    them); use `headers` for ``retry-after-ms`` or anything else.
    """

    status: int = 500
    body: Any = None
    retry_after_s: float | None = None


@dataclass(frozen=True)
class RawReply(Reply):
    """Any status, content type and bytes, sent verbatim (with a correct Content-Length)."""

    body: bytes = b""
    status: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True)
class TruncatedReply(Reply):
    """A 200 whose Content-Length promises `promised_bytes` but whose body stops after `body`: the connection
    closes mid-body, as when a proxy or the server dies."""

    body: bytes = b'{"id": "chatcmpl-trunc", "object": "chat.completion", "choices": ['
    promised_bytes: int = 4096


def malformed_json() -> RawReply:
    """A 200 with a JSON content type and a body that is not JSON."""
    return RawReply(body=b'{"id": "chatcmpl-bad", "choices": [{"index": 0, "message": ')


ReplyFn = Callable[[Any], Reply]
"""A reply computed from the request's parsed JSON body (None when the body is not JSON)."""


# --- fault injection ---------------------------------------------------------------------------------------
FAULT_KINDS = ("429", "500", "503_html", "timeout", "garbage", "truncated")


@dataclass(frozen=True)
class FaultRecord:
    """One request `FlakyReplies` answered: which request (a digest of its JSON body), what it got, and when."""

    body_key: str
    kind: str  # "ok" or one of FAULT_KINDS
    at_s: float  # time.monotonic() when the reply was chosen (before it was sent)
    retry_after_s: float | None = None


class FlakyReplies:
    """A reply callable failing `failure_ratio` of requests with faults drawn from `kinds` (seeded, so the
    sequence of faults is the same in every run), and answering the rest with `ok`.

    - ``429``: `ErrorReply(429)` with ``Retry-After`` drawn from `retry_after_s` (a (low, high) range);
    - ``500``: `ErrorReply(500)`; ``503_html``: a 503 whose body is an HTML page (a proxy's);
    - ``timeout``: the `ok` reply, but `timeout_delay_s` late (set it above the client's timeout);
    - ``garbage``: a 200 whose body is not JSON; ``truncated``: a 200 cut short mid-body.

    `records` logs every request with what it got; `injected` counts faults by kind. Thread-safe (the server
    calls it from one thread per connection)."""

    def __init__(
        self,
        ok: ReplyFn | Reply,
        *,
        failure_ratio: float = 0.7,
        seed: int = 0,
        kinds: Sequence[str] = FAULT_KINDS,
        retry_after_s: tuple[float, float] = (0.05, 0.2),
        timeout_delay_s: float = 1.0,
    ) -> None:
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown or not kinds:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {list(FAULT_KINDS)}")
        if not 0.0 <= failure_ratio <= 1.0:
            raise ValueError(f"failure_ratio must be within [0, 1], not {failure_ratio}")
        self.ok = ok
        self.failure_ratio = failure_ratio
        self.kinds = tuple(kinds)
        self.retry_after_s = retry_after_s
        self.timeout_delay_s = timeout_delay_s
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.records: list[FaultRecord] = []
        self.injected: Counter[str] = Counter()

    def __call__(self, request: Any) -> Reply:
        key = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:16]
        with self._lock:
            fails = self._rng.random() < self.failure_ratio
            kind = self._rng.choice(self.kinds) if fails else "ok"
            retry_after = round(self._rng.uniform(*self.retry_after_s), 3) if kind == "429" else None
            self.records.append(FaultRecord(key, kind, time.monotonic(), retry_after))
            if fails:
                self.injected[kind] += 1
        if kind == "429":
            return ErrorReply(429, retry_after_s=retry_after)
        if kind == "500":
            return ErrorReply(500)
        if kind == "503_html":
            return RawReply(
                status=503, body=b"<html><body>503 Service Unavailable</body></html>", content_type="text/html"
            )
        if kind == "garbage":
            return malformed_json()
        if kind == "truncated":
            return TruncatedReply()
        reply = self.ok(request) if callable(self.ok) else self.ok
        if kind == "timeout":
            return dataclasses.replace(reply, delay_s=self.timeout_delay_s)
        return reply

    @property
    def faults(self) -> int:
        with self._lock:
            return sum(self.injected.values())


ScriptItem = Union[Reply, ReplyFn]  # noqa: UP007  (a runtime alias: `|` on a Callable alias fails at runtime)


# --- recorded requests -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it. Header names are lower-cased."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    json: Any  # the parsed body, or None when it was empty or not JSON
    received_at_s: float  # time.monotonic() when the request line was read


# --- the server --------------------------------------------------------------------------------------------
class ScriptedOpenAIServer:
    """A scripted OpenAI-compatible endpoint on ``http://127.0.0.1:<port>/v1``. See the module docstring."""

    def __init__(self, replies: Sequence[ScriptItem] = (), *, default: ScriptItem | None = None) -> None:
        self._lock = threading.Lock()
        self._script: deque[ScriptItem] = deque(replies)
        self._default = default
        self._requests: list[RecordedRequest] = []
        self._handler_errors: list[BaseException] = []
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._httpd: _Server | None = None
        self._serve_thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> ScriptedOpenAIServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _Server(("127.0.0.1", 0), _Handler, self)
        self._httpd = httpd
        self._serve_thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-openai", daemon=True
        )
        self._serve_thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wake scripted delays, close open connections and join handler threads (bounded)."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.close_connections()
        httpd.server_close()
        httpd.join_handlers(_JOIN_TIMEOUT_S)
        if self._serve_thread is not None:
            self._serve_thread.join(_JOIN_TIMEOUT_S)
            self._serve_thread = None

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- addresses -------------------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("ScriptedOpenAIServer is not running")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` without a path."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as ``base_url``: ``http://127.0.0.1:<port>/v1``."""
        return f"{self.url}/v1"

    # -- scripting -------------------------------------------------------------------------------------------
    @property
    def default(self) -> ScriptItem | None:
        """What answers when the script is empty (None: `Completion()` / `EmbeddingsReply()` by path)."""
        with self._lock:
            return self._default

    @default.setter
    def default(self, item: ScriptItem | None) -> None:
        with self._lock:
            self._default = item

    def script(self, *replies: ScriptItem) -> None:
        """Append replies (or callables) to the queue; each request takes the oldest one."""
        with self._lock:
            self._script.extend(replies)

    @property
    def pending(self) -> int:
        """Scripted replies not yet served."""
        with self._lock:
            return len(self._script)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of the requests received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def handler_errors(self) -> list[BaseException]:
        """Exceptions raised by reply callables (each answered with a 500)."""
        with self._lock:
            return list(self._handler_errors)

    def clear(self) -> None:
        """Forget recorded requests and drop the remaining script."""
        with self._lock:
            self._requests.clear()
            self._script.clear()
            self._handler_errors.clear()

    # -- used by the handler ---------------------------------------------------------------------------------
    def _record_and_choose(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self._requests.append(request)
            item = self._script.popleft() if self._script else self._default
        if item is None:
            return _default_reply(request.path)
        if isinstance(item, Reply):
            return item
        try:
            reply = item(request.json)
        except Exception as exc:  # the test's callable is broken: say so loudly, and answer 500
            with self._lock:
                self._handler_errors.append(exc)
            return ErrorReply(500, body={"error": {"message": f"reply callable raised {exc!r}", "type": "fake"}})
        if not isinstance(reply, Reply):
            error = TypeError(f"reply callable returned {type(reply).__name__}, not a Reply")
            with self._lock:
                self._handler_errors.append(error)
            return ErrorReply(500, body={"error": {"message": str(error), "type": "fake"}})
        return reply

    def _wait(self, delay_s: float) -> bool:
        """Sleep `delay_s` unless the server stops meanwhile; True when it is stopping."""
        if delay_s <= 0:
            return self._stopping.is_set()
        return self._stopping.wait(delay_s)

    def _next_id(self) -> int:
        return next(self._ids)


def _default_reply(path: str) -> Reply:
    if path.endswith("/embeddings"):
        return EmbeddingsReply()
    if path.endswith("/chat/completions"):
        return Completion()
    return ErrorReply(404, body={"error": {"message": f"no route for {path}", "type": "invalid_request_error"}})


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer that tracks its handler threads and sockets so `stop()` can end them."""

    daemon_threads = True  # a wedged handler must never keep the test process alive
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], owner: ScriptedOpenAIServer
    ) -> None:
        self.owner = owner
        self._track_lock = threading.Lock()
        self._handler_threads: set[threading.Thread] = set()
        self._sockets: set[socket.socket] = set()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._run_handler, args=(request, client_address), name="scripted-openai-handler", daemon=True
        )
        with self._track_lock:
            self._handler_threads = {t for t in self._handler_threads if t.is_alive()}
            self._handler_threads.add(thread)
            self._sockets.add(request)
        thread.start()

    def _run_handler(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            pass  # client went away (timeout, reset); nothing to report
        finally:
            with self._track_lock:
                self._sockets.discard(request)
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        return None  # clients that time out on purpose reset connections; no tracebacks on stderr

    def close_connections(self) -> None:
        with self._track_lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):  # already closed by the client
                sock.shutdown(socket.SHUT_RDWR)

    def join_handlers(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self._track_lock:
            threads = list(self._handler_threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # needed for chunked transfer encoding of streams
    server_version = "ScriptedOpenAI/1"
    timeout = 10  # socket timeout: a client that never sends its body cannot wedge a thread for long
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return None  # quiet: tests read `server.requests` instead

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    # -- request ---------------------------------------------------------------------------------------------
    def _serve(self) -> None:
        received_at_s = time.monotonic()
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        try:
            parsed: Any = json.loads(body) if body else None
        except ValueError:
            parsed = None
        path = self.path.split("?", 1)[0]
        request = RecordedRequest(
            method=self.command,
            path=path,
            headers=MappingProxyType({k.lower(): v for k, v in self.headers.items()}),
            body=body,
            json=parsed,
            received_at_s=received_at_s,
        )
        reply = owner._record_and_choose(request)
        if owner._wait(reply.delay_s):
            return  # stopping: drop the connection without a reply
        self.close_connection = True
        if isinstance(reply, Completion):
            if isinstance(parsed, dict) and parsed.get("stream") is True:
                self._send_stream(reply, parsed)
            else:
                self._send_json(200, _completion_body(reply, parsed, owner._next_id()), reply.headers)
        elif isinstance(reply, EmbeddingsReply):
            self._send_json(200, _embeddings_body(reply, parsed), reply.headers)
        elif isinstance(reply, ErrorReply):
            headers = dict(reply.headers)
            if reply.retry_after_s is not None:
                headers["Retry-After"] = _number(reply.retry_after_s)
            self._send_json(reply.status, reply.body if reply.body is not None else _error_body(reply.status), headers)
        elif isinstance(reply, RawReply):
            self._send_bytes(reply.status, reply.body, reply.content_type, reply.headers)
        elif isinstance(reply, TruncatedReply):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(max(reply.promised_bytes, len(reply.body) + 1)))
            self._send_extra_headers(reply.headers)
            self.end_headers()
            self.wfile.write(reply.body)
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)  # cut the body short: the client sees an early EOF
        else:
            self._send_json(500, {"error": {"message": f"unknown reply {type(reply).__name__}", "type": "fake"}}, {})

    # -- response helpers ------------------------------------------------------------------------------------
    def _send_extra_headers(self, headers: Mapping[str, str]) -> None:
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Connection", "close")

    def _send_bytes(self, status: int, body: bytes, content_type: str, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self._send_extra_headers(headers)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _send_json(self, status: int, document: Any, headers: Mapping[str, str]) -> None:
        self._send_bytes(status, json.dumps(document).encode(), "application/json", headers)

    def _send_stream(self, reply: Completion, request: dict[str, Any]) -> None:
        owner = self.server.owner
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self._send_extra_headers(reply.headers)
        self.end_headers()
        ident = f"chatcmpl-{owner._next_id()}"
        model = reply.model or str(request.get("model") or "scripted")
        options = request.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        created = int(time.time())

        def event(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> None:
            chunk: dict[str, Any] = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": choices,
            }
            if include_usage:
                chunk["usage"] = usage  # OpenAI sends "usage": null on every chunk but the last
            self._write_chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")

        # The role arrives first, before any token, as OpenAI sends it.
        event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        chunks = reply.chunks
        for i, text in enumerate(chunks):
            if reply.truncate_after_chunks is not None and i >= reply.truncate_after_chunks:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)  # no terminating chunk: a broken stream
                return
            if owner._wait(reply.chunk_delay(i)):
                return
            event([{"index": 0, "delta": {"content": text}, "finish_reason": None}])
        event([{"index": 0, "delta": {}, "finish_reason": reply.finish_reason}])
        if include_usage:
            event([], _usage(reply, len(chunks)))
        self._write_chunk(b"data: [DONE]\n\n")
        self._write_chunk(b"")  # the zero-length chunk ends the chunked body

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


# --- response bodies ---------------------------------------------------------------------------------------
def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _usage(reply: Completion, chunk_count: int) -> dict[str, Any]:
    completion_tokens = reply.completion_tokens if reply.completion_tokens is not None else chunk_count
    usage: dict[str, Any] = {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": reply.prompt_tokens + completion_tokens,
    }
    if reply.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
    return usage


def _completion_body(reply: Completion, request: Any, number: int) -> dict[str, Any]:
    model = reply.model or (str(request.get("model")) if isinstance(request, dict) else "scripted")
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.text},
                "logprobs": None,
                "finish_reason": reply.finish_reason,
            }
        ],
        "usage": _usage(reply, len(reply.chunks)),
    }


def _inputs(request: Any) -> list[Any]:
    raw = request.get("input") if isinstance(request, dict) else None
    if raw is None:
        return [""]
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and raw and all(isinstance(x, int) for x in raw):
        return [raw]  # one input given as token ids
    return list(raw) if isinstance(raw, list) else [raw]


def _unit_vector(seed: str, dimensions: int) -> list[float]:
    """A deterministic unit vector: same input, same vector, across runs."""
    digest = hashlib.sha256(seed.encode()).digest()
    raw = [(digest[i % len(digest)] - 127.5) / 127.5 + 1e-3 * i for i in range(dimensions)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    # Round through float32 so base64 and float encodings carry the same numbers.
    return [struct.unpack("<f", struct.pack("<f", x / norm))[0] for x in raw]


def _embeddings_body(reply: EmbeddingsReply, request: Any) -> dict[str, Any]:
    inputs = _inputs(request)
    if reply.vectors is not None:
        vectors = [list(map(float, v)) for v in reply.vectors]
    else:
        requested = request.get("dimensions") if isinstance(request, dict) else None
        dimensions = requested if isinstance(requested, int) and requested > 0 else reply.dimensions
        vectors = [_unit_vector(json.dumps(x), dimensions) for x in inputs]
    as_base64 = isinstance(request, dict) and request.get("encoding_format") == "base64"
    data = []
    for i, vector in enumerate(vectors):
        encoded: Any = (
            base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii") if as_base64 else vector
        )
        data.append({"object": "embedding", "index": i, "embedding": encoded})
    if reply.prompt_tokens is not None:
        tokens = reply.prompt_tokens
    else:
        tokens = sum(len(x) if isinstance(x, list) else len(str(x).split()) for x in inputs)
    model = reply.model or (str(request.get("model")) if isinstance(request, dict) else "scripted")
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def _error_body(status: int) -> dict[str, Any]:
    kind, code = _ERROR_TYPES.get(status, ("server_error", None))
    return {"error": {"message": f"scripted error {status}", "type": kind, "param": None, "code": code}}
