"""The judge worker end to end against a scripted OpenAI-compatible server on 127.0.0.1: good replies, malformed
JSON, 429 with Retry-After, 500s, timeouts, the budget running out mid-queue, payloads missing or failing, a
failing store, graceful stop — every kept trace ends with a score or an explicit non-ok status."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from ragmon.judges.queue import JudgeQueue, Kept
from ragmon.judges.types import MetricResult, RagSample
from ragmon.judges.worker import JudgeWorker, WorkerConfig
from ragmon.sinks.errors import StoreError
from ragmon.sinks.migrations import SCORE_COLUMNS_V3
from ragmon.sinks.schema import SCORE_COLUMNS

from ragmon.pipeline.judge_store import StoredPayload, StoreScoreSink
from ragmon.pricing import default_price_table
from ragmon.testing import Completion, ErrorReply, ScriptedOpenAIServer, malformed_json
from tests.judges.conftest import JudgeFactory
from tests.judges.worker_fakes import (
    CLAIMS_TOKENS,
    VERDICTS_TOKENS,
    DictPayloads,
    ListSink,
    faithfulness_responder,
    sample,
    trace_id,
)

FAST = WorkerConfig(metrics=("faithfulness",), concurrency=4, idle_poll_s=0.05, delivery_interval_s=0.05)
PRICE = default_price_table().lookup("gpt-4o-mini")


def cost(prompt_tokens: int, completion_tokens: int) -> float:
    assert PRICE is not None and PRICE.input_per_1m is not None and PRICE.output_per_1m is not None
    return prompt_tokens * PRICE.input_per_1m / 1e6 + completion_tokens * PRICE.output_per_1m / 1e6


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[JudgeQueue]:
    q = JudgeQueue.in_data_dir(tmp_path, synchronous="NORMAL")
    yield q
    q.close()


def fill(queue: JudgeQueue, judge: Any, n: int, *, with_span: bool = False) -> DictPayloads:
    kept = [
        Kept("t", trace_id(i), feature="faq", span_id=f"{i + 1:016x}" if with_span else "", inclusion_probability=0.5)
        for i in range(n)
    ]
    queue.enqueue(kept, judge.version)
    return DictPayloads({("t", trace_id(i)): sample(i) for i in range(n)})


async def drain(
    queue: JudgeQueue, judge: Any, payloads: Any, sink: Any, config: WorkerConfig = FAST, **kw: Any
) -> JudgeWorker:
    worker = JudgeWorker(queue, judge, payloads, sink, config=config, **kw)
    await worker.run(until_empty=True)
    return worker


def by_trace(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["trace_id"], []).append(row)
    return out


async def test_good_replies_score_every_trace_once_with_exact_cost(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory, queue: JudgeQueue
) -> None:
    server.default = faithfulness_responder
    judge = make_judge()
    payloads = fill(queue, judge, 6, with_span=True)
    sink = ListSink()
    worker = await drain(queue, judge, payloads, sink)
    rows = sink.rows
    assert sorted(r["trace_id"] for r in rows) == sorted(trace_id(i) for i in range(6))  # one row each
    for row in rows:
        assert (row["status"], row["value"], row["metric"]) == ("ok", 0.5, "faithfulness")
        assert row["judge_version"] == "llm:gpt-4o-mini" and row["feature"] == "faq"
        assert (row["input_tokens"], row["output_tokens"], row["judge_calls"]) == (800, 100, 2)
        assert row["cost_usd"] == pytest.approx(cost(800, 100), abs=1e-12)
        assert [c["verdict"] for c in row["claims"]] == ["supported", "contradicted"]
        assert row["inclusion_probability"] == 0.5
    assert sum(r["cost_usd"] for r in rows) == pytest.approx(judge.budget.spent_usd, abs=1e-9)
    assert len(server.requests) == 12 and server.handler_errors == []
    assert queue.counts().by_state == {"done": 6} and worker.stats.traces == Counter(ok=6)


async def test_malformed_json_ends_as_parse_error_never_a_score(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory, queue: JudgeQueue
) -> None:
    server.default = malformed_json()
    judge = make_judge()
    sink = ListSink()
    await drain(queue, judge, fill(queue, judge, 3), sink)
    assert [(r["status"], r["value"]) for r in sink.rows] == [("parse_error", None)] * 3
    assert queue.counts().by_status == {"parse_error": 3}


async def test_429_with_retry_after_is_honoured_and_the_trace_scores(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory, queue: JudgeQueue
) -> None:
    server.script(ErrorReply(429, retry_after_s=0.3))
    server.default = faithfulness_responder
    judge = make_judge()
    sink = ListSink()
    await drain(queue, judge, fill(queue, judge, 1), sink)
    assert [(r["status"], r["value"]) for r in sink.rows] == [("ok", 0.5)]
    first, second = server.requests[0], server.requests[1]
    assert second.received_at_s - first.received_at_s >= 0.3  # backoff alone would be ≤ 0.05 s


async def test_500s_are_retried_then_llm_error_with_bounded_attempts(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory, queue: JudgeQueue
) -> None:
    server.script(ErrorReply(500), ErrorReply(503))
    server.default = faithfulness_responder
    judge = make_judge()
    sink = ListSink()
    await drain(queue, judge, fill(queue, judge, 1), sink)
    assert [r["status"] for r in sink.rows] == ["ok"]
    server.clear()
    server.default = ErrorReply(500)
    other = make_judge(model="gpt-4o")  # a new judge version: the same trace is judged again, by it
    fill(queue, other, 1)
    await drain(queue, other, fill(queue, other, 1), sink)
    failed = [r for r in sink.rows if r["judge_version"] == other.version]
    assert [(r["status"], r["value"]) for r in failed] == [("llm_error", None)]
    assert "gave up after 3 attempts" in failed[0]["explanation"] and len(server.requests) == 3


async def test_timeouts_end_as_llm_error(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory, queue: JudgeQueue
) -> None:
    server.default = Completion("{}", delay_s=5.0)
    judge = make_judge(timeout_s=0.2, max_attempts=2)
    sink = ListSink()
    started = time.monotonic()
    await drain(queue, judge, fill(queue, judge, 2), sink)
    assert [(r["status"], r["value"]) for r in sink.rows] == [("llm_error", None)] * 2
    assert all("timeout" in r["explanation"] for r in sink.rows)
    assert time.monotonic() - started < 3.0


async def test_budget_exhausted_mid_queue_leaves_no_trace_behind(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory, queue: JudgeQueue
) -> None:
    server.default = faithfulness_responder
    judge = make_judge(budget_usd=0.002, requests_per_minute=60_000)  # refused calls wait for rate tokens too
    sink = ListSink()
    worker = await drain(queue, judge, fill(queue, judge, 30), sink, config=FAST)
    rows = by_trace(sink.rows)
    assert sorted(rows) == sorted(trace_id(i) for i in range(30)) and all(len(r) == 1 for r in rows.values())
    statuses = Counter(r[0]["status"] for r in rows.values())
    assert statuses["ok"] >= 1 and statuses["budget_exhausted"] >= 1
    assert set(statuses) <= {"ok", "budget_exhausted"}, statuses
    assert all(r[0]["value"] is None for r in rows.values() if r[0]["status"] == "budget_exhausted")
    assert judge.budget.spent_usd <= 0.002 and judge.budget.reserved_usd == 0
    ok_cost = cost(*CLAIMS_TOKENS) + cost(*VERDICTS_TOKENS)
    assert sum(r[0]["cost_usd"] or 0.0 for r in rows.values()) == pytest.approx(judge.budget.spent_usd, abs=1e-9)
    assert judge.budget.spent_usd >= statuses["ok"] * ok_cost - 1e-9
    assert queue.counts().by_state == {"done": 30} and worker.stats.traces["budget_exhausted"] >= 1


async def test_missing_payload_is_skipped_for_every_metric(make_judge: JudgeFactory, queue: JudgeQueue) -> None:
    judge = make_judge()
    queue.enqueue([Kept("t", trace_id(0))], judge.version)
    sink = ListSink()
    config = WorkerConfig(metrics=("faithfulness", "context_precision"), idle_poll_s=0.05, delivery_interval_s=0.05)
    await drain(queue, judge, DictPayloads({}), sink, config=config)
    assert sorted((r["metric"], r["status"], r["value"], r["explanation"]) for r in sink.rows) == [
        ("context_precision", "skipped", None, "payload missing"),
        ("faithfulness", "skipped", None, "payload missing"),
    ]


async def test_a_failing_payload_source_is_retried_then_the_trace_fails_explicitly(
    make_judge: JudgeFactory, queue: JudgeQueue
) -> None:
    judge = make_judge()
    payloads = fill(queue, judge, 1)
    payloads.fail_times = 10**6
    payloads.error = StoreError("Code: 27. DB::Exception: Cannot parse input (store unavailable)", retryable=False)
    sink = ListSink()
    config = WorkerConfig(
        metrics=("faithfulness",), max_attempts=3, payload_retry_s=0.0, idle_poll_s=0.01, delivery_interval_s=0.01
    )
    worker = await drain(queue, judge, payloads, sink, config=config)
    assert payloads.calls == 3 and worker.stats.payload_errors == 3
    (row,) = sink.rows
    assert (row["status"], row["value"]) == ("skipped", None)
    assert "gave up after 3 attempts" in row["explanation"] and "store unavailable" in row["explanation"]
    (item,) = queue.items()
    assert (item["state"], item["status"], item["attempts"]) == ("failed", "skipped", 4)


async def test_a_store_down_longer_than_max_attempts_fails_no_trace(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory, queue: JudgeQueue
) -> None:
    server.default = faithfulness_responder
    judge = make_judge()
    payloads = fill(queue, judge, 2)
    payloads.fail_times = 10  # five times as many reads as a trace has attempts: the store was down, not the trace
    config = WorkerConfig(
        metrics=("faithfulness",), max_attempts=2, payload_retry_s=0.0, idle_poll_s=0.01, delivery_interval_s=0.01
    )
    sink = ListSink()
    worker = await drain(queue, judge, payloads, sink, config=config)
    assert worker.stats.payload_errors == 10
    assert sorted((r["trace_id"], r["status"]) for r in sink.rows) == [(trace_id(i), "ok") for i in range(2)]
    assert {item["state"] for item in queue.items()} == {"done"}


async def test_a_failing_store_delays_delivery_without_losing_or_rejudging(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory, queue: JudgeQueue
) -> None:
    server.default = faithfulness_responder
    judge = make_judge()
    sink = ListSink(fail_times=2)
    config = WorkerConfig(metrics=("faithfulness",), idle_poll_s=0.01, delivery_interval_s=0.01, delivery_retry_s=0.01)
    worker = await drain(queue, judge, fill(queue, judge, 3), sink, config=config)
    assert sorted(r["trace_id"] for r in sink.rows) == sorted(trace_id(i) for i in range(3))
    assert worker.stats.delivery_errors == 2 and len(server.requests) == 6  # judged once each
    assert queue.counts().by_state == {"done": 3}


class RaisingJudge:
    name = "raising"
    version = "raising:1"
    faithfulness_threshold = 0.5

    async def score(self, metric: str, sample: RagSample) -> MetricResult:
        raise RuntimeError("bug")

    async def aclose(self) -> None:
        return None


async def test_a_judge_that_raises_gives_llm_error_rows(queue: JudgeQueue) -> None:
    judge = RaisingJudge()
    sink = ListSink()
    await drain(queue, judge, fill(queue, judge, 2), sink)
    assert [(r["status"], r["value"]) for r in sink.rows] == [("llm_error", None)] * 2
    assert "RuntimeError('bug')" in sink.rows[0]["explanation"]


class ConstantJudge(RaisingJudge):
    name = "constant"
    version = "constant:1"

    async def score(self, metric: str, sample: RagSample) -> MetricResult:
        return MetricResult(metric=metric, value=0.75, status="ok")


async def test_scores_carry_the_eval_run_of_their_traces_payload(queue: JudgeQueue) -> None:
    """The queue item knows no eval run; the stored payload does, and every score row of the trace carries it
    (so an eval run's scores stay apart after its payloads expire: `ragmon.sinks.traffic`)."""
    judge = ConstantJudge()
    queue.enqueue([Kept("t", trace_id(i), feature="faq") for i in range(3)], judge.version)
    payloads = DictPayloads(
        {
            ("t", trace_id(0)): StoredPayload(**sample(0).model_dump(), eval_run="nightly"),
            ("t", trace_id(1)): StoredPayload(**sample(1).model_dump()),  # production
        }  # trace 2's payload is gone: skipped, and nothing says it was an eval run's
    )
    sink = ListSink()
    config = WorkerConfig(metrics=("faithfulness", "answer_relevance"), idle_poll_s=0.05, delivery_interval_s=0.05)
    await drain(queue, judge, payloads, sink, config=config)
    runs = {(r["trace_id"], r["metric"], r["status"], r["eval_run"]) for r in sink.rows}
    assert runs == {
        (trace_id(0), "faithfulness", "ok", "nightly"),
        (trace_id(0), "answer_relevance", "ok", "nightly"),
        (trace_id(1), "faithfulness", "ok", ""),
        (trace_id(1), "answer_relevance", "ok", ""),
        (trace_id(2), "faithfulness", "skipped", ""),
        (trace_id(2), "answer_relevance", "skipped", ""),
    }


async def test_scores_carry_the_release_of_their_traces_payload(queue: JudgeQueue) -> None:
    """The queue item knows no release; the stored payload does (the app's `service.version`), and every score row
    of the trace carries it, so judged quality compares by release."""
    judge = ConstantJudge()
    queue.enqueue([Kept("t", trace_id(i), feature="faq") for i in range(3)], judge.version)
    payloads = DictPayloads(
        {
            ("t", trace_id(0)): StoredPayload(**sample(0).model_dump(), release="2.3.1"),
            ("t", trace_id(1)): StoredPayload(**sample(1).model_dump()),  # the app sent no release
        }  # trace 2's payload is gone: skipped, and nothing says which release it ran
    )
    sink = ListSink()
    await drain(queue, judge, payloads, sink, config=FAST)
    assert {(r["trace_id"], r["status"], r["release"]) for r in sink.rows} == {
        (trace_id(0), "ok", "2.3.1"),
        (trace_id(1), "ok", ""),
        (trace_id(2), "skipped", ""),
    }


class CountingQueue(JudgeQueue):
    """Counts the outbox transactions and the items each carried."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.record_calls: list[int] = []

    def record_many(self, recordings: Any) -> list[bool]:
        self.record_calls.append(len(recordings))
        return super().record_many(recordings)


async def test_traces_that_finish_together_are_recorded_in_one_transaction(tmp_path: Path) -> None:
    queue = CountingQueue.in_data_dir(tmp_path, synchronous="NORMAL")
    assert isinstance(queue, CountingQueue)
    try:
        judge = ConstantJudge()
        sink = ListSink()
        config = WorkerConfig(metrics=("faithfulness",), concurrency=16, idle_poll_s=0.05, delivery_interval_s=0.05)
        await drain(queue, judge, fill(queue, judge, 48), sink, config=config)
        assert sorted(r["trace_id"] for r in sink.rows) == sorted(trace_id(i) for i in range(48))  # each once
        assert {(r["status"], r["value"]) for r in sink.rows} == {("ok", 0.75)}
        assert sum(queue.record_calls) == 48
        assert len(queue.record_calls) < 48 and max(queue.record_calls) > 1  # batched, not one commit per trace
    finally:
        queue.close()


async def test_graceful_stop_finishes_in_flight_within_the_timeout_and_puts_the_rest_back(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory, queue: JudgeQueue
) -> None:
    import asyncio

    server.default = partial(faithfulness_responder, delay_s=5.0)  # nothing finishes within the stop timeout
    judge = make_judge(timeout_s=10.0)
    payloads = fill(queue, judge, 6)
    sink = ListSink()
    worker = JudgeWorker(queue, judge, payloads, sink, config=FAST)
    running = asyncio.create_task(worker.run())
    while len(server.requests) < 4:  # four traces in flight (concurrency 4)
        await asyncio.sleep(0.01)
    started = time.monotonic()
    await worker.stop(timeout_s=0.2)
    await running
    assert time.monotonic() - started < 2.0
    assert worker.stats.released_on_stop == 4 and sink.rows == []
    items = queue.items()
    assert {i["state"] for i in items} == {"queued"} and {i["attempts"] for i in items} == {0}


def test_the_store_sink_projects_rows_onto_the_table_and_counts_what_it_dropped() -> None:
    class FakeStore:
        def __init__(self) -> None:
            self.inserted: list[list[dict[str, Any]]] = []

        def insert_scores(self, rows: Any, dedup_token: str | None = None) -> str:
            self.inserted.append(list(rows))
            return ""

    store = FakeStore()
    # A table as schema v1 made it: no flags, no sampling weight, claims as (claim, verdict, reason) only.
    sink = StoreScoreSink(store, columns=[(n, t) for n, t in SCORE_COLUMNS if (n, t) not in SCORE_COLUMNS_V3])
    row = {
        "tenant": "t",
        "trace_id": trace_id(0),
        "metric": "faithfulness",
        "status": "ok",
        "value": 1.0,
        "claims": [{"claim": "c", "verdict": "supported", "reason": "r", "flag": "", "support": 0.9}],
        "flags": ["refusal"],
        "inclusion_probability": 0.5,
    }
    sink.write([row])
    (written,) = store.inserted[0]
    assert written["claims"] == [{"claim": "c", "verdict": "supported", "reason": "r"}]
    assert "flags" not in written and "inclusion_probability" not in written
    assert sink.dropped_keys == Counter({"flags": 1, "inclusion_probability": 1, "claims.flag": 1, "claims.support": 1})
    assert json.dumps(written)  # plain values

    # Today's table (schema v3) takes all of it: per-claim fields in parallel arrays, nothing dropped.
    current = StoreScoreSink(store)
    current.write([{**row, "claims": [*row["claims"], {"claim": "d", "verdict": "unsupported", "reason": ""}]}])
    (full,) = store.inserted[1]
    assert full["claims"] == [
        {"claim": "c", "verdict": "supported", "reason": "r"},
        {"claim": "d", "verdict": "unsupported", "reason": ""},
    ]
    assert full["claim_flags"] == ["", ""] and full["claim_support"] == [0.9, None]
    assert full["flags"] == ["refusal"] and full["inclusion_probability"] == 0.5
    assert current.dropped_keys == Counter()


async def test_workers_sharing_one_queue_split_the_work_and_judge_each_trace_once(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory, tmp_path: Path
) -> None:
    # Scale-out as `ragmon judge` does it: several workers, each with its own connection to one queue file; leases
    # (not a partition by trace id) decide who judges what, so any number of workers balance by themselves.
    import asyncio

    server.default = faithfulness_responder
    judge = make_judge()
    queues = [JudgeQueue.in_data_dir(tmp_path, synchronous="NORMAL") for _ in range(2)]
    payloads = fill(queues[0], judge, 24)
    sink = ListSink()
    workers = [JudgeWorker(q, judge, payloads, sink, config=FAST) for q in queues]
    await asyncio.gather(*(w.run(until_empty=True) for w in workers))
    assert sorted(r["trace_id"] for r in sink.rows) == sorted(trace_id(i) for i in range(24))  # once each
    shares = [sum(w.stats.traces.values()) for w in workers]
    assert sum(shares) == 24 and min(shares) > 0, shares
    assert queues[0].counts().by_state == {"done": 24}
    for q in queues:
        q.close()
