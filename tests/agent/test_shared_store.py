"""Several agents writing one ClickHouse database, as behind the load-balancing tier: each agent's sampler reads
back only its own spans, because `ingest_seq` carries the agent's instance number in its top bits.

The database is served over ClickHouse's HTTP protocol by `tests.support.chhttp` (the embedded engine behind a real
HTTP endpoint, in its own process), and the agents talk to it with clickhouse-connect, as they would to a server.
The control case gives both agents the same instance number and shows what the instance number prevents: the
second agent decides the first agent's traces again. (Its spans are still stored: batch deduplication tokens carry a
random id of each agent's log, so a repeated instance number never makes the store drop a batch as a repeat.)"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from ragmon.pipeline.intake import IngestSeq
from tests.agent.harness import AgentProcess, EngineServer

TRACES_PER_AGENT = 20
SPANS_PER_TRACE = 3
_DECISIONS = re.compile(r"^ragmon_sampler_decisions_total\{[^}]*\} (\S+)$", re.MULTILINE)


def test_ingest_seq_ranges_of_instances_are_disjoint() -> None:
    from ragmon.pipeline.wal import Position

    low, high = Position(1, 0), Position((1 << 24) - 1, (1 << 28) - 1)
    first, second = IngestSeq(0), IngestSeq(1)
    assert first.of(high) < second.of(low)
    assert second.position(second.of(Position(7, 4096))) == Position(7, 4096)
    with pytest.raises(ValueError, match=r"0\.\.4095"):
        IngestSeq(4096)
    with pytest.raises(ValueError, match="does not fit"):
        first.of(Position(1, 1 << 28))


@pytest.fixture
def clickhouse_url(tmp_path: Path) -> Iterator[str]:
    """A ClickHouse HTTP endpoint over its own embedded engine, in a child process."""
    server = EngineServer(tmp_path / "clickhouse")
    try:
        yield server.url
    finally:
        server.stop()


def _request(first_trace: int) -> bytes:
    """TRACES_PER_AGENT traces of SPANS_PER_TRACE spans, each with a failed root (so the sampler keeps every one).
    Every call yields a body of the same size, hence the same log positions in two agents."""
    spans = []
    now_ns = time.time_ns()
    for t in range(first_trace, first_trace + TRACES_PER_AGENT):
        trace_id = t.to_bytes(16, "big")
        root_id = (t * 16 + 1).to_bytes(8, "big")
        for s in range(SPANS_PER_TRACE):
            span = Span(
                trace_id=trace_id,
                span_id=root_id if s == 0 else (t * 16 + 1 + s).to_bytes(8, "big"),
                parent_span_id=b"" if s == 0 else root_id,
                name="rag.request" if s == 0 else "rag.search",
                start_time_unix_nano=now_ns - 5_000_000,
                end_time_unix_nano=now_ns,
                attributes=[KeyValue(key="ragmon.feature", value=AnyValue(string_value="shared"))],
            )
            if s == 0:
                span.status.code = Status.STATUS_CODE_ERROR
            spans.append(span)
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])])
    return request.SerializeToString()


def _send(agent: AgentProcess, body: bytes) -> None:
    request = urllib.request.Request(
        f"{agent.otlp_http}/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200


def _decisions(agent: AgentProcess) -> int:
    with urllib.request.urlopen(f"{agent.otlp_http}/metrics", timeout=10) as response:
        text = response.read().decode()
    return int(sum(float(value) for value in _DECISIONS.findall(text)))


def _settled_decisions(agent: AgentProcess, at_least: int, timeout_s: float = 60.0) -> int:
    """Decisions once they reach `at_least` and then stay put for a while (a second look-back would add more)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _decisions(agent) < at_least:
        time.sleep(0.2)
    time.sleep(3.0)
    return _decisions(agent)


@pytest.mark.parametrize("instances", [(0, 1), (0, 0)], ids=["distinct-instances", "same-instance-control"])
def test_agents_sharing_a_database_decide_only_their_own_traces(
    tmp_path: Path, clickhouse_url: str, instances: tuple[int, int]
) -> None:
    agents = [
        AgentProcess(
            tmp_path / f"agent{i}",
            grpc=False,
            extra_env={
                "RAGMON_AGENT__CLICKHOUSE_URL": clickhouse_url,
                "RAGMON_AGENT__INSTANCE": str(instance),
                "RAGMON_JUDGE__RUN_IN_AGENT": "false",
            },
        )
        for i, instance in enumerate(instances)
    ]
    try:
        for agent in agents:
            agent.start()
        # One agent after the other, with request bodies of equal size: their log positions coincide exactly.
        _send(agents[0], _request(1))
        assert _settled_decisions(agents[0], TRACES_PER_AGENT) == TRACES_PER_AGENT
        _send(agents[1], _request(1 + TRACES_PER_AGENT))
        second = _settled_decisions(agents[1], TRACES_PER_AGENT)
        stored = agents[1].query("SELECT count() AS n, uniqExact(trace_id) AS traces FROM spans")[0]
        assert stored == {"n": 2 * TRACES_PER_AGENT * SPANS_PER_TRACE, "traces": 2 * TRACES_PER_AGENT}
        if instances[0] != instances[1]:
            assert second == TRACES_PER_AGENT
            assert _decisions(agents[0]) == TRACES_PER_AGENT
        else:
            # The control: one numbering, so agent 1 read agent 0's spans back and decided its traces a second time.
            assert second == 2 * TRACES_PER_AGENT
    finally:
        for agent in agents:
            if agent.process is not None and agent.process.poll() is None:
                agent.stop()
