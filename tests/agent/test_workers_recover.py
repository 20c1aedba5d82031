"""Workers that recover (issue 37, finding 4): each long-running loop of the agent lives through a real fault —
the judge queue's file full (SQLite's own SQLITE_FULL), the store down then back (the store's own StoreError) —
resumes by itself when it passes, and says so on the health registry: failing while it lasts, ok after."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ragmon.judges.queue import Kept

from ragmon.agent.health import HealthRegistry
from ragmon.agent.judging import JudgeService
from ragmon.settings import JudgeSettings
from tests.judges.worker_fakes import FullDiskQueue, trace_id

DEADLINE_S = 60.0  # generous: the conditions below are polled, never waited for by a fixed sleep


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _state(health: HealthRegistry, name: str) -> dict[str, Any]:
    component: dict[str, Any] = health.ready().body["components"][name]
    return component


class PayloadStore:
    """The two calls the in-agent judge makes on the store: payloads of leased traces, and score rows."""

    def __init__(self, payloads: dict[str, dict[str, Any]]) -> None:
        self.payloads = payloads
        self.scores: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def payloads_for_judging(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        return {t: self.payloads[t] for t in trace_ids if t in self.payloads}

    def insert_scores(self, rows: Any, dedup_token: str | None = None) -> str:
        with self._lock:
            self.scores.extend(rows)
        return dedup_token or ""

    def scored(self) -> set[str]:
        with self._lock:
            return {row["trace_id"] for row in self.scores}


def _payload(i: int) -> dict[str, Any]:
    return {
        "question": f"When was the Eiffel Tower completed? ({i})",
        "answer": "It was completed in 1889.",
        "passage_texts": ["The Eiffel Tower was completed in 1889."],
        "feature": "faq",
    }


def test_the_judge_worker_lives_through_a_full_queue_file_and_resumes_when_there_is_room(tmp_path: Path) -> None:
    traces = [trace_id(i) for i in range(6)]
    store = PayloadStore({t: _payload(i) for i, t in enumerate(traces)})
    queue = FullDiskQueue(tmp_path / "judge-queue.sqlite", synchronous="NORMAL")
    health = HealthRegistry()
    service = JudgeService(JudgeSettings(backend="local"), store, queue, health=health)
    queue.enqueue([Kept("t", t, feature="faq") for t in traces], service.judge.version)
    queue.fill()  # every write that needs a page now fails: leasing the first item already does
    service.start()
    try:
        wait_until(lambda: _state(health, "judge")["state"] == "failing", "the worker to report the full file")
        assert "database or disk is full" in _state(health, "judge")["error"]
        assert health.live().ok  # failing is no reason to restart: a restart would not make room
        wait_until(lambda: service.worker.stats.faults >= 3, "the worker to try again, and again")
        assert service._thread.is_alive() and store.scored() == set()

        queue.make_room()  # the fault passes: nothing but the worker itself may bring it back
        wait_until(lambda: store.scored() == set(traces), "every trace judged after the disk had room")
        wait_until(lambda: _state(health, "judge")["state"] == "ok", "the worker to report ok again")
        assert health.ready().ok and service.worker.stats.faults >= 1
    finally:
        service.stop(5.0)
        queue.close()
    assert _state(health, "judge")["state"] == "stopped" and health.live().ok  # asked to stop: nothing to restart
