"""`ragmon serve` end to end: real OpenTelemetry exporters in, ClickHouse rows out, `report`/`query` via the agent,
restart with the same data, and kill -9 in the middle of ingest losing nothing that was acknowledged."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from ragmon.otlp_encoding import encode_spans
from tests.agent.harness import REPO, AgentProcess


def _rag_trace(tracer, feature: str, *, error: bool = False, generate_ms: float = 0.0) -> None:  # type: ignore[no-untyped-def]
    with tracer.start_as_current_span(
        f"request {feature}",
        attributes={"ragmon.stage": "request", "ragmon.feature": feature, "ragmon.question": "what is ragmon?"},
    ):
        with tracer.start_as_current_span(
            "retrieval docs",
            attributes={
                "gen_ai.operation.name": "retrieval",
                "ragmon.feature": feature,
                "gen_ai.retrieval.documents": json.dumps([{"id": "a", "score": 0.9}, {"id": "b", "score": 0.4}]),
            },
        ):
            pass
        with tracer.start_as_current_span(
            "chat gpt-4o-mini",
            attributes={
                "gen_ai.operation.name": "chat",
                "ragmon.feature": feature,
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.usage.input_tokens": 1000,
                "gen_ai.usage.output_tokens": 100,
            },
        ) as span:
            if generate_ms:
                time.sleep(generate_ms / 1000)
            if error:
                span.set_status(Status(StatusCode.ERROR, "rate limited"))
                span.set_attribute("error.type", "RateLimitError")


@pytest.fixture
def agent(tmp_path: Path):  # type: ignore[no-untyped-def]
    process = AgentProcess(tmp_path / "data").start()
    yield process
    if process.process is not None and process.process.poll() is None:
        process.stop()


def _provider(exporter) -> TracerProvider:  # type: ignore[no-untyped-def]
    provider = TracerProvider(resource=Resource.create({"service.name": "e2e-app"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def test_real_exporters_over_http_and_grpc_land_in_the_report(agent: AgentProcess) -> None:
    http = _provider(HttpExporter(endpoint=f"{agent.otlp_http}/v1/traces"))
    grpc = _provider(GrpcExporter(endpoint=f"127.0.0.1:{agent.grpc_port}", insecure=True))
    for _ in range(5):
        _rag_trace(http.get_tracer("t"), "docs-qa")
    for _ in range(3):
        _rag_trace(grpc.get_tracer("t"), "support", error=True)
    http.shutdown()
    grpc.shutdown()
    assert agent.wait_for("SELECT count() AS n FROM spans", 24) == 24
    # the report trails the spans: a range is rolled up once the sampler has decided its traces
    assert agent.wait_for("SELECT sum(spans) AS n FROM spans_1m", 24) == 24
    rows = json.loads(_cli("report", "--json", "--since", "1h", "--data-dir", str(agent.data_dir)))["stages"]
    by_key = {(r["feature"], r["stage"]): r for r in rows}
    assert by_key[("docs-qa", "generate")]["requests"] == 5
    assert by_key[("support", "generate")]["error_rate"] == 1.0
    cost = 1000 * 0.15 / 1e6 + 100 * 0.60 / 1e6  # gpt-4o-mini list prices in ragmon/data/prices.json
    assert by_key[("docs-qa", "generate")]["cost_usd"] == pytest.approx(5 * cost)
    assert by_key[("docs-qa", "request")]["requests"] == 5
    count = _cli(
        "query", "SELECT count() AS n FROM spans WHERE service = 'e2e-app'", "--json", "--data-dir", str(agent.data_dir)
    )
    assert json.loads(count) == {"n": 24}


def test_error_traces_keep_their_text_in_payloads(agent: AgentProcess) -> None:
    provider = _provider(HttpExporter(endpoint=f"{agent.otlp_http}/v1/traces"))
    _rag_trace(provider.get_tracer("t"), "docs-qa", error=True)
    provider.shutdown()
    kept = agent.wait_for("SELECT count() AS n FROM payloads", 1, timeout_s=30)
    assert kept == 1
    (row,) = agent.query("SELECT question, sampling_reasons, inclusion_probability FROM payloads")
    assert row["question"] == "what is ragmon?"
    assert "error" in row["sampling_reasons"] and row["inclusion_probability"] == 1.0


def test_kept_traces_are_judged_inside_the_agent(agent: AgentProcess) -> None:
    provider = _provider(HttpExporter(endpoint=f"{agent.otlp_http}/v1/traces"))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span(
        "request docs-qa",
        attributes={
            "ragmon.stage": "request",
            "ragmon.feature": "docs-qa",
            "ragmon.question": "What does ragmon monitor?",
            "ragmon.answer": "ragmon monitors retrieval-augmented generation apps.",
        },
    ):
        with tracer.start_as_current_span(
            "retrieval docs",
            attributes={
                "gen_ai.operation.name": "retrieval",
                "ragmon.feature": "docs-qa",
                "gen_ai.retrieval.documents": json.dumps([{"id": "a", "score": 0.9}]),
                "ragmon.retrieval.document_texts": (
                    "ragmon monitors retrieval-augmented generation apps in production.",
                ),
            },
        ):
            pass
        with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}) as span:
            span.set_status(Status(StatusCode.ERROR, "boom"))  # an error trace: kept, so judged
    provider.shutdown()
    assert agent.wait_for("SELECT uniqExact(metric) AS n FROM scores", 4, timeout_s=60) == 4
    rows = agent.query("SELECT metric, status, value FROM scores WHERE metric = 'faithfulness'")
    # the answer is the passage's own words: the local judge's graded probability (v4) is near certain
    assert rows[0]["status"] == "ok" and rows[0]["value"] > 0.9
    # `report --json` carries every section the text report prints: what was kept, and how it was judged.
    # (The sampler's counts are written every few seconds: wait for them.)
    assert agent.wait_for("SELECT toUInt64(sum(traces)) AS n FROM sampling_1m WHERE reason = 'error'", 1) == 1
    report = json.loads(_cli("report", "--json", "--since", "1h", "--data-dir", str(agent.data_dir)))
    assert report["unavailable"] == {}
    assert report["sampling"]["kept_by_reason"]["error"] == 1
    faithfulness = [row for row in report["quality"] if row["metric"] == "faithfulness"]
    assert (
        faithfulness
        and faithfulness[0]["feature"] == "docs-qa"
        and faithfulness[0]["kept"]["mean"] == pytest.approx(rows[0]["value"])
    )


def test_data_survives_a_restart(tmp_path: Path) -> None:
    first = AgentProcess(tmp_path / "data").start()
    provider = _provider(HttpExporter(endpoint=f"{first.otlp_http}/v1/traces"))
    _rag_trace(provider.get_tracer("t"), "docs-qa")
    provider.shutdown()
    assert first.wait_for("SELECT count() AS n FROM spans", 3) == 3
    assert first.stop() == 0
    second = AgentProcess(tmp_path / "data").start()
    try:
        assert second.wait_for("SELECT count() AS n FROM spans", 3) == 3
    finally:
        second.stop()


def test_query_through_the_agent_cuts_at_max_rows(agent: AgentProcess) -> None:
    sql, data_dir = "SELECT number FROM numbers(100000)", str(agent.data_dir)
    result = subprocess.run(
        [sys.executable, "-m", "ragmon.cli", "query", sql, "--max-rows", "5", "--data-dir", data_dir],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["number", "0", "1", "2", "3", "4"]
    assert "the result has more than 5 rows" in result.stderr
    assert "spans\n" in _cli("query", "SHOW TABLES", "--data-dir", data_dir)


def test_a_second_agent_on_the_same_data_dir_is_refused(agent: AgentProcess) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragmon.cli",
            "serve",
            "--data-dir",
            str(agent.data_dir),
            "--otlp-http",
            "127.0.0.1:0",
            "--otlp-grpc",
            "",
            "--api",
            "127.0.0.1:0",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"in use by ragmon process {agent.process.pid} (dashboard and API at {agent.api})" in result.stderr
    assert "{" not in result.stderr  # the owner is described, not printed as a dict


def _encoded_requests(count: int, spans_per_request: int) -> list[tuple[bytes, set[str]]]:
    """Pre-encoded OTLP requests, each a distinct trace, with their span ids."""
    exporter = InMemorySpanExporter()
    tracer = _provider(exporter).get_tracer("crash")
    requests = []
    for i in range(count):
        with tracer.start_as_current_span(f"request {i}", attributes={"ragmon.feature": "crash"}):
            for _ in range(spans_per_request - 1):
                with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}):
                    pass
        spans = exporter.get_finished_spans()
        exporter.clear()
        requests.append((encode_spans(spans), {format(s.context.span_id, "016x") for s in spans}))
    return requests


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0  # connection refused or reset: the agent died


@pytest.mark.slow
@pytest.mark.parametrize(("fsync", "kills"), [("interval", 3), ("always", 1)])
def test_kill_9_during_ingest_loses_nothing_acknowledged(tmp_path: Path, fsync: str, kills: int) -> None:
    requests = _encoded_requests(300 * kills, 5)
    data = tmp_path / "data"
    rng = random.Random(7)
    acknowledged: set[str] = set()
    for cycle in range(kills):  # each cycle restarts on the log and store the previous kill left behind
        agent = AgentProcess(data, extra_env={"RAGMON_AGENT__FSYNC": fsync}, grpc=False).start()
        chunk = requests[cycle * 300 : (cycle + 1) * 300]

        def send(chunk: list[tuple[bytes, set[str]]] = chunk, agent: AgentProcess = agent) -> None:
            for body, span_ids in chunk:
                if _post(f"{agent.otlp_http}/v1/traces", body) == 200:
                    acknowledged.update(span_ids)

        sender = threading.Thread(target=send)
        sender.start()
        time.sleep(rng.uniform(0.3, 0.8))  # somewhere in the middle of the stream
        agent.kill()
        sender.join(60)
    assert acknowledged, "nothing was acknowledged before the kills: the test proves nothing"
    restarted = AgentProcess(data, grpc=False).start()
    try:
        total = len(acknowledged)
        restarted.wait_for(f"SELECT countIf(span_id IN {_sql_set(acknowledged)}) AS n FROM spans", total)
        rows = restarted.query(
            f"SELECT count() AS n, uniqExact(span_id) AS u, countIf(span_id IN {_sql_set(acknowledged)}) AS acked "
            "FROM spans"
        )
        assert rows[0]["acked"] == total  # every acknowledged span is stored
        assert rows[0]["n"] == rows[0]["u"]  # and none twice
        # the rollup behind the report counts every stored span once (root and sibling calls: no nesting), though
        # kills fell between storing ranges and rolling them up
        stored = rows[0]["n"]
        assert restarted.wait_for("SELECT sum(spans) AS n FROM spans_1m", stored) == stored
    finally:
        restarted.stop()


def _sql_set(values: set[str]) -> str:
    return "(" + ",".join(f"'{v}'" for v in sorted(values)) + ")"


def _cli(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "ragmon.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
