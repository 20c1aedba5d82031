"""Feedback at production rates: concurrent requests share one INSERT (group commit), each answered only once its
rows are stored; a store that hangs holds no receiver thread (spans keep landing), a store that refuses is a 503
with nothing half-stored, the caps on what waits answer 429 `busy`, and stopping answers every waiting request.

A real agent on the session's engine; the store is the real one behind a gate on its feedback inserts (held shut by
the test to make requests wait, or refusing as a server outage does)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from ragmon.sinks import Store, open_store
from ragmon.sinks.errors import StoreError

from ragmon.agent.agent import Agent
from ragmon.settings import load_settings
from tests.feedback.conftest import API_KEYS, new_trace_id, poll, receiver_url, send_trace


class GatedStore:
    """The real store, whose feedback inserts wait while `gate` is shut, or fail (retryably) while `down` is set."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.gate = threading.Event()
        self.gate.set()
        self.down = threading.Event()
        self.entered = threading.Event()  # an insert is waiting at the gate
        self.inserts: list[int] = []  # rows per INSERT that reached the store
        self.refused = 0

    def insert_feedback(self, rows: list[Mapping[str, Any]]) -> str:
        self.entered.set()
        self.gate.wait()
        if self.down.is_set():
            self.refused += 1
            raise StoreError("store unavailable (injected)", retryable=True)
        token = self._store.insert_feedback(rows)
        self.inserts.append(len(rows))
        return token

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.fixture
def gated(chdb_engine_dir: Path) -> Iterator[GatedStore]:
    store = open_store(chdb_engine_dir, database=f"fbgc_{uuid.uuid4().hex[:10]}")
    yield GatedStore(store)
    store.close()


def _agent(tmp_path: Path, store: GatedStore, **agent: Any) -> Agent:
    settings = load_settings(
        {
            "agent": {
                "data_dir": tmp_path,
                "otlp_http": "127.0.0.1:0",
                "otlp_grpc": "",
                "api": "127.0.0.1:0",
                "api_keys": API_KEYS,
                "feedback_rate_per_s": 1e6,
                "feedback_burst": 1_000_000,
                **agent,
            }
        },
        env={},
    )
    return Agent(settings, store=store).start()  # type: ignore[arg-type]


@pytest.fixture
def agent(tmp_path: Path, gated: GatedStore) -> Iterator[Agent]:
    running = _agent(tmp_path, gated)
    yield running
    gated.gate.set()
    running.stop()


def _post(agent: Agent, item: dict[str, Any], timeout_s: float = 60.0) -> httpx.Response:
    return httpx.post(
        f"{receiver_url(agent)}/v1/feedback",
        content=json.dumps(item).encode(),
        headers={"Authorization": f"Bearer {API_KEYS['acme']}", "Content-Type": "application/json"},
        timeout=timeout_s,
    )


def _stored(store: GatedStore, trace_id: str) -> int:
    rows = store.query("SELECT count() AS n FROM feedback_writes WHERE trace_id = {t:String}", {"t": trace_id})
    return int(rows[0]["n"])


def _waiting(agent: Agent) -> int:
    feedback = agent.receivers[0].feedback
    assert feedback is not None
    return feedback.committer.waiting[0]


def _send_while_shut(agent: Agent, gated: GatedStore, items: list[dict[str, Any]]) -> list[Any]:
    """Shut the gate, send `items` at once (one client each), wait until all of them wait for the store; the
    futures of their answers."""
    gated.gate.clear()
    gated.entered.clear()
    pool = ThreadPoolExecutor(len(items))
    answers = [pool.submit(_post, agent, item) for item in items]
    pool.shutdown(wait=False)
    assert gated.entered.wait(60), "no insert reached the store"
    # One request's INSERT waits at the gate; the rest queue behind it.
    assert poll(lambda: _waiting(agent), lambda n: n == len(items), timeout_s=60) == len(items)
    return answers


def test_concurrent_requests_share_one_insert_and_are_answered_once_stored(agent: Agent, gated: GatedStore) -> None:
    trace = new_trace_id()
    items = [{"trace_id": trace, "thumbs": "up", "user": f"u{n}"} for n in range(32)]
    answers = _send_while_shut(agent, gated, items)
    assert not any(answer.done() for answer in answers)  # nothing acknowledged before the store took it
    assert _stored(gated, trace) == 0
    gated.gate.set()
    statuses = [answer.result().status_code for answer in answers]
    assert statuses == [200] * 32
    assert _stored(gated, trace) == 32
    # The first INSERT held what was there when it began; everything that queued behind it went as one more.
    assert len(gated.inserts) <= 2 and sum(gated.inserts) == 32


def test_spans_keep_landing_while_feedback_waits_for_a_store_that_hangs(agent: Agent, gated: GatedStore) -> None:
    trace = new_trace_id()
    # Far more waiting feedback requests than the receiver has threads (2): none of them may hold one.
    answers = _send_while_shut(agent, gated, [{"trace_id": trace, "thumbs": "down", "id": f"f{n}"} for n in range(48)])
    span_traces = [new_trace_id() for _ in range(10)]
    for trace_id in span_traces:
        send_trace(agent, trace_id, feature="spans-during-flood")  # asserts 200
    assert not any(answer.done() for answer in answers)  # the feedback still waits: the spans did not
    gated.gate.set()
    assert [answer.result().status_code for answer in answers] == [200] * 48
    spans = poll(
        lambda: gated.query(
            "SELECT uniqExact(trace_id) AS n FROM spans WHERE trace_id IN {ids:Array(String)}", {"ids": span_traces}
        )[0]["n"],
        lambda n: n == len(span_traces),
    )
    assert spans == len(span_traces)


def test_a_store_that_refuses_is_a_503_and_stores_nothing_until_it_heals(tmp_path: Path, gated: GatedStore) -> None:
    running = _agent(tmp_path, gated, feedback_wait_s=1.0)
    try:
        trace = new_trace_id()
        gated.down.set()
        answer = _post(running, {"trace_id": trace, "rating": 1, "user": "down"})
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"] == "store_unavailable" and int(answer.headers["retry-after"]) >= 1
        assert gated.refused >= 1 and _stored(gated, trace) == 0
        gated.down.clear()
        assert _post(running, {"trace_id": trace, "rating": 1, "user": "down"}).status_code == 200
        assert _stored(gated, trace) == 1
    finally:
        running.stop()


def test_a_request_not_stored_in_time_is_a_503_and_never_stored(tmp_path: Path, gated: GatedStore) -> None:
    running = _agent(tmp_path, gated, feedback_wait_s=1.0)
    try:
        first, second = new_trace_id(), new_trace_id()
        gated.gate.clear()
        pool = ThreadPoolExecutor(1)
        held = pool.submit(_post, running, {"trace_id": first, "thumbs": "up", "user": "a"})
        assert gated.entered.wait(60)
        # Queued behind an INSERT that hangs: answered at its deadline, and dropped from the queue.
        late = _post(running, {"trace_id": second, "thumbs": "up", "user": "b"})
        assert late.status_code == 503 and late.json()["error"] == "store_unavailable"
        assert "nothing was stored" in late.json()["message"]
        assert held.result().status_code == 503  # its INSERT was taken: it may still land, and says so
        assert "may still be stored" in held.result().json()["message"]
        gated.gate.set()
        pool.shutdown()
        poll(lambda: len(gated.inserts), lambda n: n >= 1)
        assert _stored(gated, second) == 0
    finally:
        gated.gate.set()
        running.stop()


def test_too_much_waiting_is_a_429_busy_and_stores_nothing_of_it(tmp_path: Path, gated: GatedStore) -> None:
    running = _agent(tmp_path, gated, feedback_max_waiting_bytes=64 * 1024)
    try:
        trace = new_trace_id()
        gated.gate.clear()
        pool = ThreadPoolExecutor(1)
        held = pool.submit(_post, running, {"trace_id": trace, "thumbs": "up", "user": "first"})
        assert gated.entered.wait(60)
        comment = "x" * 1900  # ~2 KB a request: the 64 KiB cap holds about 32 of them
        items = [{"trace_id": trace, "thumbs": "up", "user": f"u{n}", "comment": comment} for n in range(48)]
        senders = ThreadPoolExecutor(len(items))
        answers = [senders.submit(_post, running, item) for item in items]
        # Every request is either answered (refused at once) or waiting for the store.
        poll(lambda: _waiting(running) + sum(a.done() for a in answers), lambda n: n == len(items) + 1)
        refused = [a.result() for a in answers if a.done()]
        assert refused and all(r.status_code == 429 for r in refused)
        for response in refused:
            assert response.json()["error"] == "busy" and response.json()["message"]
            assert int(response.headers["retry-after"]) >= 1
        gated.gate.set()
        accepted = [a.result() for a in answers if a.result().status_code == 200]
        assert held.result().status_code == 200
        assert len(accepted) + len(refused) == len(items)  # each one either stored or refused
        assert _stored(gated, trace) == len(accepted) + 1
        pool.shutdown()
        senders.shutdown()
    finally:
        gated.gate.set()
        running.stop()


def test_stopping_answers_every_waiting_request(tmp_path: Path, gated: GatedStore) -> None:
    running = _agent(tmp_path, gated)
    trace = new_trace_id()
    answers = _send_while_shut(running, gated, [{"trace_id": trace, "thumbs": "up", "user": f"u{n}"} for n in range(8)])
    stopper = threading.Thread(target=running.stop)
    stopper.start()
    try:
        # Answered while the agent stops, not dropped: a 503 the sender retries (the store never took them).
        responses = [answer.result() for answer in answers]
        assert [r.status_code for r in responses] == [503] * 8
        assert all(r.json()["error"] == "store_unavailable" for r in responses)
    finally:
        gated.gate.set()
        stopper.join(60)
