"""A real agent in this process (receivers, API, store on the session's chDB engine) with keys for two tenants, a
write-only feedback key, and one allowed origin; and helpers to send feedback and spans the way clients do."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ragmon.sinks import open_store

from ragmon.agent.agent import Agent
from ragmon.settings import load_settings
from tests.agent.harness import free_port

API_KEYS = {"acme": "k-acme", "globex": "k-globex"}
FEEDBACK_KEY = "fb-acme"  # acme's browser key
FLOOD_KEY = "fb-acme-flood"  # a second key of acme's, for the rate-limit test alone (its own bucket)
GLOBEX_FEEDBACK_KEY = "fb-globex"
PAGE_PORT = free_port()
ALLOWED_ORIGIN = f"http://127.0.0.1:{PAGE_PORT}"
MAX_ITEMS = 20
MAX_BODY_BYTES = 16 * 1024
BURST = 60


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory, chdb_engine_dir: Path) -> Iterator[Agent]:
    store = open_store(chdb_engine_dir, database=f"fb_{uuid.uuid4().hex[:10]}")
    settings = load_settings(
        {
            "agent": {
                "data_dir": tmp_path_factory.mktemp("agent"),
                "otlp_http": "127.0.0.1:0",
                "otlp_grpc": "",
                "api": "127.0.0.1:0",
                "api_keys": API_KEYS,
                "feedback_keys": {"acme": [FEEDBACK_KEY, FLOOD_KEY], "globex": [GLOBEX_FEEDBACK_KEY]},
                "feedback_origins": [ALLOWED_ORIGIN],
                "feedback_max_items": MAX_ITEMS,
                "feedback_max_body_bytes": MAX_BODY_BYTES,
                "feedback_burst": BURST,
                "feedback_rate_per_s": 2.0,
            }
        },
        env={},
    )
    running = Agent(settings, store=store).start()
    yield running
    running.stop()
    store.close()


def receiver_url(agent: Agent) -> str:
    return f"http://127.0.0.1:{agent.receivers[0].port}"


def api_url(agent: Agent) -> str:
    assert agent.api is not None
    return agent.api.url


def post_feedback(agent: Agent, body: Any, key: str | None = API_KEYS["acme"], **headers: str) -> httpx.Response:
    sent = {"Content-Type": "application/json", **headers}
    if key is not None:
        sent["Authorization"] = f"Bearer {key}"
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{receiver_url(agent)}/v1/feedback", content=content, headers=sent, timeout=30)


def new_trace_id() -> str:
    return uuid.uuid4().hex


def send_trace(
    agent: Agent,
    trace_id: str,
    *,
    feature: str,
    key: str = API_KEYS["acme"],
    request_id: str | None = None,
    release: str | None = None,
) -> None:
    """One request span over OTLP/JSON, as any OpenTelemetry exporter sends it."""
    now_ns = time.time_ns()
    attributes = [
        {"key": "ragmon.stage", "value": {"stringValue": "request"}},
        {"key": "ragmon.feature", "value": {"stringValue": feature}},
    ]
    if request_id is not None:
        attributes.append({"key": "ragmon.request_id", "value": {"stringValue": request_id}})
    span = {
        "traceId": trace_id,
        "spanId": uuid.uuid4().hex[:16],
        "name": f"request {feature}",
        "kind": 1,
        "startTimeUnixNano": str(now_ns - 50_000_000),
        "endTimeUnixNano": str(now_ns),
        "attributes": attributes,
    }
    resource = [] if release is None else [{"key": "service.version", "value": {"stringValue": release}}]
    body = {"resourceSpans": [{"resource": {"attributes": resource}, "scopeSpans": [{"spans": [span]}]}]}
    response = httpx.post(
        f"{receiver_url(agent)}/v1/traces",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text


def poll(read: Callable[[], Any], done: Callable[[Any], bool], timeout_s: float = 120.0) -> Any:
    """Read until `done` says so or the (generous) deadline passes; the last value either way."""
    deadline = time.monotonic() + timeout_s
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.2)
        value = read()
    return value


def by_feature(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["feature"]: row for row in rows}
