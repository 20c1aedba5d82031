"""A slow store (every insert takes 300 ms, as a ClickHouse server under merge pressure might), as opposed to a
down one: the agent keeps acknowledging from its log without waiting for the store, the backlog grows and drains,
and every acknowledged span ends up stored once."""

from __future__ import annotations

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

from ragmon.agent.agent import Agent
from ragmon.settings import load_settings
from tests.agent.test_agent_e2e import _encoded_requests
from tests.faults import scenario_rows

pytestmark = pytest.mark.faults

INSERT_DELAY_S = 0.3
REQUESTS = 120


class SlowStore:
    """The real store, each OTLP insert `INSERT_DELAY_S` late."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.inserts = 0
        self._lock = threading.Lock()

    def insert_otlp(self, envelopes: Sequence[bytes], dedup_token: str) -> None:
        time.sleep(INSERT_DELAY_S)  # the injected slowness
        with self._lock:
            self.inserts += 1
        self._store.insert_otlp(envelopes, dedup_token)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.fixture
def slow(chdb_engine_dir: Path) -> Iterator[SlowStore]:
    store = open_store(chdb_engine_dir, database=f"faults_slow_{uuid.uuid4().hex[:8]}")
    yield SlowStore(store)
    store.close()


def _post(port: int, body: bytes) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_slow_store_is_absorbed_by_the_log_and_loses_nothing(tmp_path: Path, slow: SlowStore) -> None:
    settings = load_settings(
        {"agent": {"data_dir": tmp_path, "otlp_http": "127.0.0.1:0", "otlp_grpc": "", "api": "127.0.0.1:0"}}, env={}
    )
    agent = Agent(settings, store=slow).start()  # type: ignore[arg-type]
    acknowledged: set[str] = set()
    peak_backlog = 0
    try:
        for body, span_ids in _encoded_requests(REQUESTS, 5):
            if _post(agent.receivers[0].port, body) == 200:
                acknowledged |= span_ids
            peak_backlog = max(peak_backlog, agent.pipeline.intake.backlog[0])
        quoted = ",".join(f"'{s}'" for s in sorted(acknowledged))
        sql = f"SELECT count() AS n, uniqExact(span_id) AS u FROM spans WHERE span_id IN ({quoted})"
        deadline = time.monotonic() + 120
        row = slow.query(sql)[0]
        while int(row["u"]) < len(acknowledged) and time.monotonic() < deadline:
            time.sleep(0.2)
            row = slow.query(sql)[0]
    finally:
        agent.stop()
    stored, rows = int(row["u"]), int(row["n"])
    scenario_rows.record(
        scenario_rows.ScenarioRow(
            scenario=f"slow store ({INSERT_DELAY_S * 1000:.0f} ms per insert)",
            unit="spans",
            tried=REQUESTS,
            faults=slow.inserts,
            acknowledged=len(acknowledged),
            stored=stored,
            lost=len(acknowledged) - stored,
            duplicates=rows - stored,
            note=f"peak backlog {peak_backlog} requests waiting for the store; agent in process",
        )
    )
    assert len(acknowledged) == REQUESTS * 5  # a slow store is no reason to refuse: the log takes the load
    assert peak_backlog > 1, "the store was never behind: the test proves nothing"
    assert stored == len(acknowledged) and rows == stored
