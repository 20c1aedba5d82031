"""Sampling correctness through the agent: a generated stream with a 1 % baseline — every error and every slow
trace kept, the baseline share within its binomial interval, and the report's p95 untouched by sampling."""

from __future__ import annotations

import math
import random
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from ragmon.sinks import Store, open_store
from ragmon.sinks.kept_share import kept_share_sql, summarise

from ragmon.agent.agent import Agent
from ragmon.otlp_encoding import encode_spans
from ragmon.settings import load_settings
from tests.support import prometheus
from tests.support.prometheus import text_of

TRACES = 3000
BASELINE = 0.01
SLOW_MS = 800.0


@pytest.fixture
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    store = open_store(chdb_engine_dir, database=f"sampling_{uuid.uuid4().hex[:8]}")
    yield store
    store.close()


def _stream(rng: random.Random) -> tuple[list[bytes], dict[str, str], list[float]]:
    """OTLP requests of 50 traces each; trace id -> kind (error | slow | plain); the generate durations."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "sampling-test"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("gen")
    kinds: dict[str, str] = {}
    durations: list[float] = []
    bodies = []
    now_ns = time.time_ns() - 60 * 10**9
    for i in range(TRACES):
        kind = "error" if rng.random() < 0.02 else "slow" if rng.random() < 0.03 else "plain"
        generate_ms = rng.uniform(SLOW_MS * 1.1, SLOW_MS * 3) if kind == "slow" else rng.lognormvariate(5.0, 0.5)
        generate_ms = min(generate_ms, SLOW_MS * 0.99) if kind != "slow" else generate_ms
        durations.append(generate_ms)
        start = now_ns + i * 1_000_000
        root = tracer.start_span(
            "request qa", start_time=start, attributes={"ragmon.stage": "request", "ragmon.feature": "qa"}
        )
        kinds[format(root.get_span_context().trace_id, "032x")] = kind
        from opentelemetry import trace as trace_api

        context = trace_api.set_span_in_context(root)
        child = tracer.start_span(
            "chat",
            context=context,
            start_time=start + 1000,
            attributes={"gen_ai.operation.name": "chat", "ragmon.feature": "qa"},
        )
        if kind == "error":
            child.set_status(Status(StatusCode.ERROR, "boom"))
        end = start + 1000 + int(generate_ms * 1e6)
        child.end(end_time=end)
        root.end(end_time=end + 1000)
        if (i + 1) % 50 == 0:
            bodies.append(encode_spans(exporter.get_finished_spans()))
            exporter.clear()
    return bodies, kinds, durations


def test_errors_and_slow_traces_all_kept_baseline_within_its_interval(tmp_path: Path, store: Store) -> None:
    sampling = {
        "policies": [
            {"type": "error"},
            {"type": "slow", "stage_threshold_ms": {"generate": SLOW_MS}},
            {"type": "baseline", "rate": BASELINE},
        ],
        "decision_grace_s": 0.0,
    }
    settings = load_settings(
        {
            "agent": {
                "data_dir": tmp_path,
                "otlp_http": "127.0.0.1:0",
                "otlp_grpc": "",
                "api": "127.0.0.1:0",
                "sampling": sampling,
            },
            "judge": {"run_in_agent": False},
        },
        env={},
    )
    bodies, kinds, durations = _stream(random.Random(11))
    agent = Agent(settings, store=store).start()
    try:
        url = f"http://127.0.0.1:{agent.receivers[0].port}/v1/traces"
        for body in bodies:
            request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/x-protobuf"})
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.status == 200
        deadline = time.monotonic() + 60
        while agent.pipeline.writer.counts["requests_stored"] < len(bodies) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        agent.stop()  # decides everything still held, copies kept payloads
    rows = store.query("SELECT trace_id, sampling_reasons FROM payloads FINAL", max_rows=100_000)
    kept = {row["trace_id"]: set(row["sampling_reasons"]) for row in rows}

    # the kept share by reason, as `ragmon report` and /metrics show it: each kept trace under its first reason
    first_reasons = Counter(row["sampling_reasons"][0] for row in rows)
    summary = summarise(store.query(*kept_share_sql(0, int(time.time()) + 60), max_rows=10_000))
    assert (summary["decided"], summary["kept"]) == (TRACES, len(kept))
    assert summary["kept_by_reason"] == dict(first_reasons) and set(first_reasons) == {"error", "slow", "baseline"}
    metrics = text_of(agent.metrics)
    for reason, n in first_reasons.items():
        labels = {"reason": reason, "traffic": "production"}
        assert prometheus.value(metrics, "ragmon_sampler_kept_traces_total", **labels) == n
        assert prometheus.value(metrics, "ragmon_sampler_kept_share", **labels) == round(n / TRACES, 6)
    for wanted in ("error", "slow"):
        ids = {t for t, k in kinds.items() if k == wanted}
        assert ids and ids <= set(kept), f"{len(ids - set(kept))} {wanted} traces were not kept"
        assert all(wanted in kept[t] for t in ids)
    baseline = sum(1 for reasons in kept.values() if "baseline" in reasons)
    sd = math.sqrt(TRACES * BASELINE * (1 - BASELINE))
    assert abs(baseline - TRACES * BASELINE) <= 4 * sd  # a 4-sigma binomial interval
    # a restarted agent seeds each feature's request p95 from the store, so "slow" does not start cold
    (tenant,) = {row["tenant"] for row in store.query("SELECT DISTINCT tenant FROM spans")}
    restarted = Agent(settings, store=store).start()
    try:
        window = restarted.sampler.request_latency.window
        expected = float(np.percentile(np.array(durations[-window:]) + 0.002, 95))  # a root lasts its call + 2 µs
        assert restarted.sampler.request_latency.p95(tenant, "qa") == pytest.approx(expected, rel=1e-6)
    finally:
        restarted.stop()
    (row,) = [r for r in store.report(3600) if r["feature"] == "qa" and r["stage"] == "generate"]
    assert row["requests"] == TRACES  # every span's numbers are stored, kept or not
    exact_p95 = float(np.quantile(durations, 0.95))
    assert row["p95_ms"] == pytest.approx(exact_p95, rel=0.01)
