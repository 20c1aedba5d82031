"""Three `ragmon serve` processes behind a trace-id-hash router, as the Collector's loadbalancing exporter
(routing_key: traceID) would place them. No Collector binary installs here, so the router is a minimal one written
in this test: it parses each OTLP/HTTP request with the official protobuf classes, splits the spans by a hash of
their trace id and forwards each part to its agent. Senders deliberately scatter each trace's spans over several
requests and threads, so only the router's hashing can bring a trace together on one agent. The agents keep every
trace (baseline rate 1), so each decision leaves a payload row: a trace decided twice, or by an agent missing some
of its spans, would show."""

from __future__ import annotations

import hashlib
import os
import random
import re
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from tests.agent.harness import AgentProcess

AGENTS = 3
TRACES = 90
SPANS_PER_TRACE = 5
SPANS_PER_REQUEST = 12
SENDERS = 3
PROTOBUF = "application/x-protobuf"
# Keep every trace, and wait for late spans longer than the senders take, so a decision sees the whole trace.
SAMPLING = '{"policies": [{"type": "baseline", "rate": 1.0}], "decision_grace_s": 5}'
_DECISIONS = re.compile(r"^ragmon_sampler_decisions_total\{[^}]*\} (\S+)$", re.MULTILINE)


def agent_index(trace_id: bytes, agents: int) -> int:
    """A stable hash of the trace id (Python's hash() of bytes is salted per process)."""
    return int.from_bytes(hashlib.blake2b(trace_id, digest_size=8).digest(), "big") % agents


def post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": PROTOBUF})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:  # 4xx/5xx: the caller decides whether to retry
        return int(exc.code)


class TraceIdRouter:
    """OTLP/HTTP in, one OTLP/HTTP request per agent out; resource and scope are kept with each span."""

    def __init__(self, targets: list[str]) -> None:
        self.targets = targets
        self.routed: dict[int, int] = defaultdict(int)  # agent index -> spans forwarded
        lock = threading.Lock()
        router = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                incoming = ExportTraceServiceRequest()
                try:
                    incoming.ParseFromString(body)
                except Exception:  # any decode failure is a 400, as an OTLP receiver answers
                    self.send_response(400)
                    self.end_headers()
                    return
                parts = router.split(incoming)
                status = 200
                for index, part in parts.items():
                    try:
                        code = post(f"{router.targets[index]}/v1/traces", part.SerializeToString())
                    except OSError:
                        code = 503
                    if code != 200:
                        status = 503  # the sender retries the whole request; the agents deduplicate
                    else:
                        with lock:
                            router.routed[index] += sum(
                                len(ss.spans) for rs in part.resource_spans for ss in rs.scope_spans
                            )
                payload = ExportTraceServiceResponse().SerializeToString()
                self.send_response(status)
                self.send_header("Content-Type", PROTOBUF)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def split(self, request: ExportTraceServiceRequest) -> dict[int, ExportTraceServiceRequest]:
        parts: dict[int, ExportTraceServiceRequest] = {}
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    part = parts.setdefault(agent_index(span.trace_id, len(self.targets)), ExportTraceServiceRequest())
                    out_rs = _last_or_new(part.resource_spans, rs)
                    out_ss = _last_or_new(out_rs.scope_spans, ss)
                    out_ss.spans.append(span)
        return parts

    def __enter__(self) -> TraceIdRouter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _last_or_new(container, source):  # type: ignore[no-untyped-def]
    """The last copy of `source` in `container`, or a new one without its spans (resource or scope kept)."""
    if len(container) and container[-1].schema_url == source.schema_url and _same_head(container[-1], source):
        return container[-1]
    item = container.add()
    if isinstance(source, ResourceSpans):
        item.resource.CopyFrom(source.resource)
    else:
        item.scope.CopyFrom(source.scope)
    item.schema_url = source.schema_url
    return item


def _same_head(a, b) -> bool:  # type: ignore[no-untyped-def]
    return bool(a.resource == b.resource) if isinstance(a, ResourceSpans) else bool(a.scope == b.scope)


def decisions(agent: AgentProcess) -> int:
    """The agent's sampler decisions so far, from its /metrics."""
    with urllib.request.urlopen(f"{agent.otlp_http}/metrics", timeout=10) as response:
        return int(sum(float(value) for value in _DECISIONS.findall(response.read().decode())))


def make_traces(rng: random.Random) -> list[Span]:
    now = time.time_ns()
    spans = []
    for _ in range(TRACES):
        trace_id = rng.randbytes(16)
        root_id = rng.randbytes(8)
        for i in range(SPANS_PER_TRACE):
            span = Span(
                trace_id=trace_id,
                span_id=root_id if i == 0 else rng.randbytes(8),
                parent_span_id=b"" if i == 0 else root_id,
                name="request qa" if i == 0 else f"retrieval docs-{i}",
                kind=Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=now - 50_000_000 + i,
                end_time_unix_nano=now,
            )
            span.attributes.append(KeyValue(key="ragmon.feature", value=AnyValue(string_value="qa")))
            spans.append(span)
    return spans


def request_of(spans: list[Span], service: str) -> bytes:
    resource = Resource(attributes=[KeyValue(key="service.name", value=AnyValue(string_value=service))])
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=spans)])]
    )
    return request.SerializeToString()


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[list[AgentProcess]]:
    started: list[AgentProcess] = []
    try:
        for i in range(AGENTS):
            env = {"RAGMON_AGENT__SAMPLING": SAMPLING, "RAGMON_JUDGE__RUN_IN_AGENT": "false"}
            started.append(AgentProcess(tmp_path / f"agent-{i}", extra_env=env, grpc=False).start(timeout_s=120))
        yield started
    finally:
        for agent in started:
            if agent.process is not None and agent.process.poll() is None:
                agent.stop()


@pytest.mark.slow
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="three agents need at least two cores")
def test_traces_land_whole_on_exactly_one_agent(agents: list[AgentProcess]) -> None:
    rng = random.Random(8)
    spans = make_traces(rng)
    rng.shuffle(spans)  # a trace's spans are scattered over requests and senders
    chunks = [spans[i : i + SPANS_PER_REQUEST] for i in range(0, len(spans), SPANS_PER_REQUEST)]
    sent = {(s.trace_id.hex(), s.span_id.hex()) for s in spans}
    assert len(sent) == TRACES * SPANS_PER_TRACE
    errors: list[BaseException] = []

    with TraceIdRouter([a.otlp_http for a in agents]) as router:

        def sender(index: int) -> None:
            try:
                for chunk in chunks[index::SENDERS]:
                    for _attempt in range(5):
                        if post(f"{router.url}/v1/traces", request_of(chunk, f"sender-{index}")) == 200:
                            break
                        time.sleep(0.2)
                    else:
                        raise AssertionError("a request was never accepted")
            except BaseException as exc:  # reported by the test thread
                errors.append(exc)

        threads = [threading.Thread(target=sender, args=(i,)) for i in range(SENDERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors

    expected = {i: 0 for i in range(AGENTS)}
    for trace_id, _ in sent:
        expected[agent_index(bytes.fromhex(trace_id), AGENTS)] += 1
    stored: list[list[tuple[str, str]]] = []
    for index, agent in enumerate(agents):
        assert agent.wait_for("SELECT count() AS n FROM spans", expected[index], timeout_s=60) == expected[index]
        rows = agent.query("SELECT trace_id, span_id FROM spans")
        stored.append([(r["trace_id"].lower(), r["span_id"].lower()) for r in rows])

    # The union of stored spans is exactly what was sent, with no span stored twice.
    every = [key for rows in stored for key in rows]
    assert len(every) == len(set(every))
    assert set(every) == sent
    # Each trace is on exactly one agent, with all its spans.
    owners: dict[str, set[int]] = defaultdict(set)
    per_trace: dict[str, int] = defaultdict(int)
    for index, rows in enumerate(stored):
        for trace_id, _ in rows:
            owners[trace_id].add(index)
            per_trace[trace_id] += 1
    assert all(len(o) == 1 for o in owners.values())
    assert set(per_trace.values()) == {SPANS_PER_TRACE}
    # Every agent received a share (the hash spreads 90 traces over 3 agents).
    assert all(rows for rows in stored)

    # Every trace was decided once, by the agent that holds all its spans: its payload row is there and only there.
    routed_traces = {i: {t for t, owner in owners.items() if owner == {i}} for i in range(AGENTS)}
    for index, agent in enumerate(agents):
        want = len(routed_traces[index])
        assert agent.wait_for("SELECT uniqExact(trace_id) AS n FROM payloads", want, timeout_s=60) == want
        kept = {r["trace_id"].lower() for r in agent.query("SELECT DISTINCT trace_id FROM payloads")}
        assert kept == routed_traces[index]
        assert decisions(agent) == want
