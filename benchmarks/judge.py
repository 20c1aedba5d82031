"""Benchmark: judge worker throughput against a rate limit, and exact cost accounting.

A scripted OpenAI-compatible endpoint on 127.0.0.1 answers every judge call in 200 ms with fixed token counts;
the LLM judge is limited to 600 requests/min. The worker drains a queue of kept traces (faithfulness: two calls
per trace) for a warm-up and then a measured window; the figure is the requests the endpoint received inside the
window, per minute, against the limit (goal ≥ 90 %). The warm-up keeps the bucket's initial burst (one second's
worth) out of the window. Cost: the sum of the delivered rows' `cost_usd` and the budget's spend, each against
the price table applied to the token counts the endpoint actually served.

    /work/venv/bin/python benchmarks/judge.py [--seconds 60] [--warmup-s 5] [--rpm 600] [--latency-ms 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from judges.llm_judge import LLMJudge, LLMJudgeConfig
from judges.queue import JudgeQueue, Kept
from judges.types import RagSample
from judges.worker import JudgeWorker, WorkerConfig
from ragmon.pricing import default_price_table
from ragmon.testing import Completion, ScriptedOpenAIServer

MODEL = "gpt-4o-mini"
CLAIMS = {"refusal": False, "claims": ["The tower was completed in 1889.", "The tower is 300 m tall."]}
VERDICTS = {"verdicts": [{"claim": 0, "verdict": "supported"}, {"claim": 1, "verdict": "contradicted"}]}


class Endpoint:
    """Replies by step, with token counts that vary per request, and remembers what it billed."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.served: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def __call__(self, body: Any) -> Completion:
        verdicts = '"verdicts"' in body["messages"][0]["content"]
        with self._lock:
            n = len(self.served)
            prompt_tokens, completion_tokens = (700 + n % 97, 50 + n % 13) if verdicts else (400 + n % 89, 30 + n % 7)
            self.served.append((prompt_tokens, completion_tokens))
        return Completion(
            json.dumps(VERDICTS if verdicts else CLAIMS),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            delay_s=self.latency_s,
        )


class Rows:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def write(self, rows: list[dict[str, Any]]) -> None:
        self.rows.extend(rows)


class Payloads:
    async def payload(self, tenant: str, trace_id: str) -> RagSample:
        return RagSample(
            question=f"When was the tower completed, and how tall is it? ({trace_id[-6:]})",
            answer="It was completed in 1889 [1]. It is 300 metres tall.",
            passages=["The tower, completed in 1889, is 330 metres tall."],
        )


async def run(seconds: float, warmup_s: float, rpm: int, latency_ms: float, data_dir: Path) -> dict[str, Any]:
    endpoint = Endpoint(latency_ms / 1000)
    with ScriptedOpenAIServer(default=endpoint) as server:
        config = LLMJudgeConfig(
            base_url=server.base_url, model=MODEL, requests_per_minute=rpm, budget_usd=1_000.0, timeout_s=10.0
        )
        judge = LLMJudge(config)
        queue = JudgeQueue.in_data_dir(data_dir)
        traces = int((seconds + warmup_s) * rpm / 60 / 2 * 1.5) + 50  # more than the limit allows: never idle
        queue.enqueue([Kept("bench", f"{i:032x}", feature="bench") for i in range(traces)], judge.version)
        sink = Rows()
        worker = JudgeWorker(
            queue, judge, Payloads(), sink, config=WorkerConfig(metrics=("faithfulness",), concurrency=16)
        )
        running = asyncio.create_task(worker.run())
        started = time.monotonic()
        await asyncio.sleep(warmup_s + seconds)
        await worker.stop(timeout_s=10.0)
        await running
        await judge.aclose()
        window = [r for r in server.requests if started + warmup_s <= r.received_at_s < started + warmup_s + seconds]
        queue.close()

    price = default_price_table().lookup(MODEL)
    assert price is not None and price.input_per_1m is not None and price.output_per_1m is not None
    expected_usd = sum(p * price.input_per_1m / 1e6 + c * price.output_per_1m / 1e6 for p, c in endpoint.served)
    rows_usd = sum(r["cost_usd"] or 0.0 for r in sink.rows)
    achieved_rpm = len(window) / seconds * 60
    return {
        "limit_rpm": rpm,
        "latency_ms": latency_ms,
        "window_s": seconds,
        "requests_in_window": len(window),
        "achieved_rpm": round(achieved_rpm, 1),
        "ratio": round(achieved_rpm / rpm, 4),
        "traces_scored": len(sink.rows),
        "requests_served": len(endpoint.served),
        "judge_calls_in_rows": sum(r["judge_calls"] for r in sink.rows),
        "cost_expected_usd": round(expected_usd, 9),
        "cost_rows_usd": round(rows_usd, 9),
        "cost_budget_spent_usd": round(judge.budget.spent_usd, 9),
        "cost_rows_minus_expected_usd": rows_usd - expected_usd,
        "statuses": dict(worker.stats.scores),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window (default 60)")
    parser.add_argument("--warmup-s", type=float, default=5.0, help="run before the window (default 5)")
    parser.add_argument("--rpm", type=int, default=600, help="the judge's requests-per-minute limit")
    parser.add_argument("--latency-ms", type=float, default=200.0, help="the endpoint's reply delay")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ragmon-judge-bench-") as tmp:
        result = asyncio.run(run(args.seconds, args.warmup_s, args.rpm, args.latency_ms, Path(tmp)))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"judge worker: {result['achieved_rpm']} requests/min over {args.seconds:g} s "
            f"(limit {args.rpm}, endpoint {args.latency_ms:g} ms) = {result['ratio']:.1%} of the limit"
        )
        print(
            f"cost: rows ${result['cost_rows_usd']:.9f}, budget spent ${result['cost_budget_spent_usd']:.9f}, "
            f"expected from scripted tokens ${result['cost_expected_usd']:.9f} "
            f"(rows − expected = {result['cost_rows_minus_expected_usd']:.3g}); "
            f"{result['requests_served']} requests served, {result['judge_calls_in_rows']} in rows, "
            f"{result['traces_scored']} traces scored; statuses {result['statuses']}"
        )
    ok = result["ratio"] >= 0.9 and abs(result["cost_rows_minus_expected_usd"]) < 1e-9
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
