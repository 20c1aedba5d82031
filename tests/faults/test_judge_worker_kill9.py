"""kill -9 of `ragmon judge` (the stand-alone worker: a real process over the queue file and the embedded store) at
random moments, three times, then a last run to the end. Every kept trace ends judged exactly once or explicitly
failed; the killed workers' leases expire (2 s) and are taken over by the next worker, not stolen earlier."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
from ragmon.judges.queue import FINAL_STATES, ItemState, JudgeQueue, Kept

from ragmon.settings import JudgeSettings
from ragmon.testing import ScriptedOpenAIServer
from tests.faults import scenario_rows
from tests.faults.faults_support import scaled, suite_env_names
from tests.judges.worker_fakes import faithfulness_responder

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parents[2]
TOOL = Path(__file__).with_name("judge_store_tool.py")
LEASE_S = 2.0
KILLS = 3


def trace_id(i: int) -> str:
    return f"{i + 1:032x}"  # as judge_store_tool.py writes them


def _tool(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(TOOL), *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _worker(data_dir: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "ragmon.cli", "judge", "--data-dir", str(data_dir), "--metrics", "faithfulness"]
    command += ["--concurrency", "4", "--lease-s", str(LEASE_S), "--until-empty"]
    with open(log, "ab") as out:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def _progress(queue: JudgeQueue) -> int:
    counts = queue.counts()
    return counts[ItemState.RECORDED] + counts[ItemState.DONE] + counts[ItemState.FAILED]


def test_killed_judge_workers_lose_nothing_and_judge_nothing_twice(tmp_path: Path) -> None:
    n = scaled(60, 400)
    rng = random.Random(4)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    _tool("seed", str(data_dir), str(n))
    log = tmp_path / "judge.log"
    version = f"llm:{JudgeSettings().model}"
    queue = JudgeQueue.in_data_dir(data_dir)
    queue.enqueue([Kept("t", trace_id(i)) for i in range(n)], version)
    kills: list[tuple[int, int]] = []  # (items finished when killed, items leased when killed)
    with ScriptedOpenAIServer(default=partial(faithfulness_responder, delay_s=0.05)) as server:
        env = {
            **{k: v for k, v in os.environ.items() if k not in suite_env_names()},
            "PYTHONUNBUFFERED": "1",
            "RAGMON_JUDGE__BACKEND": "llm",
            "RAGMON_JUDGE__BASE_URL": server.base_url,
            "RAGMON_JUDGE__REQUESTS_PER_MINUTE": "600000",
            "RAGMON_JUDGE__BUDGET_USD": "1000",
        }
        for _ in range(KILLS):
            # A random moment: after a random number of further traces finished (so the worker is mid-work).
            target = _progress(queue) + rng.randint(1, max(1, n // (2 * KILLS)))
            process = _worker(data_dir, env, log)
            try:
                deadline = time.monotonic() + 90
                while process.poll() is None and _progress(queue) < target and time.monotonic() < deadline:
                    time.sleep(0.01)  # polling the queue file, not waiting for time to pass
                time.sleep(rng.uniform(0.0, 0.2))
                assert process.poll() is None, f"the worker exited before the kill:\n{log.read_text()}"
                counts = queue.counts()
                process.send_signal(signal.SIGKILL)
                process.wait(10)
                kills.append((_progress(queue), counts[ItemState.LEASED]))
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait(10)
        assert _progress(queue) < n, "everything was judged before the last kill: the test proves nothing"
        assert any(leased for _, leased in kills), "no kill hit a worker holding leases"

        last = _worker(data_dir, env, log)  # waits out the dead workers' leases, then finishes the queue
        assert last.wait(180) == 0, log.read_text()
        judge_calls = len(server.requests)

    items = queue.items()
    queue.close()
    assert len(items) == n and all(item["state"] in FINAL_STATES for item in items)
    retaken = [item for item in items if item["attempts"] > 1]
    assert retaken, "no lease was ever taken over"

    rows = json.loads(_tool("scores", str(data_dir)))
    ours = [row for row in rows if row["judge_version"] == version]
    lost = {trace_id(i) for i in range(n)} - {row["trace_id"] for row in ours}
    twice = [row for row in ours if int(row["judgements"]) != 1]
    duplicates = sum(int(row["n"]) - 1 for row in ours)
    scenario_rows.record(
        scenario_rows.ScenarioRow(
            scenario="kill -9 of `ragmon judge` x3",
            unit="traces",
            tried=judge_calls,
            faults=len(kills),
            acknowledged=n,
            stored=len({row["trace_id"] for row in ours}),
            lost=len(lost),
            duplicates=duplicates,
            note=f"leases retaken {len(retaken)}; finished/leased at kills {kills}",
        )
    )
    assert not lost
    assert twice == [], "a trace was judged twice for one judge version"
    assert duplicates == 0, "a re-sent score row is visible twice"
    assert all(set(row["statuses"]) <= {"ok", "skipped", "llm_error"} for row in ours)
