"""`ragmon judge` workers as real processes beside a real `ragmon serve` (judge.run_in_agent = false): beside it on
the embedded store (through the agent's API), several at once against a server store, a worker killed with -9
mid-run, and the agent killed with -9 while a worker judges. Every kept trace ends with exactly one judgement
per metric: none lost, none scored twice (raw score rows, no FINAL: a second judgement would show before any
merge could collapse it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from ragmon.judges.queue import ItemState, JudgeQueue, Kept

from ragmon.testing import ScriptedOpenAIServer
from tests.agent.harness import REPO, AgentProcess, EngineServer
from tests.agent.judge_traces import kept_traces, post, wait_until
from tests.judges.worker_fakes import faithfulness_responder

LEASE_S = 2.0  # a killed worker's items come back after this


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    return {**env, "PYTHONUNBUFFERED": "1", "RAGMON_JUDGE__RUN_IN_AGENT": "false", **extra}


def _llm_env(server: ScriptedOpenAIServer, **extra: str) -> dict[str, str]:
    return _env(
        RAGMON_JUDGE__BACKEND="llm",
        RAGMON_JUDGE__BASE_URL=server.base_url,
        RAGMON_JUDGE__REQUESTS_PER_MINUTE="600000",
        RAGMON_JUDGE__BUDGET_USD="1000",
        **extra,
    )


_STARTED: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _no_worker_left_behind() -> Iterator[None]:
    yield
    while _STARTED:
        process = _STARTED.pop()
        if process.poll() is None:
            process.kill()
            process.wait(10)


class Worker:
    """One `ragmon judge` process; its stats (the JSON line it prints at exit) in `stats()`."""

    def __init__(self, data_dir: Path, env: dict[str, str], name: str, *args: str) -> None:
        self.out = data_dir.parent / f"{name}.out"
        self.err = data_dir.parent / f"{name}.err"
        command = [sys.executable, "-m", "ragmon.cli", "judge", "--data-dir", str(data_dir)]
        command += ["--metrics", "faithfulness", "--lease-s", str(LEASE_S), "--json", *args]
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=err)
        _STARTED.append(self.process)

    def wait(self, timeout_s: float = 120.0) -> int:
        try:
            return self.process.wait(timeout_s)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(10)

    def stats(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.out.read_text().strip().splitlines()[-1])
        return loaded

    def log(self) -> str:
        return self.err.read_text(errors="replace")


@pytest.fixture
def agents() -> Iterator[list[AgentProcess]]:
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        if agent.process is not None and agent.process.poll() is None:
            agent.kill()


def _queue_counts(data_dir: Path) -> dict[str, int]:
    queue = JudgeQueue.in_data_dir(data_dir)
    try:
        return dict(queue.counts().by_state)
    finally:
        queue.close()


def _judgements(agent: AgentProcess) -> dict[str, dict[str, Any]]:
    rows = agent.query(
        "SELECT trace_id, count() AS n, uniqExact(value, status, explanation, scored_at) AS judgements,"
        " groupUniqArray(status) AS statuses FROM scores WHERE metric = 'faithfulness' GROUP BY trace_id"
    )
    return {row["trace_id"]: row for row in rows}


def _assert_each_judged_once(agent: AgentProcess, trace_ids: list[str]) -> None:
    judged = _judgements(agent)
    lost = set(trace_ids) - set(judged)
    twice = {t: row for t, row in judged.items() if row["n"] != 1 or row["judgements"] != 1}
    assert not lost, f"{len(lost)} of {len(trace_ids)} kept traces were never scored"
    assert not twice, f"scored more than once: {twice}"
    assert set(judged) == set(trace_ids)


def _kept(agent: AgentProcess, n: int) -> None:
    assert agent.wait_for("SELECT count() AS n FROM payloads FINAL", n, timeout_s=60) == n


def test_judge_beside_serve_on_the_embedded_store_judges_everything(tmp_path: Path, agents: list[AgentProcess]) -> None:
    data_dir = tmp_path / "data"
    agent = AgentProcess(data_dir, extra_env=_env(), grpc=False).start()
    agents.append(agent)
    bodies, trace_ids = kept_traces(30)
    post(agent.otlp_http, bodies)
    _kept(agent, len(trace_ids))
    wait_until(lambda: _queue_counts(data_dir).get(ItemState.QUEUED, 0) == len(trace_ids), what="traces queued")

    queue = JudgeQueue.in_data_dir(data_dir)  # an item no worker of this judge version takes: said, not waited for
    queue.enqueue([Kept("default", "f" * 32)], "llm:another-model")
    queue.close()

    worker = Worker(data_dir, _env(), "worker", "--until-empty")  # the offline local judge
    assert worker.wait() == 0, worker.log()
    assert "through the agent at" in worker.log()  # not the embedded store a second time
    assert "1 for llm:another-model" in worker.log()
    assert worker.stats()["traces"] == {"ok": len(trace_ids)}
    _assert_each_judged_once(agent, trace_ids)
    assert _queue_counts(data_dir) == {ItemState.DONE: len(trace_ids), ItemState.QUEUED: 1}


def test_two_workers_against_a_server_store_score_each_trace_once(tmp_path: Path, agents: list[AgentProcess]) -> None:
    data_dir = tmp_path / "data"
    engine = EngineServer(tmp_path / "engine")
    try:
        with ScriptedOpenAIServer(default=partial(faithfulness_responder, delay_s=0.1)) as server:
            env = _llm_env(server, RAGMON_AGENT__CLICKHOUSE_URL=engine.url)
            agent = AgentProcess(data_dir, extra_env=env, grpc=False).start()
            agents.append(agent)
            bodies, trace_ids = kept_traces(40)
            post(agent.otlp_http, bodies)
            _kept(agent, len(trace_ids))
            wait_until(lambda: _queue_counts(data_dir).get(ItemState.QUEUED, 0) == len(trace_ids), what="queued")

            workers = [Worker(data_dir, env, f"worker{i}", "--until-empty", "--concurrency", "2") for i in range(2)]
            for worker in workers:
                assert worker.wait() == 0, worker.log()
                assert "ClickHouse at" in worker.log()
            judged = [sum(worker.stats()["traces"].values()) for worker in workers]
            assert sum(judged) == len(trace_ids)
            assert all(judged), f"one worker judged nothing ({judged}): the two never overlapped"
            _assert_each_judged_once(agent, trace_ids)
    finally:
        for agent in agents:
            if agent.process is not None and agent.process.poll() is None:
                agent.stop()
        engine.stop()


def test_a_worker_killed_mid_run_loses_nothing_and_the_next_one_finishes(
    tmp_path: Path, agents: list[AgentProcess]
) -> None:
    data_dir = tmp_path / "data"
    with ScriptedOpenAIServer(default=partial(faithfulness_responder, delay_s=0.1)) as server:
        env = _llm_env(server)
        agent = AgentProcess(data_dir, extra_env=env, grpc=False).start()
        agents.append(agent)
        bodies, trace_ids = kept_traces(40)
        post(agent.otlp_http, bodies)
        _kept(agent, len(trace_ids))
        wait_until(lambda: _queue_counts(data_dir).get(ItemState.QUEUED, 0) == len(trace_ids), what="queued")

        first = Worker(data_dir, env, "first", "--concurrency", "4")
        wait_until(lambda: _queue_counts(data_dir).get(ItemState.DONE, 0) >= 8, what="the first worker's progress")
        at_kill = _queue_counts(data_dir)
        first.process.send_signal(signal.SIGKILL)
        first.wait(10)
        assert at_kill.get(ItemState.LEASED, 0) > 0, f"the kill hit no leased item: {at_kill}"
        assert at_kill.get(ItemState.DONE, 0) < len(trace_ids)

        second = Worker(data_dir, env, "second", "--until-empty", "--concurrency", "4")
        assert second.wait() == 0, second.log()
    queue = JudgeQueue.in_data_dir(data_dir)
    items = queue.items()
    queue.close()
    assert {item["state"] for item in items} == {ItemState.DONE}
    assert any(item["attempts"] > 1 for item in items), "no lease of the killed worker was taken over"
    _assert_each_judged_once(agent, trace_ids)


def test_the_agent_killed_while_a_worker_judges_loses_nothing(tmp_path: Path, agents: list[AgentProcess]) -> None:
    data_dir = tmp_path / "data"
    with ScriptedOpenAIServer(default=partial(faithfulness_responder, delay_s=0.05)) as server:
        env = _llm_env(server)
        agent = AgentProcess(data_dir, extra_env=env, grpc=False).start()
        agents.append(agent)
        bodies, first_ids = kept_traces(40)
        worker = Worker(data_dir, env, "worker", "--concurrency", "4")  # runs until stopped
        post(agent.otlp_http, bodies)
        wait_until(lambda: _queue_counts(data_dir).get(ItemState.DONE, 0) >= 5, what="judging under way")
        agent.kill()  # kill -9: traces acknowledged but undecided, copied but unqueued, scores undelivered
        at_kill = _queue_counts(data_dir)

        agent.start()  # same data dir and ports; the worker finds it again (a new judge token)
        more, more_ids = kept_traces(10, offset=1000)
        post(agent.otlp_http, more)
        trace_ids = first_ids + more_ids
        _kept(agent, len(trace_ids))
        wait_until(
            lambda: _queue_counts(data_dir).get(ItemState.DONE, 0) == len(trace_ids),
            timeout_s=120,
            what=f"every kept trace judged (at the kill: {at_kill})",
        )
        worker.process.send_signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.log()
    assert at_kill.get(ItemState.DONE, 0) < len(first_ids), "everything was judged before the kill"
    _assert_each_judged_once(agent, trace_ids)
    assert _queue_counts(data_dir) == {ItemState.DONE: len(trace_ids)}
