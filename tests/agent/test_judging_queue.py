"""Kept traces reach the judge queue whoever judges them: with `judge.run_in_agent = false` the agent still
enqueues every kept trace (for the configured judge's version), and at start-up it queues, once, the kept traces
that never were (lost by an agent that queued nothing, or kept while the queue was unavailable)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ragmon.judges.local_judge import LocalJudge
from ragmon.judges.queue import JudgeQueue, Kept
from ragmon.judges.registry import judge_version, make_judge
from ragmon.judges.types import MetricResult, RagSample
from ragmon.judges.worker import JudgeWorker, WorkerConfig
from ragmon.sinks import Store, open_store

from ragmon.agent.agent import Agent
from ragmon.pipeline.judge_store import agent_store_side
from ragmon.settings import JudgeSettings, load_settings
from tests.agent.judge_traces import kept_traces, post, wait_until


@pytest.fixture
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    opened = open_store(chdb_engine_dir, database=f"judging_{uuid.uuid4().hex[:8]}")
    yield opened
    opened.close()


def _agent(data_dir: Path, store: Store, **judge: Any) -> Agent:
    settings = load_settings(
        {
            "agent": {"data_dir": data_dir, "otlp_http": "127.0.0.1:0", "otlp_grpc": "", "api": "127.0.0.1:0"},
            "judge": {"run_in_agent": False, **judge},
        },
        env={},
    )
    return Agent(settings, store=store)


def _queued(data_dir: Path) -> list[dict[str, Any]]:
    queue = JudgeQueue.in_data_dir(data_dir)
    try:
        return queue.items()
    finally:
        queue.close()


def test_the_version_queued_for_is_the_one_the_judge_judges_as() -> None:
    settings = JudgeSettings(base_url="http://127.0.0.1:9", model="gpt-4o-mini")
    for name in ("local", "llm"):
        judge = make_judge(name, settings)
        assert judge_version(name, settings) == judge.version
    # a faithfulness threshold of one's own (fitted on one's labels) decides claims and answers, and is in the version
    tuned = JudgeSettings(faithfulness_threshold=0.62)
    judge = make_judge("local", tuned)
    assert isinstance(judge, LocalJudge)
    assert (judge.faithfulness_threshold, judge.claim_threshold) == (0.62, 0.62)
    assert judge.version != make_judge("local").version and "@0.62:" in judge.version
    assert judge_version("local", tuned) == judge.version
    with pytest.raises(ValueError):
        JudgeSettings(faithfulness_threshold=1.5)


def test_run_in_agent_false_still_queues_every_kept_trace(tmp_path: Path, store: Store) -> None:
    bodies, trace_ids = kept_traces(30)
    agent = _agent(tmp_path, store).start()
    try:
        assert agent.pipeline.judging.service is None  # nobody judges in the agent
        post(f"http://127.0.0.1:{agent.receivers[0].port}", bodies)
        wait_until(lambda: agent.pipeline.writer.counts["requests_stored"] >= len(bodies), what="the requests stored")
    finally:
        agent.stop()  # decides what is held, copies payloads, enqueues them
    kept = {row["trace_id"] for row in store.query("SELECT trace_id FROM payloads FINAL", max_rows=10_000)}
    assert kept == set(trace_ids)
    items = _queued(tmp_path)
    assert sorted(item["trace_id"] for item in items) == sorted(trace_ids)
    assert {(item["judge_version"], item["state"]) for item in items} == {(judge_version("local"), "queued")}
    assert {item["feature"] for item in items} <= {"", "docs-qa"}


def _payload(trace_id: str, age_s: float = 0.0) -> dict[str, Any]:
    return {
        "tenant": "default",
        "trace_id": trace_id,
        "feature": "docs-qa",
        "start_time": time.time_ns() - int(age_s * 1e9),
        "question": "q",
        "answer": "a",
        "passages": [{"id": "d", "score": 0.5, "text": "p"}],
        "sampling_reason": "error",
        "sampling_reasons": ["error"],
        "inclusion_probability": 1.0,
    }


def test_start_up_queues_kept_traces_never_queued_once(tmp_path: Path, store: Store) -> None:
    lost = [f"{i:032x}" for i in range(1, 6)]  # kept while nothing queued them
    scored, queued_elsewhere = f"{100:032x}", f"{101:032x}"
    too_old = f"{102:032x}"  # past the catch-up's week: `ragmon backeval` judges that if anyone does
    store.insert_payloads([_payload(t) for t in [*lost, scored, queued_elsewhere]] + [_payload(too_old, 8 * 86400)])
    store.insert_scores(
        [
            {
                "tenant": "default",
                "trace_id": scored,
                "feature": "docs-qa",
                "metric": "faithfulness",
                "judge_version": "llm:older-model",
                "status": "ok",
                "value": 1.0,
                "scored_at": time.time_ns(),
            }
        ]
    )
    queue = JudgeQueue.in_data_dir(tmp_path)
    queue.enqueue([Kept("default", queued_elsewhere)], "llm:older-model")
    queue.close()
    version = judge_version("local")

    first = _agent(tmp_path, store).start()
    first.stop()
    items = _queued(tmp_path)
    caught_up = sorted(item["trace_id"] for item in items if item["judge_version"] == version)
    assert caught_up == lost  # not the scored trace, not the one queued for another version, not the old one
    assert {item["feature"] for item in items if item["judge_version"] == version} == {"docs-qa"}

    second = _agent(tmp_path, store).start()  # idempotent: nothing queued twice
    second.stop()
    assert _queued(tmp_path) == items


class _ConstantJudge:
    name = "constant"
    version = "constant:1"
    faithfulness_threshold = 0.5

    async def score(self, metric: str, sample: RagSample) -> MetricResult:
        return MetricResult(metric=metric, value=1.0, status="ok")

    async def aclose(self) -> None:
        return None


def test_a_worker_beside_the_agent_scores_an_eval_runs_trace_under_its_run(tmp_path: Path, store: Store) -> None:
    """`ragmon judge` beside `ragmon serve`: the payload (through the agent's judge endpoint) says which eval run
    the trace belongs to, and the score rows written back (through the other endpoint) carry it."""
    nightly, production = f"{1:032x}", f"{2:032x}"
    store.insert_payloads([{**_payload(nightly), "eval_run": "nightly"}, _payload(production)])
    judge = _ConstantJudge()
    agent = _agent(tmp_path, store).start()
    try:
        assert agent.api is not None
        # what an agent that opened the data dir's store itself publishes (this one was handed the test's store)
        (tmp_path / "agent.json").write_text(json.dumps({"api": agent.api.url}))
        queue = JudgeQueue.in_data_dir(tmp_path)
        side = agent_store_side(tmp_path)
        try:
            queue.enqueue([Kept("default", nightly), Kept("default", production)], judge.version)
            config = WorkerConfig(metrics=("faithfulness",), idle_poll_s=0.05, delivery_interval_s=0.05)
            worker = JudgeWorker(queue, judge, side.payloads, side.sink, config=config)
            asyncio.run(worker.run(until_empty=True))
        finally:
            queue.close()
            side.close()
        assert worker.stats.rows_delivered == 2
    finally:
        agent.stop()
    rows = store.query(
        "SELECT trace_id, feature, eval_run, value FROM scores WHERE judge_version = {v:String} ORDER BY trace_id",
        {"v": judge.version},
    )
    assert rows == [
        {"trace_id": nightly, "feature": "docs-qa", "eval_run": "nightly", "value": 1.0},
        {"trace_id": production, "feature": "docs-qa", "eval_run": "", "value": 1.0},
    ]


def _judge_call(api: str, path: str, body: Any, token: str | None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"} | ({"X-Ragmon-Judge-Token": token} if token else {})
    request = urllib.request.Request(f"{api}{path}", data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_judge_endpoints_want_the_data_dirs_token(tmp_path: Path, store: Store) -> None:
    store.insert_payloads([_payload(f"{1:032x}")])
    agent = _agent(tmp_path, store).start()
    try:
        assert agent.api is not None
        api = agent.api.url
        token = (tmp_path / "judge-api.token").read_text()
        assert (tmp_path / "judge-api.token").stat().st_mode & 0o077 == 0  # the owner's alone
        ask = {"tenant": "default", "trace_ids": [f"{1:032x}", f"{2:032x}"]}
        assert _judge_call(api, "/api/judge/payloads", ask, None)[0] == 403
        assert _judge_call(api, "/api/judge/payloads", ask, token + "x")[0] == 403
        assert _judge_call(api, "/api/judge/payloads", {"tenant": "default", "trace_ids": "abc"}, token)[0] == 400
        status, found = _judge_call(api, "/api/judge/payloads", ask, token)
        assert status == 200 and list(found) == [f"{1:032x}"] and found[f"{1:032x}"]["passage_texts"] == ["p"]
        row = {"tenant": "default", "trace_id": f"{1:032x}", "metric": "faithfulness", "judge_version": "v"}
        row |= {"status": "ok", "value": 1.0, "scored_at": time.time_ns()}
        assert _judge_call(api, "/api/judge/scores", {"rows": [row]}, None)[0] == 403
        assert _judge_call(api, "/api/judge/scores", {"rows": [row]}, token) == (200, {"written": 1})
        assert _judge_call(api, "/api/judge/scores", {"rows": [row]}, token) == (200, {"written": 1})  # a re-send
    finally:
        agent.stop()
    assert store.query("SELECT count() AS n FROM scores")[0]["n"] == 1  # the identical re-send was dropped


def test_scores_judged_in_the_agent_carry_the_release_the_app_sent(tmp_path: Path, store: Store) -> None:
    """An app's release (`service.version` on its resource) reaches the scores of its kept traces: span → payload
    copy → queue → the agent's worker (the local judge) → score rows, so judged quality compares by release."""
    old_bodies, old_ids = kept_traces(3, resource={"service.version": "2.3.0"})
    new_bodies, new_ids = kept_traces(3, offset=3, resource={"service.version": "2.3.1"})
    settings = load_settings(
        {
            "agent": {"data_dir": tmp_path, "otlp_http": "127.0.0.1:0", "otlp_grpc": "", "api": "127.0.0.1:0"},
            "judge": {"run_in_agent": True, "backend": "local"},
        },
        env={},
    )
    agent = Agent(settings, store=store).start()

    def releases() -> dict[str, set[str]]:
        rows = store.query("SELECT trace_id, release FROM scores WHERE metric = 'faithfulness'", max_rows=10_000)
        out: dict[str, set[str]] = {}
        for row in rows:
            out.setdefault(row["trace_id"], set()).add(row["release"])
        return out

    try:
        post(f"http://127.0.0.1:{agent.receivers[0].port}", [*old_bodies, *new_bodies])
        wait_until(lambda: len(releases()) == 6, timeout_s=120, what="every kept trace scored")
    finally:
        agent.stop()
    assert releases() == {**{t: {"2.3.0"} for t in old_ids}, **{t: {"2.3.1"} for t in new_ids}}


def test_a_worker_beside_the_agent_scores_a_trace_under_its_release(tmp_path: Path, store: Store) -> None:
    """`ragmon judge` beside `ragmon serve`: the payload read through the agent's judge endpoint carries the
    trace's release, and the score rows written back through the other endpoint keep it."""
    released, unreleased = f"{1:032x}", f"{2:032x}"
    store.insert_payloads([{**_payload(released), "release": "2.3.1"}, _payload(unreleased)])
    judge = _ConstantJudge()
    agent = _agent(tmp_path, store).start()
    try:
        assert agent.api is not None
        (tmp_path / "agent.json").write_text(json.dumps({"api": agent.api.url}))
        queue = JudgeQueue.in_data_dir(tmp_path)
        side = agent_store_side(tmp_path)
        try:
            queue.enqueue([Kept("default", released), Kept("default", unreleased)], judge.version)
            config = WorkerConfig(metrics=("faithfulness",), idle_poll_s=0.05, delivery_interval_s=0.05)
            worker = JudgeWorker(queue, judge, side.payloads, side.sink, config=config)
            asyncio.run(worker.run(until_empty=True))
        finally:
            queue.close()
            side.close()
    finally:
        agent.stop()
    rows = store.query(
        "SELECT trace_id, release FROM scores WHERE judge_version = {v:String} ORDER BY trace_id",
        {"v": judge.version},
    )
    assert rows == [{"trace_id": released, "release": "2.3.1"}, {"trace_id": unreleased, "release": ""}]
