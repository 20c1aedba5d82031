"""Scores out of a running agent: kept traces judged in the agent (the local judge) arrive at a real OTLP/gRPC logs
receiver as `gen_ai.evaluation.result` events that say what the scores table says; with the receiver gone the
scores are stored all the same and the lost events are counted on /metrics."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ragmon.sinks import Store, open_store

from ragmon.agent.agent import Agent
from ragmon.settings import load_settings
from tests.agent.judge_traces import kept_traces, post, wait_until
from tests.otlp_logs_receiver import GrpcLogsReceiver, unused_port
from tests.support import prometheus
from tests.support.prometheus import text_of

METRICS = 4  # the online metrics the agent's worker scores per trace


@pytest.fixture
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    opened = open_store(chdb_engine_dir, database=f"score_events_{uuid.uuid4().hex[:8]}")
    yield opened
    opened.close()


def _agent(data_dir: Path, store: Store, events: dict[str, Any]) -> Agent:
    settings = load_settings(
        {
            "agent": {"data_dir": data_dir, "otlp_http": "127.0.0.1:0", "otlp_grpc": "", "api": "127.0.0.1:0"},
            "judge": {"run_in_agent": True, "backend": "local", "events": {"flush_interval_ms": 50, **events}},
        },
        env={},
    )
    return Agent(settings, store=store)


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match is not None, f"{name} not in /metrics"
    return float(match.group(1))


def _scores(store: Store) -> list[dict[str, Any]]:
    return store.query("SELECT trace_id, metric, status, value FROM scores", max_rows=10_000)


def test_scores_judged_in_the_agent_arrive_as_evaluation_events_matching_the_store(
    tmp_path: Path, store: Store
) -> None:
    receiver = GrpcLogsReceiver()
    bodies, trace_ids = kept_traces(5)
    agent = _agent(tmp_path, store, {"endpoint": receiver.endpoint, "protocol": "grpc"}).start()
    try:
        post(f"http://127.0.0.1:{agent.receivers[0].port}", bodies)
        got = receiver.wait_for(len(trace_ids) * METRICS, timeout_s=90)
        wait_until(lambda: len(_scores(store)) == len(trace_ids) * METRICS, what="the scores stored")
        metrics = text_of(agent.metrics)
        judge = agent.pipeline.judging.service.judge if agent.pipeline.judging.service else None
        roots = {
            r["trace_id"]: r["span_id"]
            for r in store.query("SELECT trace_id, span_id FROM spans WHERE parent_span_id = ''")
        }
    finally:
        agent.stop()
        receiver.stop()
    assert judge is not None
    assert set(roots) == set(trace_ids)
    assert len(got) == len(trace_ids) * METRICS
    events = {(e.trace_id, e.attributes["gen_ai.evaluation.name"]): e for e in got}
    assert {trace for trace, _ in events} == set(trace_ids)
    for row in _scores(store):
        event = events[(row["trace_id"], row["metric"])]
        assert event.event_name == "gen_ai.evaluation.result"
        assert event.attributes["ragmon.judge.version"] == judge.version
        assert event.attributes["ragmon.tenant"] == "default"
        # parented to the evaluated trace's root span (the sampler read its id with the trace's summary)
        assert event.span_id == roots[row["trace_id"]]
        if row["status"] == "ok":
            assert event.attributes["gen_ai.evaluation.score.value"] == pytest.approx(row["value"])
        else:
            assert event.attributes["error.type"] == row["status"]
        if row["metric"] == "faithfulness" and row["status"] == "ok":
            expected = "pass" if row["value"] >= judge.faithfulness_threshold else "fail"
            assert event.attributes["gen_ai.evaluation.score.label"] == expected
    assert _metric(metrics, "ragmon_judge_events_emitted_total") == len(got)
    assert _metric(metrics, "ragmon_judge_events_exported_total") == len(got)
    assert prometheus.value(metrics, "ragmon_judge_events_dropped_total", reason="export_failed") == 0


def test_with_the_receiver_down_every_score_is_stored_and_every_event_counted_as_dropped(
    tmp_path: Path, store: Store
) -> None:
    bodies, trace_ids = kept_traces(5)
    endpoint = f"http://127.0.0.1:{unused_port()}"  # nothing listens: connections are refused
    agent = _agent(tmp_path, store, {"endpoint": endpoint, "timeout_s": 0.5}).start()
    try:
        post(f"http://127.0.0.1:{agent.receivers[0].port}", bodies)
        wait_until(lambda: len(_scores(store)) == len(trace_ids) * METRICS, timeout_s=90, what="the scores stored")
        service = agent.pipeline.judging.service
        assert service is not None and service.events is not None
        stats = service.events.stats
        wait_until(
            lambda: stats.exported + sum(stats.dropped_by_reason().values()) == stats.emitted, what="events settled"
        )
        metrics = text_of(agent.metrics)
    finally:
        agent.stop()
    assert {row["trace_id"] for row in _scores(store)} == set(trace_ids)
    assert _metric(metrics, "ragmon_judge_events_emitted_total") == len(trace_ids) * METRICS
    assert _metric(metrics, "ragmon_judge_events_exported_total") == 0
    dropped = sum(
        float(n) for n in re.findall(r'^ragmon_judge_events_dropped_total\{reason="[a-z_]+"\} (\S+)$', metrics, re.M)
    )
    assert dropped == len(trace_ids) * METRICS
