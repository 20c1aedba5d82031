"""The agent's one registry, served on both ports: GET /metrics on the OTLP/HTTP receiver and on the API port give
the same families and the same counts, in the format Accept asks for."""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ragmon.sinks import open_store

from ragmon.agent.agent import Agent
from ragmon.settings import load_settings
from tests.agent.test_agent_e2e import _encoded_requests
from tests.support import prometheus


@pytest.fixture
def agent(tmp_path: Path, chdb_engine_dir: Path) -> Iterator[Agent]:
    store = open_store(chdb_engine_dir, database=f"ports_{uuid.uuid4().hex[:8]}")
    settings = load_settings(
        {"agent": {"data_dir": tmp_path, "otlp_http": "127.0.0.1:0", "otlp_grpc": "", "api": "127.0.0.1:0"}},
        env={},
    )
    running = Agent(settings, store=store).start()
    yield running
    running.stop()
    store.close()


def _get(url: str, accept: str | None = None) -> tuple[str, str]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode(), response.headers["Content-Type"]


def test_both_ports_serve_the_agents_registry(agent: Agent) -> None:
    receiver = f"http://127.0.0.1:{agent.receivers[0].port}"
    assert agent.api is not None
    body, _ = _encoded_requests(1, 3)[0]
    request = urllib.request.Request(
        f"{receiver}/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    from_receiver, receiver_type = _get(f"{receiver}/metrics")
    from_api, api_type = _get(f"{agent.api.url}/metrics")
    assert receiver_type == api_type == "text/plain; version=0.0.4; charset=utf-8"
    assert prometheus.families(from_receiver) == prometheus.families(from_api)
    accepted = ("ragmon_receiver_spans_accepted_total", frozenset({("transport", "http")}))
    assert prometheus.parse(from_receiver)[accepted] == prometheus.parse(from_api)[accepted] == 3
    assert {"ragmon_receiver_requests", "ragmon_queue_requests", "ragmon_memory_rss_bytes"} <= set(
        prometheus.families(from_api)
    )
    openmetrics, openmetrics_type = _get(f"{agent.api.url}/metrics", "application/openmetrics-text; version=1.0.0")
    assert openmetrics_type.startswith("application/openmetrics-text") and openmetrics.endswith("# EOF\n")
