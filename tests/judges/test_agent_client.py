"""`AgentStoreClient`: a worker beside `ragmon serve` finds the agent in the data directory, and an agent that is
down or restarted (new port, new token) makes items wait (`SourceUnavailable`), never fail, until it answers."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from ragmon.judges.agent_client import AgentStoreClient
from ragmon.judges.worker import SourceUnavailable


class StubAgent:
    """The two judge endpoints, answering only to `token`; records the score rows it was sent."""

    def __init__(self, token: str) -> None:
        stub = self
        self.token = token
        self.rows: list[dict[str, Any]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.headers.get("X-Ragmon-Judge-Token") != stub.token:
                    status, answer = 403, {"error": "token"}
                elif self.path == "/api/judge/payloads":
                    status, answer = 200, {t: {"question": f"q-{t}"} for t in body["trace_ids"]}
                else:
                    stub.rows += body["rows"]
                    status, answer = 200, {"written": len(body["rows"])}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def publish(self, data_dir: Path) -> None:
        (data_dir / "agent.json").write_text(json.dumps({"pid": 1, "api": self.url}))
        (data_dir / "judge-api.token").write_text(self.token)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stubs() -> Iterator[list[StubAgent]]:
    started: list[StubAgent] = []
    yield started
    for stub in started:
        stub.stop()


def test_no_agent_then_a_restarted_one_is_found_again(
    tmp_path: Path, stubs: list[StubAgent], caplog: pytest.LogCaptureFixture
) -> None:
    client = AgentStoreClient(tmp_path, timeout_s=5)
    with caplog.at_level(logging.WARNING, logger="ragmon.judges"):
        for _ in range(3):
            with pytest.raises(SourceUnavailable):
                client.payloads_for_judging("t", ["a"])
    assert len([r for r in caplog.records if "wait in the queue" in r.message]) == 1  # once per outage

    first = StubAgent("one")
    stubs.append(first)
    first.publish(tmp_path)
    assert client.payloads_for_judging("t", ["a"]) == {"a": {"question": "q-a"}}

    first.stop()  # the agent goes away: refused connections, not errors of the item
    stubs.remove(first)
    with pytest.raises(SourceUnavailable):
        client.insert_scores([{"trace_id": "a"}])

    second = StubAgent("two")  # restarted: a new port and a new token
    stubs.append(second)
    second.publish(tmp_path)
    client.insert_scores([{"trace_id": "a"}])
    assert second.rows == [{"trace_id": "a"}]


def test_a_stale_token_is_read_again(tmp_path: Path, stubs: list[StubAgent]) -> None:
    agent = StubAgent("old")
    stubs.append(agent)
    agent.publish(tmp_path)
    client = AgentStoreClient(tmp_path, timeout_s=5)
    assert client.payloads_for_judging("t", ["a"]) == {"a": {"question": "q-a"}}
    agent.token = "new"  # as a restarted agent on the same port
    with pytest.raises(SourceUnavailable):
        client.payloads_for_judging("t", ["a"])
    agent.publish(tmp_path)
    assert client.payloads_for_judging("t", ["b"]) == {"b": {"question": "q-b"}}
