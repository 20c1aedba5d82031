"""`ragmon judge` workers beside a real `ragmon serve` on the embedded store (judge.run_in_agent = false; the
workers read payloads and write scores through the agent's API), against a scripted OpenAI-compatible judge
endpoint (`ragmon.testing.ScriptedOpenAIServer`, 50 ms a reply; faithfulness: two calls a trace).

    python benchmarks/judge_workers.py --traces 500 kills     # kill -9 of the agent, then of a worker
    python benchmarks/judge_workers.py --traces 500 two       # two workers at once

`kills`: a worker judges while the traces arrive; at a quarter judged the agent is killed with -9 and restarted
(the worker finds it again); at half judged the worker is killed with -9 and a second worker finishes the queue.
`two`: two workers start together on a full queue. Both print kept, scored, lost and doubled traces (raw score
rows, no FINAL: a trace judged twice shows as two rows or two distinct judgements) and the judge calls made
(above 2 a trace: the calls of traces a killed worker held, judged again by the next one).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ragmon.judges.queue import ItemState, JudgeQueue  # noqa: E402

from ragmon.testing import ScriptedOpenAIServer  # noqa: E402
from tests.agent.harness import AgentProcess  # noqa: E402 - the repo's own test harness
from tests.agent.judge_traces import kept_traces, post, wait_until  # noqa: E402
from tests.agent.test_judge_workers import Worker, _judgements, _llm_env, _queue_counts  # noqa: E402
from tests.judges.worker_fakes import faithfulness_responder  # noqa: E402


def _done(data_dir: Path) -> int:
    return _queue_counts(data_dir).get(ItemState.DONE, 0)


def kills(n: int, data_dir: Path, agent: AgentProcess, env: dict[str, str]) -> str:
    bodies, ids = kept_traces(n, per_request=20)
    worker = Worker(data_dir, env, "first", "--concurrency", "8")
    post(agent.otlp_http, bodies)
    wait_until(lambda: _done(data_dir) >= n // 4, timeout_s=600, what="a quarter judged")
    agent.kill()
    at_agent_kill = _queue_counts(data_dir)
    agent.start()
    wait_until(lambda: _done(data_dir) >= n // 2, timeout_s=600, what="half judged")
    at_worker_kill = _queue_counts(data_dir)
    worker.process.send_signal(signal.SIGKILL)
    worker.wait(10)
    second = Worker(data_dir, env, "second", "--until-empty", "--concurrency", "8")
    if second.wait(1200) != 0:
        raise SystemExit(second.log())
    queue = JudgeQueue.in_data_dir(data_dir)
    retaken = sum(1 for item in queue.items() if item["attempts"] > 1)
    queue.close()
    return (
        _summary(agent, ids)
        + f"; queue at the agent's kill {at_agent_kill}, at the worker's kill {at_worker_kill}"
        + f"; leases retaken {retaken}"
    )


def two(n: int, data_dir: Path, agent: AgentProcess, env: dict[str, str]) -> str:
    bodies, ids = kept_traces(n, per_request=20)
    post(agent.otlp_http, bodies)
    wait_until(lambda: _queue_counts(data_dir).get(ItemState.QUEUED, 0) == n, timeout_s=600, what="all queued")
    workers = [Worker(data_dir, env, f"worker{i}", "--until-empty", "--concurrency", "8") for i in range(2)]
    for worker in workers:
        if worker.wait(1200) != 0:
            raise SystemExit(worker.log())
    per_worker = [sum(worker.stats()["traces"].values()) for worker in workers]
    return _summary(agent, ids) + f"; judged per worker {per_worker}"


def _summary(agent: AgentProcess, ids: list[str]) -> str:
    judged = _judgements(agent)
    kept = agent.query("SELECT count() AS n FROM payloads FINAL")[0]["n"]
    lost = len(set(ids) - set(judged))
    doubled = sum(1 for row in judged.values() if row["n"] != 1 or row["judgements"] != 1)
    return f"traces sent {len(ids)}, kept {kept}, scored {len(judged)}, lost {lost}, doubled {doubled}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", choices=("kills", "two"))
    parser.add_argument("--traces", type=int, default=500)
    args = parser.parse_args(argv)
    data_dir = Path(tempfile.mkdtemp(prefix="ragmon-judge-bench-")) / "data"
    began = time.monotonic()
    with ScriptedOpenAIServer(default=partial(faithfulness_responder, delay_s=0.05)) as server:
        env = _llm_env(server)
        agent = AgentProcess(data_dir, extra_env=env, grpc=False).start()
        try:
            line = (kills if args.scenario == "kills" else two)(args.traces, data_dir, agent, env)
        finally:
            agent.stop()
        calls = len(server.requests)
    print(f"{args.scenario}: {line}; judge calls {calls}; {time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
