"""The agent under faults, in process with the shared chDB engine: the store down for a while, the log full."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from ragmon.sinks import Store, open_store
from ragmon.sinks.errors import StoreError

from ragmon.agent.agent import Agent
from ragmon.settings import load_settings
from tests.agent.test_agent_e2e import _encoded_requests
from tests.faults import scenario_rows
from tests.support import prometheus
from tests.support.prometheus import text_of, value

pytestmark = pytest.mark.faults  # also run by `pytest -m faults`; rows in the fault suite's summary table


class FlakyStore:
    """The real store, whose inserts fail (retryably) while `down` is set: a server outage, a full disk."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.down = threading.Event()
        self.refused_inserts = 0

    def insert_otlp(self, envelopes: Sequence[bytes], dedup_token: str) -> None:
        if self.down.is_set():
            self.refused_inserts += 1
            raise StoreError("store unavailable (injected)", retryable=True)
        self._store.insert_otlp(envelopes, dedup_token)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.fixture
def flaky(chdb_engine_dir: Path) -> Iterator[FlakyStore]:
    store = open_store(chdb_engine_dir, database=f"faults_{uuid.uuid4().hex[:8]}")
    yield FlakyStore(store)
    store.close()


def _agent(tmp_path: Path, store: FlakyStore, **agent: Any) -> Agent:
    settings = load_settings(
        {"agent": {"data_dir": tmp_path, "otlp_http": "127.0.0.1:0", "otlp_grpc": "", "api": "127.0.0.1:0", **agent}},
        env={},
    )
    return Agent(settings, store=store).start()  # type: ignore[arg-type]


def _post(agent: Agent, body: bytes) -> tuple[int, str | None]:
    url = f"http://127.0.0.1:{agent.receivers[0].port}/v1/traces"
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, None
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Retry-After")


def _stored(store: FlakyStore, span_ids: set[str]) -> int:
    quoted = ",".join(f"'{s}'" for s in sorted(span_ids))
    return int(store.query(f"SELECT count() AS n FROM spans WHERE span_id IN ({quoted})")[0]["n"])


def _wait_stored(store: FlakyStore, span_ids: set[str], timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    stored = 0
    while time.monotonic() < deadline:
        stored = _stored(store, span_ids)
        if stored == len(span_ids):
            break
        time.sleep(0.1)
    return stored


def test_store_outage_keeps_accepting_into_the_log_and_loses_nothing(tmp_path: Path, flaky: FlakyStore) -> None:
    agent = _agent(tmp_path, flaky)
    try:
        flaky.down.set()
        acknowledged: set[str] = set()
        for body, span_ids in _encoded_requests(40, 5):
            status, _ = _post(agent, body)
            assert status == 200  # the log takes them while the store is down
            acknowledged |= span_ids
        time.sleep(0.5)
        assert flaky.refused_inserts >= 1 and _stored(flaky, acknowledged) == 0
        assert prometheus.value(text_of(agent.metrics), "ragmon_store_errors_total", kind="retryable")
        flaky.down.clear()  # the store is back: the backlog drains
        stored = _wait_stored(flaky, acknowledged)
        duplicates = int(flaky.query("SELECT count() - uniqExact(span_id) AS d FROM spans")[0]["d"])
        _record("store outage, then back", 40, flaky.refused_inserts, acknowledged, stored, duplicates)
        assert stored == len(acknowledged)
        assert duplicates == 0
    finally:
        agent.stop()


def test_full_log_refuses_with_retry_after_and_loses_nothing_acknowledged(tmp_path: Path, flaky: FlakyStore) -> None:
    # a 1 MiB log and a store that is down: the log fills, then requests are refused, never acknowledged and lost
    agent = _agent(tmp_path, flaky, wal_max_bytes=1024 * 1024)
    try:
        flaky.down.set()
        acknowledged: set[str] = set()
        refused = []
        for body, span_ids in _encoded_requests(100, 200):  # ~20 KB each: twice the log's cap in all
            status, retry_after = _post(agent, body)
            if status == 200:
                acknowledged |= span_ids
            else:
                refused.append((status, retry_after))
        assert refused, "the log never filled: the test proves nothing"
        assert {status for status, _ in refused} <= {429, 503}
        assert all(retry_after is not None for _, retry_after in refused)
        flaky.down.clear()
        stored = _wait_stored(flaky, acknowledged)
        duplicates = int(flaky.query("SELECT count() - uniqExact(span_id) AS d FROM spans")[0]["d"])
        _record("log full (1 MiB cap), store down", 100, len(refused), acknowledged, stored, duplicates)
        assert stored == len(acknowledged)
    finally:
        agent.stop()


def _record(scenario: str, tried: int, faults: int, acknowledged: set[str], stored: int, duplicates: int) -> None:
    scenario_rows.record(
        scenario_rows.ScenarioRow(
            scenario=scenario,
            unit="spans",
            tried=tried,
            faults=faults,
            acknowledged=len(acknowledged),
            stored=stored,
            lost=len(acknowledged) - stored,
            duplicates=duplicates,
            note="agent in process (peak RSS not its own)",
        )
    )


def _health(agent: Agent, probe: str) -> tuple[int, dict[str, Any]]:
    assert agent.api is not None
    try:
        with urllib.request.urlopen(f"{agent.api.url}{probe}", timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_health_names_the_loop_a_store_outage_holds_up_and_stays_live(tmp_path: Path, flaky: FlakyStore) -> None:
    """The API's probes read the agent's health registry: a writer that cannot insert is `failing` with the
    store's error (readiness says it, liveness stays 200: a restart would not bring the store back), and ok again
    once it stores."""
    agent = _agent(tmp_path, flaky)
    try:
        status, body = _health(agent, "/health/ready")
        assert status == 200 and {"writer", "sampling", "rollups"} <= set(body["components"])
        flaky.down.set()
        (body_bytes, span_ids), *_ = _encoded_requests(1, 3)
        assert _post(agent, body_bytes)[0] == 200
        deadline = time.monotonic() + 60
        while _health(agent, "/health")[1]["components"]["writer"]["state"] != "failing":
            assert time.monotonic() < deadline, "the writer never reported the outage"
            time.sleep(0.05)
        writer = _health(agent, "/health")[1]["components"]["writer"]
        assert "store unavailable (injected)" in writer["error"]
        assert _health(agent, "/health/live")[0] == 200
        assert agent.api is not None
        with urllib.request.urlopen(f"{agent.api.url}/metrics", timeout=30) as response:
            exposition = response.read().decode()
        assert value(exposition, "ragmon_component_up", component="writer", state="failing") == 0
        assert value(exposition, "ragmon_component_up", component="sampling", state="ok") == 1
        flaky.down.clear()
        assert _wait_stored(flaky, span_ids) == len(span_ids)
        deadline = time.monotonic() + 60
        while _health(agent, "/health")[1]["components"]["writer"]["state"] != "ok":
            assert time.monotonic() < deadline, "the writer never reported it stores again"
            time.sleep(0.05)
    finally:
        agent.stop()
