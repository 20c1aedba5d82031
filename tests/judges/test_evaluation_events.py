"""Scores out as `gen_ai.evaluation.result` events: the record a score becomes, the bounded queue that sends it, and a
judge worker's scores decoded by real OTLP logs receivers on loopback (judges/evaluation_events.py,
judges/event_export.py, ragmon/pipeline/score_events.py). A receiver that is down, failing or speaking garbage costs
events — each one counted — and never a score or the judge's time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from ragmon.judges.evaluation_events import evaluation_event
from ragmon.judges.event_export import EvaluationEvents
from ragmon.judges.queue import JudgeQueue, Kept
from ragmon.judges.registry import make_judge
from ragmon.judges.worker import JudgeWorker, WorkerConfig

from ragmon.pipeline.score_events import logs_url, metric_families, open_events
from ragmon.settings import JudgeEventsSettings
from tests.judges.worker_fakes import DictPayloads, ListSink, sample, trace_id
from tests.otlp_logs_receiver import GarbageServer, GrpcLogsReceiver, HttpLogsReceiver, unused_port
from tests.support import prometheus
from tests.support.prometheus import Listed, text_of

METRICS = ("faithfulness", "answer_relevance")
FAST = WorkerConfig(metrics=METRICS, concurrency=4, idle_poll_s=0.02, delivery_interval_s=0.02)


def _row(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "tenant": "acme",
        "trace_id": "0af7651916cd43dd8448eb211c80319c",
        "feature": "docs-qa",
        "metric": "faithfulness",
        "judge_version": "local:lexical-v5",
        "judge_model": "",
        "value": 0.5,
        "status": "ok",
        "explanation": "2 of 4 claims supported",
        "scored_at": 1_764_000_000_123_456_789,
    }
    row.update(overrides)
    return row


# -- the record ----------------------------------------------------------------------------------------------
def test_a_score_is_an_event_named_in_the_event_name_field_parented_to_the_evaluated_span() -> None:
    record = evaluation_event(_row(), span_id="b7ad6b7169203331", faithfulness_threshold=0.5)
    assert record.event_name == "gen_ai.evaluation.result"
    assert "event.name" not in (record.attributes or {})  # deprecated: the field carries it
    assert f"{record.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert f"{record.span_id:016x}" == "b7ad6b7169203331"
    assert record.timestamp == 1_764_000_000_123_456_789  # when it was scored
    assert record.severity_number is not None and record.severity_number.value == 9  # INFO
    attrs = dict(record.attributes or {})
    assert attrs["gen_ai.evaluation.name"] == "faithfulness"
    assert attrs["gen_ai.evaluation.score.value"] == 0.5
    assert attrs["gen_ai.evaluation.score.label"] == "pass"  # at the threshold, inclusive
    assert attrs["gen_ai.evaluation.explanation"] == "2 of 4 claims supported"
    assert attrs["ragmon.judge.version"] == "local:lexical-v5" and attrs["ragmon.tenant"] == "acme"
    assert "error.type" not in attrs
    assert "ragmon.eval.run" not in attrs  # production traffic: no run to name


def test_a_score_of_an_eval_runs_trace_names_the_run_as_its_spans_do() -> None:
    attrs = dict(evaluation_event(_row(eval_run="nightly")).attributes or {})
    assert attrs["ragmon.eval.run"] == "nightly"


def test_labels_follow_the_threshold_and_only_faithfulness_has_one() -> None:
    below = evaluation_event(_row(value=0.49), faithfulness_threshold=0.5).attributes or {}
    assert below["gen_ai.evaluation.score.label"] == "fail"
    relevance = evaluation_event(_row(metric="answer_relevance", value=0.9), faithfulness_threshold=0.5)
    assert "gen_ai.evaluation.score.label" not in (relevance.attributes or {})


def test_a_failed_score_has_an_error_type_and_neither_value_nor_label() -> None:
    record = evaluation_event(
        _row(status="parse_error", value=None, explanation="x" * 5000), faithfulness_threshold=0.5
    )
    attrs = dict(record.attributes or {})
    assert attrs["error.type"] == "parse_error" and attrs["ragmon.evaluation.status"] == "parse_error"
    assert "gen_ai.evaluation.score.value" not in attrs and "gen_ai.evaluation.score.label" not in attrs
    assert len(attrs["gen_ai.evaluation.explanation"]) == 1000


def test_without_a_span_id_the_event_carries_the_trace_id_only_and_a_bad_trace_id_leaves_it_unparented() -> None:
    record = evaluation_event(_row())
    assert f"{record.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c" and record.span_id == 0
    unparented = evaluation_event(_row(trace_id="not-a-trace-id"))
    assert unparented.trace_id == 0 and unparented.span_id == 0


def test_the_http_endpoint_gets_the_logs_path_once() -> None:
    assert logs_url("http://collector:4318") == "http://collector:4318/v1/logs"
    assert logs_url("http://collector:4318/") == "http://collector:4318/v1/logs"
    assert logs_url("https://otlp.example.com/v1/logs") == "https://otlp.example.com/v1/logs"


def test_settings_refuse_an_endpoint_that_is_not_a_url() -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        JudgeEventsSettings(endpoint="collector:4318")
    assert open_events(JudgeEventsSettings()) is None  # off by default
    assert metric_families(None) == []


# -- the queue -----------------------------------------------------------------------------------------------
class GatedExporter(LogRecordExporter):
    """Holds every export until `gate` opens (or shutdown, which fails the export as a real exporter's would)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.exporting = threading.Event()
        self.closed = False
        self.batches: list[list[ReadableLogRecord]] = []

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        self.exporting.set()
        self.gate.wait()
        if self.closed:
            return LogRecordExportResult.FAILURE
        self.batches.append(list(batch))
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        self.closed = True
        self.gate.set()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def _names(exporter: GatedExporter) -> list[str]:
    return [str((r.log_record.attributes or {})["gen_ai.evaluation.name"]) for b in exporter.batches for r in b]


def test_a_full_queue_drops_the_newest_events_and_counts_them_without_waiting() -> None:
    exporter = GatedExporter()
    events = EvaluationEvents(exporter, queue_max_events=5, batch_max_events=100, flush_interval_s=60.0)
    try:
        started = time.perf_counter()
        for i in range(8):
            events.emit(_row(metric=f"m{i}"))
        elapsed_s = time.perf_counter() - started
        assert events.stats.dropped == {"queue_full": 3} and events.processor.queue_depth == 5
        assert elapsed_s < 0.5  # nothing waited for the exporter (which has not even been called)
        exporter.gate.set()
        assert events.force_flush(5.0)
        assert _names(exporter) == [f"m{i}" for i in range(5)]  # the first five went out
        assert (events.stats.emitted, events.stats.exported) == (8, 5)
    finally:
        events.shutdown(1.0)


def test_stopping_counts_what_is_being_exported_and_what_is_still_queued_as_shutdown() -> None:
    exporter = GatedExporter()
    events = EvaluationEvents(exporter, queue_max_events=100, batch_max_events=2, flush_interval_s=0.01)
    for i in range(2):
        events.emit(_row(metric=f"m{i}"))
    assert exporter.exporting.wait(5.0)  # the first batch is in the exporter, which holds it
    for i in range(2, 5):
        events.emit(_row(metric=f"m{i}"))
    started = time.perf_counter()
    events.shutdown(0.2)
    assert time.perf_counter() - started < 2.0
    assert events.stats.dropped == {"shutdown": 5} and events.stats.exported == 0
    events.emit(_row())  # after shutdown: counted, never raised
    assert events.stats.dropped == {"shutdown": 6}


# -- a judge worker's scores at real receivers ---------------------------------------------------------------
@pytest.fixture
def queue(tmp_path: Path) -> Iterator[JudgeQueue]:
    q = JudgeQueue.in_data_dir(tmp_path, synchronous="NORMAL")
    yield q
    q.close()


def _settings(endpoint: str, **overrides: Any) -> JudgeEventsSettings:
    options: dict[str, Any] = {"endpoint": endpoint, "flush_interval_ms": 20, "timeout_s": 5.0}
    options.update(overrides)
    return JudgeEventsSettings(**options)


async def _judge(queue: JudgeQueue, events: EvaluationEvents, n: int, *, missing: int = 0) -> tuple[Any, ListSink]:
    """Judge `n` traces with the local judge (the first `missing` have no payload; the even ones know their
    span), sending events through `events`. Returns (judge, sink)."""
    judge = make_judge("local")
    kept = [Kept("t", trace_id(i), feature="faq", span_id=f"{i + 1:016x}" if i % 2 == 0 else "") for i in range(n)]
    queue.enqueue(kept, judge.version)
    payloads = DictPayloads({("t", trace_id(i)): sample(i) for i in range(missing, n)})
    sink = ListSink()
    worker = JudgeWorker(queue, judge, payloads, sink, config=FAST, events=events)
    await worker.run(until_empty=True)
    await judge.aclose()
    return judge, sink


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_every_score_arrives_at_a_real_otlp_receiver_with_the_conventions_names(
    queue: JudgeQueue, protocol: str
) -> None:
    receiver = GrpcLogsReceiver() if protocol == "grpc" else HttpLogsReceiver()
    events = open_events(_settings(receiver.endpoint, protocol=protocol, headers={"x-api-key": "s3cret"}))
    assert events is not None
    try:
        judge, sink = await _judge(queue, events, 6, missing=1)
        got = receiver.wait_for(len(sink.rows))
    finally:
        events.shutdown(2.0)
        receiver.stop()
    assert len(sink.rows) == 12 and len(got) == 12  # every score, once
    by_key = {(e.trace_id, e.attributes["gen_ai.evaluation.name"]): e for e in got}
    for row in sink.rows:
        event = by_key[(row["trace_id"], row["metric"])]
        assert event.event_name == "gen_ai.evaluation.result" and event.severity_number == 9
        assert event.service_name == "ragmon-judge" and event.scope_name == "ragmon.judges"
        assert event.headers["x-api-key"] == "s3cret"
        assert event.time_unix_nano == row["scored_at"]
        i = int(row["trace_id"], 16) - 1
        assert event.span_id == (f"{i + 1:016x}" if i % 2 == 0 else "")
        assert event.attributes["ragmon.evaluation.status"] == row["status"]
        if row["status"] == "ok":
            assert event.attributes["gen_ai.evaluation.score.value"] == pytest.approx(row["value"])
            assert "error.type" not in event.attributes
        else:  # trace 0 had no payload: skipped, said as an error, with no number
            assert row["trace_id"] == trace_id(0) and row["status"] == "skipped"
            assert event.attributes["error.type"] == "skipped"
            assert "gen_ai.evaluation.score.value" not in event.attributes
        label = event.attributes.get("gen_ai.evaluation.score.label")
        if row["metric"] == "faithfulness" and row["status"] == "ok":
            assert label == ("pass" if row["value"] >= judge.faithfulness_threshold else "fail")
        else:
            assert label is None
    assert events.stats.as_dict() == {"emitted": 12, "exported": 12, "batches": events.stats.batches, "dropped": {}}


async def test_a_transient_503_is_retried_and_nothing_is_lost(queue: JudgeQueue) -> None:
    receiver = HttpLogsReceiver()
    receiver.fail_with(2)  # 503 with Retry-After: 0, twice
    events = open_events(_settings(receiver.endpoint, batch_max_events=1000, flush_interval_ms=200))
    assert events is not None
    try:
        _, sink = await _judge(queue, events, 3)
        got = receiver.wait_for(len(sink.rows))
    finally:
        events.shutdown(2.0)
        receiver.stop()
    assert len(got) == len(sink.rows) == 6 and events.stats.dropped == {}
    assert receiver.requests == events.stats.batches + 2  # the exporter's own retries, on the same batch


def _failing(kind: str) -> tuple[str, str, Any]:
    """(endpoint, protocol, thing to stop) for a receiver that never accepts anything."""
    if kind == "refused":
        return f"http://127.0.0.1:{unused_port()}", "http/protobuf", None
    if kind == "garbage":
        garbage = GarbageServer()
        return garbage.endpoint, "http/protobuf", garbage
    if kind == "grpc_unavailable":
        grpc_receiver = GrpcLogsReceiver()
        grpc_receiver.fail_with(10**9)
        return grpc_receiver.endpoint, "grpc", grpc_receiver
    http_receiver = HttpLogsReceiver()
    http_receiver.fail_with(10**9)
    return http_receiver.endpoint, "http/protobuf", http_receiver


@pytest.mark.parametrize("kind", ["refused", "http_503", "garbage", "grpc_unavailable"])
async def test_a_receiver_down_or_failing_costs_counted_events_never_scores_or_judging_time(
    queue: JudgeQueue, kind: str
) -> None:
    endpoint, protocol, server = _failing(kind)
    # Each batch may spend up to 5 s in the exporter's retries: judging must not wait for any of it.
    events = open_events(_settings(endpoint, protocol=protocol, batch_max_events=4, queue_max_events=8))
    assert events is not None
    try:
        started = time.perf_counter()
        _, sink = await _judge(queue, events, 10)
        judged_s = time.perf_counter() - started
        assert len(sink.rows) == 20 and {r["status"] for r in sink.rows} == {"ok"}  # every score, stored
        assert judged_s < 4.0, judged_s
        started = time.perf_counter()
        events.shutdown(0.5)
        assert time.perf_counter() - started < 3.0  # stopping interrupts the exporter's retries
    finally:
        events.shutdown(0.0)
        if server is not None:
            server.stop()
    stats = events.stats
    assert stats.emitted == 20 and stats.exported == 0
    assert sum(stats.dropped.values()) == 20  # every event accounted for
    assert set(stats.dropped) <= {"queue_full", "export_failed", "shutdown"}
    if isinstance(server, HttpLogsReceiver | GrpcLogsReceiver):
        assert server.requests >= 1 and server.events == []
    text = text_of(Listed(metric_families(events)))
    for reason in ("queue_full", "export_failed", "shutdown"):
        assert prometheus.value(text, "ragmon_judge_events_dropped_total", reason=reason) == stats.dropped[reason]
    assert prometheus.value(text, "ragmon_judge_events_exported_total") == 0
    assert prometheus.value(text, "ragmon_judge_events_emitted_total") == 20
