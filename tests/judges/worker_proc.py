"""A judge worker in a process of its own, for the kill -9 test: `python -m tests.judges.worker_proc QUEUE SINK
BASE_URL N`. It judges the N traces of `worker_fakes.sample` from QUEUE and appends rows to SINK (JSON lines)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from ragmon.judges.llm_judge import LLMJudge, LLMJudgeConfig
from ragmon.judges.queue import JudgeQueue
from ragmon.judges.worker import JudgeWorker, WorkerConfig

from tests.judges.worker_fakes import DictPayloads, JsonlSink, sample, trace_id

LEASE_S = 30.0
CONFIG = WorkerConfig(
    metrics=("faithfulness",), concurrency=4, lease_s=LEASE_S, idle_poll_s=0.05, delivery_interval_s=0.0
)


def payloads(n: int) -> DictPayloads:
    return DictPayloads({("t", trace_id(i)): sample(i) for i in range(n)})


def judge(base_url: str) -> LLMJudge:
    return LLMJudge(LLMJudgeConfig(base_url=base_url, timeout_s=5.0, max_attempts=2, initial_backoff_s=0.01))


async def main(queue_path: str, sink_path: str, base_url: str, n: int) -> None:
    queue = JudgeQueue(queue_path)
    async with judge(base_url) as backend:
        await JudgeWorker(queue, backend, payloads(n), JsonlSink(Path(sink_path)), config=CONFIG).run(until_empty=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
