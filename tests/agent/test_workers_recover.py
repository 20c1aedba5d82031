"""Workers that recover (issue 37, finding 4): each long-running loop of the agent lives through a real fault —
the judge queue's file full (SQLite's own SQLITE_FULL), the store down then back (the store's own StoreError) —
resumes by itself when it passes, and says so on the health registry: failing while it lasts, ok after."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from ragmon.judges.queue import Kept
from ragmon.sinks import Store, open_store
from ragmon.sinks.errors import StoreError

from ragmon.agent.alerting import AlertingService
from ragmon.drift import AlertsConfig
from ragmon.health import HealthRegistry
from ragmon.pipeline.intake import WalIntake
from ragmon.pipeline.judging import JudgeService, Judging
from ragmon.pipeline.wal import WriteAheadLog
from ragmon.pipeline.writer import StoreWriter
from ragmon.settings import JudgeSettings
from tests.agent.stages import store_and_sample
from tests.agent.test_alerting import FlakyStore
from tests.agent.test_intake_spill import RecordingStore
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


def test_kept_traces_the_full_queue_file_refuses_wait_and_go_in_when_there_is_room(tmp_path: Path) -> None:
    queue = FullDiskQueue(tmp_path / "judge-queue.sqlite", synchronous="NORMAL")
    judging = Judging(queue, "v1", service=None)
    kept = [{"tenant": "t", "trace_id": f"{i:032x}", "reasons": ["slow"], "probability": 1.0} for i in range(3)]
    try:
        queue.fill()
        assert judging.enqueue(kept[:2]) == 0  # refused: they wait, instead of waiting for a restart
        assert [k.trace_id for k in judging.unqueued] == [kept[0]["trace_id"], kept[1]["trace_id"]]
        queue.make_room()
        assert judging.enqueue(kept[2:]) == 3  # the next kept trace takes the waiting ones in with it
        assert not judging.unqueued
        queued = {item["trace_id"] for item in queue.items() if item["judge_version"] == "v1"}
        assert queued == {row["trace_id"] for row in kept}
    finally:
        queue.close()


class OutageStore(RecordingStore):
    """The writer's store, each of whose three calls can be down on its own (the store's real, retryable
    StoreError): inserts, the sampler's fragment reads, roll-ups — a server that is down refuses them all; one that
    is overloaded (TOO_MANY_SIMULTANEOUS_QUERIES) takes inserts and refuses queries."""

    def __init__(self) -> None:
        super().__init__()
        self.down: set[str] = set()
        self.refused: dict[str, int] = {"insert": 0, "read": 0, "roll_up": 0}
        self.rolled: list[tuple[int, int, str | None]] = []
        self.roll_up_tokens: list[str | None] = []  # of every try, refused or not
        self._lock = threading.Lock()

    def _refuse(self, call: str) -> None:
        with self._lock:
            if call in self.down:
                self.refused[call] += 1
                raise StoreError("Code: 210. DB::Exception: Connection refused (injected)", retryable=True, code=210)

    def insert_otlp(self, envelopes: list[bytes], dedup_token: str) -> None:
        self._refuse("insert")
        super().insert_otlp(envelopes, dedup_token)

    def trace_fragment_table(self, seq_from: int, seq_to: int) -> pa.Table:
        self._refuse("read")
        return super().trace_fragment_table(seq_from, seq_to)

    def roll_up(
        self, seq_from: int, seq_to: int, dedup_token: str | None = None, *, context_to: int | None = None
    ) -> None:
        self.roll_up_tokens.append(dedup_token)
        self._refuse("roll_up")
        self.rolled.append((seq_from, seq_to, dedup_token))

    def back(self, call: str) -> None:
        with self._lock:
            self.down.discard(call)


def test_the_writer_sampling_and_roll_ups_live_through_a_store_outage_and_resume(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "ragmon.agent")
    wal = WriteAheadLog(tmp_path / "wal", fsync="never")
    intake = WalIntake(wal)
    store = OutageStore()
    store.down = {"insert", "read", "roll_up"}  # the server is down
    health = HealthRegistry()
    writer, sampling = store_and_sample(intake, wal, store, tmp_path / "state", health=health)
    sampling.recover(writer.recover())
    writer.start()
    sampling.start()
    try:
        for i in range(5):
            intake.consume("tenant-a", f"request-{i}".encode(), spans=1)
        wait_until(lambda: _state(health, "writer")["state"] == "failing", "the writer to report the outage")
        assert "Connection refused" in _state(health, "writer")["error"]
        assert health.live().ok  # a store outage is no reason to restart the agent

        store.back("insert")  # the server is up but refuses queries (overloaded): inserts go through
        wait_until(lambda: len(store.envelopes) == 5, "the logged requests stored")
        wait_until(lambda: sampling.counts["sampling_errors"] >= 3, "sampling to try, and try again")
        assert _state(health, "writer")["state"] == "ok"
        assert _state(health, "sampling")["state"] == "failing"

        store.back("read")  # the sampler's reads come back; roll-ups (INSERT ... SELECT) still fail
        wait_until(lambda: _state(health, "sampling")["state"] == "ok", "sampling to resume")
        wait_until(lambda: sampling.counts["rollup_errors"] >= 3, "roll-ups to try, and try again")
        assert _state(health, "rollups")["state"] == "failing"

        refused_tokens = set(store.roll_up_tokens)
        store.back("roll_up")
        wait_until(lambda: sampling.settled, "every stored range sampled and rolled up")
        wait_until(lambda: _state(health, "rollups")["state"] == "ok", "roll-ups to report ok again")
        assert health.ready().ok and health.live().ok
        assert store.rolled[-1][1] == sampling.rollups.rolled_to
        # every try of the failed range had the same token: an INSERT that had landed is not counted twice
        assert refused_tokens == {store.rolled[0][2]}
    finally:
        writer.stop(5.0)
        sampling.stop(5.0)
        wal.close()
    # Each loop said what went wrong once and that it resumed once, not once per try.
    said = [record.getMessage() for record in caplog.records if record.name == "ragmon.agent"]
    for loop in ("sampling", "roll-ups"):
        lines = [line for line in said if line.startswith(loop)]
        assert len(lines) == 2, lines
        assert "resumed after" in lines[-1]
    assert {_state(health, name)["state"] for name in ("writer", "sampling", "rollups")} == {"stopped"}
    assert health.live().ok  # stopped when asked to: nothing to restart


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full for a real ENOSPC")
def test_the_writer_lives_through_a_full_disk_under_its_state_and_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "ragmon.agent")
    state = tmp_path / "state"
    state.mkdir()
    # The batch journal is written to batch.tmp and renamed: pointed at /dev/full, every write of it fails with the
    # kernel's own ENOSPC, before the batch reaches the store, as on a full disk.
    full = state / "batch.tmp"
    full.symlink_to("/dev/full")
    wal = WriteAheadLog(tmp_path / "wal", fsync="never")
    intake = WalIntake(wal)
    store = OutageStore()
    health = HealthRegistry()
    writer = StoreWriter(intake, wal, store, state, health=health)
    writer.recover()
    writer.start()
    try:
        for i in range(3):
            intake.consume("tenant-a", f"request-{i}".encode(), spans=1)
        wait_until(lambda: writer.counts["writer_errors"] >= 3, "the writer to try, and try again")
        seen = _state(health, "writer")
        assert seen["state"] == "failing" and "No space left on device" in seen["error"], seen
        assert store.envelopes == [] and writer._thread is not None and writer._thread.is_alive()

        full.unlink()  # room again
        wait_until(lambda: len(store.envelopes) == 3, "the logged requests stored")
        wait_until(lambda: _state(health, "writer")["state"] == "ok", "the writer to report ok again")
    finally:
        writer.stop(5.0)
        wal.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "ragmon.agent" and r.getMessage().startswith("store")]
    assert len(lines) == 2 and "resumed after" in lines[-1], lines  # said once, not once per try


class ReadsDown(FlakyStore):
    """The real store, whose reads fail (the store's own retryable StoreError) while `reads_down` is set."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.failing = False  # alert inserts go through
        self.reads_down = True

    def read(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        if self.reads_down:
            raise StoreError("Code: 210. DB::Exception: Connection refused (injected)", retryable=True, code=210)
        return super().read(sql, params)


@pytest.fixture
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    opened = open_store(str(chdb_engine_dir), database=f"recover_{uuid.uuid4().hex[:8]}")
    yield opened
    opened.close()


def test_alerting_retries_a_store_that_is_down_with_backoff_and_resumes_long_before_its_interval(store: Store) -> None:
    interval_s = 300.0  # the next regular run is five minutes away: a recovery within the deadline is the backoff's
    reads = ReadsDown(store)
    health = HealthRegistry()
    service = AlertingService(AlertsConfig.model_validate({"interval_s": interval_s}), reads, health=health)
    service.start()
    try:
        wait_until(lambda: service.evaluator.stats.runs >= 3, "runs retried after a backoff, not an interval")
        seen = _state(health, "alerting")
        assert seen["state"] == "failing" and "Connection refused" in seen["error"], seen
        assert health.live().ok

        reads.reads_down = False  # the store is back
        wait_until(lambda: _state(health, "alerting")["state"] == "ok", "alerting to report ok again")
        runs = service.evaluator.stats.runs
        assert service._thread.is_alive()
    finally:
        service.stop()
    assert service.evaluator.stats.runs == runs  # back to its interval once it succeeded: no busy loop
    assert _state(health, "alerting")["state"] == "stopped" and health.live().ok
