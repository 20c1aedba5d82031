"""The LLM judge worker against an endpoint failing 70 % of calls (the OTel Collector's 70 %-failure retry test,
for judging): 429 with Retry-After, 500, 503 with an HTML page, replies slower than the timeout, garbage 200s and
bodies cut short, drawn by a seeded generator. End state: every kept trace judged (ok) or explicitly failed
(llm_error / parse_error), none lost, none judged twice (raw rows in `scores`), retries bounded, Retry-After
honoured."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from ragmon.judges.llm_judge import LLMJudge, LLMJudgeConfig
from ragmon.judges.queue import FINAL_STATES, JudgeQueue, Kept
from ragmon.judges.worker import JudgeWorker, WorkerConfig
from ragmon.sinks import Store, open_store

from ragmon.pipeline.judge_store import StoreScoreSink
from ragmon.testing import FaultRecord, FlakyReplies, ScriptedOpenAIServer
from tests.faults import scenario_rows
from tests.faults.faults_support import LONG, scaled
from tests.judges.worker_fakes import DictPayloads, faithfulness_responder, sample, trace_id

pytestmark = pytest.mark.faults

MAX_ATTEMPTS = 8
CLIENT_TIMEOUT_S = 0.4
EXPLICIT_FAILURES = {"llm_error", "parse_error"}


@pytest.fixture
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    opened = open_store(chdb_engine_dir, database=f"faults_judge_{uuid.uuid4().hex[:8]}")
    yield opened
    opened.close()


def _retry_after_violations(records: list[FaultRecord]) -> list[tuple[str, float, float]]:
    """(request, asked, waited) for every retry that came sooner after a 429 than its Retry-After asked."""
    by_request: dict[str, list[FaultRecord]] = defaultdict(list)
    for record in records:
        by_request[record.body_key].append(record)
    violations = []
    for key, attempts in by_request.items():
        attempts.sort(key=lambda r: r.at_s)
        for this, following in itertools.pairwise(attempts):
            if this.retry_after_s is not None and following.at_s - this.at_s < this.retry_after_s - 0.002:
                violations.append((key, this.retry_after_s, following.at_s - this.at_s))
    return violations


async def test_every_kept_trace_is_judged_or_explicitly_failed(tmp_path: Path, store: Store) -> None:
    n = scaled(40, 400)
    flaky = FlakyReplies(faithfulness_responder, failure_ratio=0.7, seed=9, timeout_delay_s=CLIENT_TIMEOUT_S * 2)
    queue = JudgeQueue(tmp_path / "queue.sqlite")
    with ScriptedOpenAIServer(default=flaky) as server:
        config = LLMJudgeConfig(
            base_url=server.base_url,
            timeout_s=CLIENT_TIMEOUT_S,
            max_attempts=MAX_ATTEMPTS,
            initial_backoff_s=0.01,
            max_backoff_s=0.05,
            retry_deadline_s=60.0,
            requests_per_minute=600_000,
            budget_usd=1_000.0,
        )
        async with LLMJudge(config) as judge:
            queue.enqueue([Kept("t", trace_id(i), feature="faq") for i in range(n)], judge.version)
            worker = JudgeWorker(
                queue,
                judge,
                DictPayloads({("t", trace_id(i)): sample(i) for i in range(n)}),
                StoreScoreSink(store),
                config=WorkerConfig(
                    metrics=("faithfulness",), concurrency=8, lease_s=60, idle_poll_s=0.05, delivery_interval_s=0.2
                ),
            )
            await asyncio.wait_for(worker.run(until_empty=True), timeout=600 if LONG else 180)
            version = judge.version
        assert server.handler_errors == []

    # The queue: every item final.
    items = queue.items()
    queue.close()
    assert len(items) == n and all(item["state"] in FINAL_STATES for item in items)

    # The store: raw rows (no FINAL), one per (trace, metric, judge version).
    rows = store.query(
        "SELECT trace_id, count() AS n, any(status) AS status, countIf(value IS NULL) AS no_value FROM scores"
        " WHERE judge_version = {v:String} GROUP BY trace_id, metric",
        {"v": version},
        max_rows=100_000,
    )
    by_trace = {row["trace_id"]: row for row in rows}
    lost = {trace_id(i) for i in range(n)} - by_trace.keys()
    duplicates = sum(int(row["n"]) - 1 for row in rows)
    statuses: defaultdict[str, int] = defaultdict(int)
    for row in rows:
        statuses[row["status"]] += 1
    scenario_rows.record(
        scenario_rows.ScenarioRow(
            scenario="judge endpoint failing 70% of calls",
            unit="traces",
            tried=len(flaky.records),
            faults=flaky.faults,
            acknowledged=n,
            stored=len(by_trace),
            lost=len(lost),
            duplicates=duplicates,
            note=", ".join(f"{s} {k}" for s, k in sorted(statuses.items()))
            + "; faults "
            + ", ".join(f"{kind} {k}" for kind, k in sorted(flaky.injected.items())),
        )
    )
    assert not lost, f"{len(lost)} kept traces never judged nor failed"
    assert duplicates == 0 and worker.stats.lease_lost == 0
    assert set(statuses) <= {"ok"} | EXPLICIT_FAILURES, statuses
    assert statuses["ok"] > 0  # retries got most traces through; an all-failed run would prove little
    assert all(row["no_value"] == (0 if row["status"] == "ok" else 1) for row in rows)  # a failure is never a number

    # The faults really were ~70 % and of every kind.
    assert set(flaky.injected) == {"429", "500", "503_html", "timeout", "garbage", "truncated"}
    assert 0.6 < flaky.faults / len(flaky.records) < 0.8

    # Retries bounded: no request body was sent more than max_attempts times, and Retry-After was waited out.
    attempts_per_request: dict[str, int] = defaultdict(int)
    for record in flaky.records:
        attempts_per_request[record.body_key] += 1
    assert max(attempts_per_request.values()) <= MAX_ATTEMPTS
    assert any(r.kind == "429" for r in flaky.records)
    assert _retry_after_violations(flaky.records) == []
