"""The queue survives kill -9 of the worker: a worker process is killed mid-work, a new one picks up, and every
kept trace ends done (or explicitly failed) — none lost, none judged twice, re-sent rows identical."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

from ragmon.judges.queue import ItemState, JudgeQueue, Kept
from ragmon.judges.worker import JudgeWorker

from ragmon.testing import ScriptedOpenAIServer
from tests.judges import worker_proc
from tests.judges.worker_fakes import JsonlSink, faithfulness_responder, trace_id

N = 40
ROOT = Path(__file__).resolve().parents[2]


def traces_asked(server: ScriptedOpenAIServer, since: int = 0) -> list[int]:
    """Which trace each chat request was about (the sample's question and passage end with "(i)", "(source i)")."""
    found = []
    for request in server.requests[since:]:
        match = re.search(r"\((?:source )?(\d+)\)", request.json["messages"][-1]["content"])
        assert match is not None
        found.append(int(match.group(1)))
    return found


async def test_every_trace_ends_once_after_the_worker_is_killed(server: ScriptedOpenAIServer, tmp_path: Path) -> None:
    server.default = partial(faithfulness_responder, delay_s=0.05)
    queue_path, sink_path = tmp_path / "q.sqlite", tmp_path / "scores.jsonl"
    queue = JudgeQueue(queue_path)
    version = worker_proc.judge(server.base_url).version
    queue.enqueue([Kept("t", trace_id(i)) for i in range(N)], version)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.judges.worker_proc", str(queue_path), str(sink_path), server.base_url, str(N)],
        cwd=ROOT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            counts = queue.counts()
            if counts[ItemState.DONE] >= 8 and counts[ItemState.LEASED] >= 1:
                break
            time.sleep(0.02)  # polling a subprocess, not waiting for time to pass
        assert process.poll() is None, "the worker finished before it could be killed"
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    before = queue.counts()
    assert before[ItemState.LEASED] >= 1 and before[ItemState.DONE] < N  # killed mid-work
    done_before = {r["trace_id"] for r in JsonlSink.read(sink_path)}
    requests_before = len(server.requests)

    # A new worker, after the dead one's leases have run out (time shifted rather than slept through).
    restarted = JudgeQueue(queue_path, clock=lambda: time.time() + worker_proc.LEASE_S + 1)
    async with worker_proc.judge(server.base_url) as backend:
        worker = JudgeWorker(
            restarted, backend, worker_proc.payloads(N), JsonlSink(sink_path), config=worker_proc.CONFIG
        )
        await worker.run(until_empty=True)

    assert restarted.counts().by_state == {"done": N}
    rows = JsonlSink.read(sink_path)
    assert {r["trace_id"] for r in rows} == {trace_id(i) for i in range(N)}  # none lost
    distinct: dict[str, set[str]] = {}
    for row in rows:
        distinct.setdefault(row["trace_id"], set()).add(json.dumps(row, sort_keys=True))
    assert all(len(judgements) == 1 for judgements in distinct.values())  # a re-send is identical: one judgement
    assert all(row["status"] == "ok" for row in rows)
    # Nothing finished before the kill was asked about again; only traces in flight at the kill were re-judged.
    asked_after = set(traces_asked(server, requests_before))
    assert not {trace_id(i) for i in asked_after} & done_before
    assert len(server.requests) <= 2 * N + 2 * worker_proc.CONFIG.concurrency
    restarted.close()
    queue.close()
