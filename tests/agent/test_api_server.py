"""The agent's API server when a client goes away mid-reply (a closed tab, `curl` stopped): no traceback on
stderr, no error in the log, and the next request is answered."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import struct
import threading
import time

import pytest
from ragmon.collectors.auth import ApiKeyAuth

from ragmon.agent.api import ApiServer


def test_a_client_that_drops_a_reply_is_not_an_error(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    answered = threading.Event()

    def report(name: str, values: dict[str, object], tenant: str | None) -> list[dict[str, str]]:
        answered.set()
        return [{"feature": "x" * 1000}] * 20_000  # ~20 MB: far more than the socket buffers hold

    server = ApiServer("127.0.0.1", 0, report, lambda *a: [], ApiKeyAuth()).start()
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    try:
        with caplog.at_level(logging.WARNING, logger="ragmon.agent"):
            with socket.create_connection((host, int(port))) as client:
                client.sendall(b"GET /api/report HTTP/1.1\r\nHost: x\r\n\r\n")
                assert answered.wait(30)
                assert client.recv(1024).startswith(b"HTTP/1.1 200")  # the reply has started
                # Close with a reset rather than a FIN, as a browser tearing down a tab does: the server's next
                # write fails at once.
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            deadline = time.monotonic() + 30  # the failed reply is handled (or reported) before we look
            while server.open_connections and time.monotonic() < deadline:
                time.sleep(0.01)
            assert server.open_connections == 0
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            conn.request("GET", "/health")
            assert conn.getresponse().status == 200
            conn.close()
    finally:
        server.stop()
    assert "Traceback" not in capsys.readouterr().err
    assert [record.getMessage() for record in caplog.records] == []


@pytest.mark.parametrize(
    ("body", "status", "passed"),
    [
        ({"sql": "SELECT {n:UInt8}", "params": {"n": 1, "s": "x"}}, 200, {"n": 1, "s": "x"}),
        ({"sql": "SELECT 1"}, 200, {}),
        ({"sql": "SELECT 1", "params": ["n", 1]}, 400, None),
        ({"sql": "SELECT 1", "params": {"n": [1, 2]}}, 400, None),
    ],
)
def test_a_query_passes_its_bound_parameters_to_the_store(body: dict[str, object], status: int, passed: object) -> None:
    calls: list[tuple[object, ...]] = []

    def query(sql: str, params: dict[str, object], tenant: str | None, max_rows: int, tag: str) -> list[dict[str, int]]:
        calls.append((sql, params, tenant, max_rows))
        return [{"n": 1}]

    server = ApiServer("127.0.0.1", 0, lambda *a: [], query, ApiKeyAuth()).start()
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    try:
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("POST", "/api/query", body=json.dumps(body), headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        assert (reply.status, reply.read() != b"") == (status, True)
        conn.close()
    finally:
        server.stop()
    assert calls == ([(body["sql"], passed, None, 10_000)] if status == 200 else [])


def test_a_refused_query_leaves_a_kept_alive_connection_usable() -> None:
    # The refusal comes before the body would be used; the body is still read, or the next request on the
    # connection would be parsed from it.
    server = ApiServer("127.0.0.1", 0, lambda *a: [], lambda *a: [{"n": 1}], ApiKeyAuth({"acme": "k-acme"})).start()
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    try:
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        body = json.dumps({"sql": "SELECT 1", "params": {"pad": "x" * 5000}})
        conn.request("POST", "/api/query", body=body, headers={"Content-Type": "application/json"})
        refused = conn.getresponse()
        assert (refused.status, refused.read() != b"") == (401, True)
        conn.request("POST", "/api/query", body=body, headers={"x-api-key": "k-acme"})
        answered = conn.getresponse()
        assert (answered.status, json.loads(answered.read())) == (200, [{"n": 1}])
        conn.close()
    finally:
        server.stop()


def test_the_reports_reads_send_their_values_to_a_running_agent() -> None:
    """`ragmon report`'s quality and kept-share sections, read through an agent: named reads whose values arrive as
    the values sent (a feature or run name with a quote in it stays a value); no SQL travels (`/api/query` is not
    asked)."""
    from ragmon.sinks.traffic import Traffic

    from ragmon.commands import common as commands

    reads: list[tuple[str, dict[str, object], str | None]] = []
    queries: list[object] = []

    def read(name: str, values: dict[str, object], tenant: str | None) -> list[dict[str, int]]:
        reads.append((name, values, tenant))
        return [{"n": 1}]

    traffic = Traffic.of(eval_run="nightly' --")
    sent = {"since_s": 3600.0, "feature": "qa'", "traffic": traffic}
    server = ApiServer("127.0.0.1", 0, read, lambda *a: queries.append(a) or [], ApiKeyAuth()).start()
    try:
        for name in ("quality", "kept_share"):
            assert commands.ask_agent(server.url, name, sent, None) == [{"n": 1}]
    finally:
        server.stop()
    # the quality read's own defaults arrive beside what was sent (no release, no environment: all of them)
    assert reads == [("quality", {**sent, "release": None, "environment": None}, None), ("kept_share", sent, None)]
    assert queries == []
