"""Hostile input and faults on the agent's API port (issue 37): a key is checked before any body byte is read, an
oversized body is refused while it is being sent, slow and surplus connections cost bounded threads, the memory
guard covers the port, and one tenant's long queries never hold the port for another tenant.

Each test would have failed on the API's `http.server` stack: it read the whole body before the key (1), had no
read deadline and a thread per connection (5), no guard and no per-tenant bound (2)."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from ragmon.collectors.auth import ApiKeyAuth
from ragmon.collectors.memory_guard import MemoryGuard, read_rss_bytes

from ragmon.agent.api import ApiServer
from tests.faults.faults_support import raw_exchange

pytestmark = pytest.mark.faults

HOST = "127.0.0.1"
KEYS = {"acme": "k-acme", "globex": "k-globex"}
MiB = 1024 * 1024


class HeldQueries:
    """The store's side of `/api/query`, as a class the tests drive: a query whose SQL says "hold" waits until
    released (or cancelled); any other answers at once. Records what was cancelled."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.running: dict[str, threading.Event] = {}
        self.cancelled: list[str] = []
        self.started = threading.Semaphore(0)
        self._lock = threading.Lock()

    def query(self, sql: str, params: dict[str, Any], tenant: str | None, max_rows: int, tag: str) -> list[Any]:
        if "hold" not in sql:
            return [{"tenant": tenant, "n": 1}]
        stop = threading.Event()
        with self._lock:
            self.running[tag] = stop
        self.started.release()
        while not (self.release.is_set() or stop.is_set()):
            stop.wait(0.01)
        with self._lock:
            del self.running[tag]
        return [{"cancelled": stop.is_set()}]

    def cancel(self, tag: str) -> None:
        with self._lock:
            self.cancelled.append(tag)
            if tag in self.running:
                self.running[tag].set()


class TokenJudge:
    """The judge endpoints' side: a token, and nothing to serve."""

    def allows(self, presented: str | None) -> bool:
        return presented == "judge-token"

    def payloads(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        return {}

    def write_scores(self, rows: list[dict[str, Any]]) -> int:
        return len(rows)


@pytest.fixture
def queries() -> Iterator[HeldQueries]:
    held = HeldQueries()
    yield held
    held.release.set()


def _server(queries: HeldQueries, **options: Any) -> ApiServer:
    auth = ApiKeyAuth(KEYS)
    return ApiServer(
        HOST, 0, lambda *a: [], queries.query, auth, judge=TokenJudge(), cancel_query=queries.cancel, **options
    ).start()


def _port(server: ApiServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def _ask(port: int, sql: str, key: str, timeout_s: float = 30.0) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout_s)
    try:
        conn.request("POST", "/api/query", body=json.dumps({"sql": sql}), headers={"x-api-key": key})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


@pytest.mark.parametrize(("declared", "status"), [(256 * MiB, b"401"), (-1, b"400")], ids=["declared", "minus-one"])
def test_an_unauthenticated_upload_is_refused_on_its_head_and_never_held(
    queries: HeldQueries, declared: int, status: bytes
) -> None:
    """256 MiB streamed without a key: the answer comes before the first body byte is sent, and what follows is
    dropped as it arrives (resident memory does not grow by the upload's size). `Content-Length: -1` is malformed
    (the old `http.server` handler read it as "to the end of the stream", and held all of it)."""
    server = _server(queries)
    size = 256 * MiB
    try:
        with socket.create_connection((HOST, _port(server)), timeout=30) as sock:
            sock.sendall(f"POST /api/query HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\n\r\n".encode())
            head = _read_head(sock)  # no body byte sent yet: the answer cannot have waited for it
            assert head.startswith(b"HTTP/1.1 " + status), head[:200]
            before = read_rss_bytes()
            chunk, sent = bytes(MiB), 0
            try:
                while sent < size:
                    sock.sendall(chunk)
                    sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server may stop reading a client that never stops: it owed it nothing more
            grown = read_rss_bytes() - before
        assert grown < 64 * MiB, f"resident memory grew {grown / MiB:.0f} MiB while dropping {sent / MiB:.0f} MiB"
        assert queries.running == {} and queries.cancelled == []
    finally:
        server.stop()


@pytest.mark.parametrize(
    "head",
    [
        b"POST /api/query HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\n\r\n",
        b"POST /api/query HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST /api/judge/scores HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n",
        b"POST /api/query HTTP/1.1\r\nHost: x\r\nx-api-key: k-acme\r\nContent-Length: 2000000\r\n\r\n",
    ],
    ids=["no-key-expect-continue", "no-key-chunked", "no-judge-token", "keyed-but-over-the-limit"],
)
def test_a_refusal_comes_before_the_body(queries: HeldQueries, head: bytes) -> None:
    server = _server(queries)
    try:
        with socket.create_connection((HOST, _port(server)), timeout=30) as sock:
            sock.sendall(head)
            answer = _read_head(sock)
        status = int(answer.split(b" ", 2)[1])
        assert status in (401, 403, 413), answer[:200]
        assert b"100 Continue" not in answer
    finally:
        server.stop()


def test_malformed_heads_are_answered_and_the_port_keeps_serving(queries: HeldQueries) -> None:
    server = _server(queries)
    port = _port(server)
    try:
        for raw, expected in [
            (b"GARBAGE\r\n\r\n", 400),
            (b"POST /api/query HTTP/2.0\r\n\r\n", 505),
            (b"POST /api/query HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400),
            (b"GET /api/report HTTP/1.1\r\nX: " + b"a" * (70 * 1024), 431),
            (b"POST /api/query HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        ]:
            answer = raw_exchange(port, raw)
            assert int(answer.split(b" ", 2)[1]) == expected, answer[:200]
        assert _ask(port, "SELECT 1", KEYS["acme"]) == (200, [{"tenant": "acme", "n": 1}])
    finally:
        server.stop()


def test_slow_heads_are_timed_out_without_a_thread_each(queries: HeldQueries) -> None:
    """Slowloris heads are answered 408 after the read deadline; the thread count does not follow the connection
    count; a good client is answered meanwhile."""
    threads_before = threading.active_count()
    server = _server(queries, read_timeout_s=1.0)
    port = _port(server)
    slow = [socket.create_connection((HOST, port), timeout=30) for _ in range(200)]
    try:
        for sock in slow:
            sock.sendall(b"POST /api/query HTTP/1.1\r\nHost: x\r\n")  # and never the rest of the head
        assert _ask(port, "SELECT 1", KEYS["globex"]) == (200, [{"tenant": "globex", "n": 1}])
        assert threading.active_count() - threads_before < 20
        for sock in slow:
            answer = _read_head(sock)
            assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    finally:
        for sock in slow:
            sock.close()
        server.stop()


def test_connections_past_the_cap_are_answered_503_at_once(queries: HeldQueries) -> None:
    server = _server(queries, max_connections=40)
    port = _port(server)
    held = [socket.create_connection((HOST, port), timeout=30) for _ in range(40)]
    try:
        for sock in held:  # each is taken (answered) before the surplus is opened
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _read_head(sock).startswith(b"HTTP/1.1 200")
        for _ in range(10):
            with socket.create_connection((HOST, port), timeout=30) as sock:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = _read_head(sock)
            assert answer.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in answer, answer[:200]
        held.pop().close()
        deadline = time.monotonic() + 30  # a place frees when the server sees the close
        while server.open_connections >= 40 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _ask(port, "SELECT 1", KEYS["acme"]) == (200, [{"tenant": "acme", "n": 1}])
    finally:
        for sock in held:
            sock.close()
        server.stop()


def test_one_tenant_cannot_hold_the_port_from_another(queries: HeldQueries) -> None:
    """Tenant A's long queries take at most `max_queries_per_tenant` of the pool: A's next is 429 with
    Retry-After, tenant B is answered while A's run."""
    server = _server(queries, max_queries_per_tenant=2, worker_threads=4)
    port = _port(server)
    held: list[tuple[int, Any]] = []
    runners = [threading.Thread(target=lambda: held.append(_ask(port, "SELECT hold", KEYS["acme"]))) for _ in "ab"]
    try:
        for runner in runners:
            runner.start()
        for _ in runners:
            assert queries.started.acquire(timeout=30)
        status, body = _ask(port, "SELECT hold", KEYS["acme"])
        assert status == 429 and "already runs 2 queries" in body["error"]
        assert _ask(port, "SELECT 1", KEYS["globex"]) == (200, [{"tenant": "globex", "n": 1}])
    finally:
        queries.release.set()
        for runner in runners:
            runner.join(30)
        server.stop()
    assert held == [(200, [{"cancelled": False}])] * 2


def test_a_query_whose_client_goes_away_is_cancelled(queries: HeldQueries) -> None:
    server = _server(queries)
    try:
        with socket.create_connection((HOST, _port(server)), timeout=30) as sock:
            body = json.dumps({"sql": "SELECT hold"}).encode()
            sock.sendall(
                b"POST /api/query HTTP/1.1\r\nHost: x\r\nx-api-key: k-acme\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert queries.started.acquire(timeout=30)
        # The cancel and the query's own end are two steps on two threads: wait for both (a busy machine may run
        # the query's thread well after the cancel).
        deadline = time.monotonic() + 30
        while (not queries.cancelled or queries.running) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(queries.cancelled) == 1
        assert queries.running == {}  # the cancelled query ended
    finally:
        server.stop()


class Readings:
    def __init__(self, value: int) -> None:
        self.value = value

    def __call__(self) -> int:
        return self.value


def test_the_memory_guard_covers_the_api_port(queries: HeldQueries) -> None:
    rss = Readings(950 * MiB)
    guard = MemoryGuard(1000 * MiB, high_water_bytes=900 * MiB, low_water_bytes=800 * MiB, read_rss=rss)
    guard.sample()
    server = _server(queries, memory_guard=guard)
    port = _port(server)
    try:
        conn = http.client.HTTPConnection(HOST, port, timeout=30)
        conn.request("POST", "/api/query", body=b'{"sql": "SELECT 1"}', headers={"x-api-key": KEYS["acme"]})
        response = conn.getresponse()
        assert (response.status, response.getheader("Retry-After")) == (429, "1")
        response.read()
        conn.request("GET", "/health")  # health is answered whatever the memory
        assert conn.getresponse().status == 200
        conn.close()
        rss.value = 700 * MiB
        guard.sample()
        assert _ask(port, "SELECT 1", KEYS["acme"]) == (200, [{"tenant": "acme", "n": 1}])
    finally:
        server.stop()


class SlowDashboard:
    """The dashboard's side: a view whose reads wait until their scope is cancelled (as the store's do)."""

    def __init__(self) -> None:
        self.scopes: dict[str, threading.Event] = {}
        self.started = threading.Semaphore(0)
        self.current = threading.local()

    @contextlib.contextmanager
    def reading(self, tag: str) -> Iterator[str]:
        self.scopes[tag] = threading.Event()
        self.current.tag = tag
        yield tag

    def cancel(self, tag: str) -> None:
        self.scopes[tag].set()

    @staticmethod
    def handles(path: str) -> bool:
        return path.startswith("/api/dashboard/")

    @staticmethod
    def handles_post(path: str) -> bool:
        return False

    def get(self, path: str, query: str, headers: Any) -> Any:
        from ragmon.dashboard import Response

        self.started.release()
        cancelled = self.scopes[self.current.tag].wait(60)
        return Response(200, json.dumps({"cancelled": cancelled}).encode(), {"Content-Type": "application/json"})


def test_a_dashboard_view_whose_client_goes_away_has_its_reads_cancelled() -> None:
    dashboard = SlowDashboard()
    server = ApiServer(
        HOST,
        0,
        lambda *a: [],
        lambda *a: [],
        ApiKeyAuth(KEYS),
        dashboard,  # type: ignore[arg-type]
        cancel_query=dashboard.cancel,
        read_scope=dashboard.reading,
    ).start()
    try:
        with socket.create_connection((HOST, _port(server)), timeout=30) as sock:
            sock.sendall(b"GET /api/dashboard/latency HTTP/1.1\r\nHost: x\r\nx-api-key: k-acme\r\n\r\n")
            assert dashboard.started.acquire(timeout=30)
        deadline = time.monotonic() + 30
        while not all(event.is_set() for event in dashboard.scopes.values()):
            assert time.monotonic() < deadline, "the view's reads were never cancelled"
            time.sleep(0.01)
        assert len(dashboard.scopes) == 1
    finally:
        server.stop()
