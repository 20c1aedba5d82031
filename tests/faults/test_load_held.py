"""Load held: senders at ~80 % of the measured maximum for a fixed time against `ragmon serve` (a subprocess with its
own embedded store). Reported: the maximum, the held rate, p50/p99 export latency as the sender saw it, and the
agent's RSS over time. Asserted: correctness and boundedness only — every acknowledged span stored exactly once,
nothing stored that was refused, RSS after warm-up not growing by more than `RSS_GROWTH_BOUND_MB` — never speed.

Sizes: 3 s calibration and 20 s held by default; ``RAGMON_FAULTS_LONG=1`` holds 5 minutes, and
``RAGMON_FAULTS_HOLD_S=<seconds>`` sets any duration.
"""

from __future__ import annotations

import http.client
import itertools
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from tests.agent.harness import AgentProcess
from tests.faults import scenario_rows
from tests.faults.faults_support import LONG, suite_env_names

pytestmark = pytest.mark.faults

SENDERS = 4
TRACES_PER_REQUEST = 10
SPANS_PER_TRACE = 5
SPANS_PER_REQUEST = TRACES_PER_REQUEST * SPANS_PER_TRACE
CALIBRATE_S = 3.0
HOLD_S = float(os.environ.get("RAGMON_FAULTS_HOLD_S") or (300.0 if LONG else 20.0))
LOAD_SHARE = 0.8
RSS_SAMPLE_S = 1.0
WARM_UP_SHARE = 0.25  # of the held phase
RSS_GROWTH_BOUND_MB = (
    150.0  # generous: chDB's caches and merges move by tens of MB; a leak of acknowledged data grows without end
)


def request_body(number: int) -> bytes:
    """Request `number`: 10 traces of 5 spans; every span id starts with the request number (12 hex digits), so
    the store can be asked which requests it holds."""
    now = time.time_ns()
    spans = []
    for t in range(TRACES_PER_REQUEST):
        trace_id = number.to_bytes(8, "big") + t.to_bytes(8, "big")
        root = number.to_bytes(6, "big") + (t * SPANS_PER_TRACE).to_bytes(2, "big")
        for s in range(SPANS_PER_TRACE):
            span_id = number.to_bytes(6, "big") + (t * SPANS_PER_TRACE + s).to_bytes(2, "big")
            spans.append(
                Span(
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_span_id=b"" if s == 0 else root,
                    name="request" if s == 0 else "chat",
                    start_time_unix_nano=now + s * 1_000_000,
                    end_time_unix_nano=now + (s + 1) * 2_000_000,
                    attributes=[
                        KeyValue(key="ragmon.feature", value=AnyValue(string_value="load")),
                        KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="chat" if s else "")),
                        KeyValue(key="gen_ai.usage.input_tokens", value=AnyValue(int_value=100 + s)),
                    ],
                )
            )
    resource = ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])
    resource.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value="load-svc")))
    return bytes(ExportTraceServiceRequest(resource_spans=[resource]).SerializeToString())


@dataclass
class Sent:
    acknowledged: list[int] = field(default_factory=list)  # request numbers answered 200
    refused: list[int] = field(default_factory=list)  # answered 429/503 (back-pressure: the client's to retry)
    unknown: list[int] = field(default_factory=list)  # no answer (timeout, reset): stored or not, both are fine
    other: list[tuple[int, int]] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def tried(self) -> int:
        return len(self.acknowledged) + len(self.refused) + len(self.unknown) + len(self.other)


class Sender(threading.Thread):
    """One keep-alive connection; sends request numbers from a shared counter, paced to `rate_per_s` if set."""

    def __init__(self, port: int, numbers: itertools.count[int], sent: Sent, until_s: float, rate_per_s: float | None):
        super().__init__(daemon=True)
        self.port, self.numbers, self.sent, self.until_s, self.rate_per_s = port, numbers, sent, until_s, rate_per_s

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        next_at = time.monotonic()
        while time.monotonic() < self.until_s:
            if self.rate_per_s:
                pause = next_at - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                next_at += 1.0 / self.rate_per_s
            number = next(self.numbers)
            body = request_body(number)
            started = time.monotonic()
            try:
                conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"})
                response = conn.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                status = 0
            elapsed = time.monotonic() - started
            with self.sent.lock:
                if status == 200:
                    self.sent.acknowledged.append(number)
                    self.sent.latencies_s.append(elapsed)
                elif status in (429, 503):
                    self.sent.refused.append(number)
                elif status == 0:
                    self.sent.unknown.append(number)
                else:
                    self.sent.other.append((number, status))
        conn.close()


def _run(port: int, numbers: itertools.count[int], seconds: float, rate_per_s: float | None) -> Sent:
    sent = Sent()
    until = time.monotonic() + seconds
    per_sender = None if rate_per_s is None else rate_per_s / SENDERS
    senders = [Sender(port, numbers, sent, until, per_sender) for _ in range(SENDERS)]
    for sender in senders:
        sender.start()
    return_after = seconds + 60
    for sender in senders:
        sender.join(return_after)
    return sent


def _stored_requests(agent: AgentProcess, numbers: list[int]) -> tuple[int, int]:
    """(rows, distinct span ids) the store holds for these request numbers."""
    rows = distinct = 0
    for chunk in (numbers[i : i + 2000] for i in range(0, len(numbers), 2000)):
        keys = ",".join(f"'{n:012x}'" for n in chunk)
        [row] = agent.query(
            f"SELECT count() AS n, uniqExact(span_id) AS u FROM spans WHERE substring(span_id, 1, 12) IN ({keys})"
        )
        rows += int(row["n"])
        distinct += int(row["u"])
    return rows, distinct


def _wait_stored(agent: AgentProcess, numbers: list[int], timeout_s: float = 120.0) -> tuple[int, int]:
    deadline = time.monotonic() + timeout_s
    stored = _stored_requests(agent, numbers)
    while stored[1] < len(numbers) * SPANS_PER_REQUEST and time.monotonic() < deadline:
        time.sleep(0.5)
        stored = _stored_requests(agent, numbers)
    return stored


def _slope_mb_per_min(samples: list[tuple[float, float]]) -> float:
    if len(samples) < 3:
        return 0.0
    times = [t for t, _ in samples]
    values = [v for _, v in samples]
    return statistics.linear_regression(times, values).slope * 60


def test_load_held_at_80_percent_of_the_measured_maximum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in suite_env_names():  # read above already; the agent would refuse them as unknown settings
        monkeypatch.delenv(name)
    agent = AgentProcess(tmp_path / "data", grpc=False).start(timeout_s=240)  # a busy 2-core box: chDB start-up is slow
    assert agent.process is not None
    pid = agent.process.pid
    numbers = itertools.count(1)
    rss: list[tuple[float, float]] = []  # (seconds since the held phase began, MB)
    try:
        calibration = _run(agent.http_port, numbers, CALIBRATE_S, None)
        max_rate = len(calibration.acknowledged) / CALIBRATE_S
        assert max_rate > 0, "the agent acknowledged nothing during calibration"
        held_rate = LOAD_SHARE * max_rate

        stop_sampling = threading.Event()
        began = time.monotonic()

        def sample_rss() -> None:
            while not stop_sampling.is_set():
                value = scenario_rows.rss_mb(pid)
                if value is not None:
                    rss.append((time.monotonic() - began, value))
                stop_sampling.wait(RSS_SAMPLE_S)

        sampler = threading.Thread(target=sample_rss, daemon=True)
        sampler.start()
        held = _run(agent.http_port, numbers, HOLD_S, held_rate)
        stop_sampling.set()
        sampler.join(5)

        acknowledged = calibration.acknowledged + held.acknowledged
        rows, distinct = _wait_stored(agent, acknowledged)
        refused_or_failed = [n for n, _ in calibration.other + held.other] + calibration.refused + held.refused
        refused_rows, _ = _stored_requests(agent, refused_or_failed) if refused_or_failed else (0, 0)
        exit_code = agent.stop()
    finally:
        if agent.process is not None and agent.process.poll() is None:
            agent.kill()

    latencies = sorted(held.latencies_s)
    p50 = latencies[len(latencies) // 2] * 1000 if latencies else float("nan")
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000 if latencies else float("nan")
    after_warm_up = [(t, mb) for t, mb in rss if t >= WARM_UP_SHARE * HOLD_S]
    growth = (max(mb for _, mb in after_warm_up) - after_warm_up[0][1]) if after_warm_up else 0.0
    expected_spans = len(acknowledged) * SPANS_PER_REQUEST
    rss_text = " ".join(f"{t:.0f}s:{mb:.0f}" for t, mb in rss[:: max(1, len(rss) // 10)])
    scenario_rows.record(
        scenario_rows.ScenarioRow(
            scenario=f"load held {HOLD_S:.0f} s at 80% of max",
            unit="spans",
            tried=calibration.tried + held.tried,
            faults=0,
            acknowledged=expected_spans,
            stored=distinct,
            lost=expected_spans - distinct,
            duplicates=rows - distinct,
            peak_rss_mb=max((mb for _, mb in rss), default=None),
            note=(
                f"max {max_rate * SPANS_PER_REQUEST:.0f} spans/s, held {held_rate * SPANS_PER_REQUEST:.0f} spans/s"
                f" (achieved {len(held.acknowledged) * SPANS_PER_REQUEST / HOLD_S:.0f}); export p50 {p50:.1f} ms,"
                f" p99 {p99:.1f} ms; refused {len(calibration.refused) + len(held.refused)}, no answer"
                f" {len(calibration.unknown) + len(held.unknown)}; RSS after warm-up +{growth:.0f} MB"
                f" ({_slope_mb_per_min(after_warm_up):+.1f} MB/min); RSS MB {rss_text}"
            ),
        )
    )
    assert exit_code == 0
    assert held.acknowledged, "nothing acknowledged while the load was held"
    assert distinct == expected_spans, f"{expected_spans - distinct} acknowledged spans not stored"
    assert rows == distinct, "duplicates visible"
    assert refused_rows == 0, "a refused request was stored (it was acknowledged nowhere)"
    assert calibration.other == [] and held.other == []  # only 200 or back-pressure answers
    assert len(after_warm_up) >= 3 and growth < RSS_GROWTH_BOUND_MB, rss
