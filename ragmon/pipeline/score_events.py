"""Scores out, wired: `judge.events` settings → the real OTLP log exporter → `EvaluationEvents` for a judge worker,
and its counters for the agent's /metrics and `ragmon judge`'s summary.

The exporter is opentelemetry-python's own (OTLP/HTTP protobuf or OTLP/gRPC, a core dependency): its encoder,
retries and TLS are the ones every OTel backend is tested against. The endpoint is checked when the judge starts,
so a typo stops start-up instead of turning every event into a drop.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from opentelemetry.sdk._logs.export import LogRecordExporter
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from ragmon.judges.event_export import EvaluationEvents, EventStats
from ragmon.settings import JudgeEventsSettings

HTTP_LOGS_PATH = "/v1/logs"
# What stopping gives the events still queued: a collector that is down must not hold a stop or an exit.
FLUSH_ON_STOP_S = 5.0
DROP_REASONS = ("queue_full", "export_failed", "exporter_error", "shutdown", "build_error")


def logs_url(endpoint: str) -> str:
    """The OTLP/HTTP logs URL of a collector's base URL (`/v1/logs` added unless already there)."""
    path = urlsplit(endpoint).path.rstrip("/")
    return endpoint if path.endswith(HTTP_LOGS_PATH) else endpoint.rstrip("/") + HTTP_LOGS_PATH


def make_exporter(settings: JudgeEventsSettings) -> LogRecordExporter:
    if settings.endpoint is None:
        raise ValueError("judge.events.endpoint is not set")
    url = urlsplit(settings.endpoint)
    if not url.hostname:
        raise ValueError(f"judge.events.endpoint has no host: {settings.endpoint!r}")
    headers = {name: value.get_secret_value() for name, value in settings.headers.items()}
    if settings.protocol == "grpc":
        # each exporter is imported only when chosen: the gRPC one loads grpcio, slow to import (docs/results.md)
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter

        # http:// is plain text, https:// TLS with the system's roots (the exporter reads the scheme).
        return GrpcLogExporter(
            endpoint=settings.endpoint, insecure=url.scheme == "http", headers=headers, timeout=settings.timeout_s
        )
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter

    return HttpLogExporter(endpoint=logs_url(settings.endpoint), headers=headers, timeout=settings.timeout_s)


def open_events(settings: JudgeEventsSettings, exporter: LogRecordExporter | None = None) -> EvaluationEvents | None:
    """The events pipeline for a judge worker, or None when `judge.events.endpoint` is not set (the default)."""
    if settings.endpoint is None and exporter is None:
        return None
    return EvaluationEvents(
        exporter or make_exporter(settings),
        service_name=settings.service_name,
        queue_max_events=settings.queue_max_events,
        batch_max_events=settings.batch_max_events,
        flush_interval_s=settings.flush_interval_ms / 1000,
    )


def metric_families(events: EvaluationEvents | None) -> list[Metric]:
    """The ragmon_judge_events_* families (none when events are off: no series that could only ever read 0)."""
    if events is None:
        return []
    stats: EventStats = events.stats
    dropped = dict.fromkeys(DROP_REASONS, 0) | stats.dropped_by_reason()  # every reason, 0 until it happens
    # Counter families are named without _total: prometheus_client appends it (ragmon_judge_events_emitted_total).
    dropped_family = CounterMetricFamily(
        "ragmon_judge_events_dropped",
        "Evaluation events lost, by reason (the scores are stored anyway).",
        labels=["reason"],
    )
    for reason, n in sorted(dropped.items()):
        dropped_family.add_metric([reason], n)
    return [
        CounterMetricFamily(
            "ragmon_judge_events_emitted", "Scores handed to the evaluation event queue.", stats.emitted
        ),
        CounterMetricFamily(
            "ragmon_judge_events_exported",
            "gen_ai.evaluation.result events the OTLP endpoint accepted.",
            stats.exported,
        ),
        dropped_family,
        GaugeMetricFamily(
            "ragmon_judge_events_queued",
            "Evaluation events waiting for the export thread.",
            events.processor.queue_depth,
        ),
    ]
