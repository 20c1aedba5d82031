"""The agent under its memory limit, in process with the shared chDB engine, resident memory injected (not really
exhausted): over the high-water mark its real receivers answer OTLP/HTTP 429 with Retry-After and gRPC
RESOURCE_EXHAUSTED with RetryInfo, /metrics says so, and every request acknowledged before is stored."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from ragmon.sinks import open_store

from ragmon.agent.agent import Agent
from ragmon.settings import load_settings
from tests.agent.test_agent_e2e import _encoded_requests
from tests.agent.test_agent_faults import FlakyStore, _post, _stored, _wait_stored
from tests.support import prometheus

GiB = 1024**3
_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


class Rss:
    """The resident-memory reading the agent's guard sees."""

    def __init__(self) -> None:
        self.value = 100 * 1024**2

    def __call__(self) -> int:
        return self.value


@pytest.fixture
def flaky(chdb_engine_dir: Path) -> Iterator[FlakyStore]:
    store = open_store(chdb_engine_dir, database=f"memory_{uuid.uuid4().hex[:8]}")
    yield FlakyStore(store)
    store.close()


@pytest.fixture
def agent(tmp_path: Path, flaky: FlakyStore) -> Iterator[tuple[Agent, Rss]]:
    settings = load_settings(
        {
            "agent": {
                "data_dir": tmp_path,
                "otlp_http": "127.0.0.1:0",
                "otlp_grpc": "127.0.0.1:0",
                "api": "127.0.0.1:0",
                "memory_limit": "1GiB",
            }
        },
        env={},
    )
    agent = Agent(settings, store=flaky)  # type: ignore[arg-type]
    rss = Rss()
    agent.memory_guard.read_rss = rss
    agent.start()
    try:
        yield agent, rss
    finally:
        agent.stop()


def _metrics(agent: Agent) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.receivers[0].port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def test_over_the_high_water_mark_receivers_push_back_and_nothing_acknowledged_is_lost(
    agent: tuple[Agent, Rss], flaky: FlakyStore
) -> None:
    running, rss = agent
    assert running.memory_guard.limit_bytes == GiB
    requests = _encoded_requests(12, 5)
    flaky.down.set()  # the store is slow to take them: acknowledged requests wait in the log, as under a burst
    acknowledged: set[str] = set()
    for body, span_ids in requests[:6]:
        assert _post(running, body) == (200, None)
        acknowledged |= span_ids

    rss.value = GiB  # over 88 % of the limit
    running.memory_guard.sample()
    refused: set[str] = set()
    for body, span_ids in requests[6:9]:
        status, retry_after = _post(running, body)
        assert status == 429 and retry_after is not None and int(retry_after) >= 1
        refused |= span_ids
    with grpc.insecure_channel(f"127.0.0.1:{running.receivers[1].port}") as channel:
        export = channel.unary_unary(_EXPORT, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as caught:
            export(requests[9][0], timeout=10)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    trailers = dict(caught.value.trailing_metadata())
    retry = error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
    assert retry.retry_delay.ToTimedelta().total_seconds() >= 1
    refused |= requests[9][1]

    metrics = _metrics(running)
    assert prometheus.value(metrics, "ragmon_memory_rss_bytes") == GiB
    assert prometheus.value(metrics, "ragmon_memory_limit_bytes") == GiB
    assert prometheus.value(metrics, "ragmon_memory_pushing_back") == 1
    assert prometheus.value(metrics, "ragmon_memory_pushback_total", transport="http") == 3
    assert prometheus.value(metrics, "ragmon_memory_pushback_total", transport="grpc") == 1
    assert running.counters.get("ragmon_receiver_requests_total", transport="http", outcome="memory") == 3

    # memory falls (the sender retries later) and the store comes back: everything acknowledged is stored, and
    # only that — the refused requests were never taken, so the client still holds them
    rss.value = 100 * 1024**2
    running.memory_guard.sample()
    for body, span_ids in requests[10:]:
        assert _post(running, body) == (200, None)
        acknowledged |= span_ids
    flaky.down.clear()
    assert _wait_stored(flaky, acknowledged) == len(acknowledged)
    assert _stored(flaky, refused) == 0
    assert prometheus.value(_metrics(running), "ragmon_memory_pushing_back") == 0


def test_with_memory_high_but_nothing_waiting_requests_are_taken(agent: tuple[Agent, Rss], flaky: FlakyStore) -> None:
    # the allocators may hold freed pages after a burst: with nothing left to store, refusing could not help
    running, rss = agent
    body, span_ids = _encoded_requests(1, 5)[0]
    rss.value = GiB
    deadline = time.monotonic() + 30
    while running.pipeline.intake.backlog[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    running.memory_guard.sample()
    assert _post(running, body) == (200, None)
    assert _wait_stored(flaky, span_ids) == len(span_ids)
