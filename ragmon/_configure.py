"""`ragmon.configure`: build the SDK state, join or create a TracerProvider, attach the export pipeline.

A TracerProvider that another library already installed is joined, never replaced (replacing one silently
orphaned 80% of spans in the Langfuse/Sentry collision). Only when nothing is installed does ragmon create and
install its own. ragmon attaches one switchable processor per provider, so calling `configure` again swaps
ragmon's exporter without touching anybody else's processors.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

from ragmon import _feedback, _state
from ragmon import attributes as attr
from ragmon._export import OtlpHttpTransport, QueueSpanProcessor, SpanExporterTransport, Transport
from ragmon.diagnostics import logger
from ragmon.pricing import PriceFileError, PriceTable, default_price_table, load_price_table
from ragmon.retry import RetryPolicy
from ragmon.settings import Settings, load_settings, merge_tree
from ragmon.version import __version__


class _SwitchableProcessor(SpanProcessor):
    """The one processor ragmon adds to a provider; its delegate changes with each `configure`."""

    def __init__(self) -> None:
        self.delegate: QueueSpanProcessor | None = None

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        delegate = self.delegate
        if delegate is not None:
            delegate.on_end(span)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        delegate = self.delegate
        return True if delegate is None else delegate.force_flush(timeout_millis)

    def shutdown(self) -> None:
        delegate, self.delegate = self.delegate, None
        if delegate is not None:
            delegate.shutdown()


_lock = threading.Lock()
_switches: WeakKeyDictionary[TracerProvider, _SwitchableProcessor] = WeakKeyDictionary()
_active: QueueSpanProcessor | None = None
_price_problem: str | None = None


def configure(
    *,
    service_name: str | None = None,
    release: str | None = None,
    environment: str | None = None,
    endpoint: str | None = None,
    api_key: str | None = None,
    capture_content: bool | None = None,
    redact: _state.Redactor | None = None,
    price_file: str | Path | None = None,
    tracer_provider: trace_api.TracerProvider | None = None,
    span_exporter: SpanExporter | None = None,
    export: bool | None = None,
    settings: Settings | Mapping[str, Any] | None = None,
) -> None:
    """Make the SDK live. Arguments beat `RAGMON_*`/`OTEL_*` variables, which beat defaults.

    Invalid settings raise here, at start-up (fail fast); nothing after this raises into the app.
    `span_exporter` sends ragmon's spans to any OpenTelemetry exporter instead of ragmon's OTLP/HTTP client.
    `release` and `environment` (e.g. "2.3.1", "prod") become the resource's `service.version` and
    `deployment.environment.name`, by which ragmon breaks its reports down; a provider ragmon joins keeps its own
    resource, so there they ride on ragmon's request spans instead (the agent reads a span's own first).
    """
    global _active, _price_problem
    resolved = _resolve_settings(
        settings,
        service_name=service_name,
        release=release,
        environment=environment,
        endpoint=endpoint,
        api_key=api_key,
        capture_content=capture_content,
        price_file=price_file,
        export=export,
    )
    prices = _load_prices(resolved.sdk.price_file)
    provider = _provider(tracer_provider, resolved)
    transport = _transport(resolved, span_exporter)
    with _lock:
        old, _active = _active, None
        processor = None
        if transport is not None:
            processor = QueueSpanProcessor(
                transport,
                queue_max_spans=resolved.export.queue_max_spans,
                batch_max_spans=resolved.export.batch_max_spans,
                flush_interval_s=resolved.export.flush_interval_ms / 1000,
            )
            if isinstance(provider, TracerProvider):
                _switch_for(provider).delegate = processor
            else:
                logger.warning(
                    "ragmon: the installed TracerProvider (%s) takes no span processors; spans are not exported",
                    type(provider).__name__,
                )
        _active = processor
        _state.current = _state.State(
            tracer=provider.get_tracer("ragmon", __version__),
            prices=prices,
            capture_content=resolved.sdk.capture_content,
            redact=redact,
            max_attribute_chars=resolved.sdk.max_attribute_chars,
            index_vector_sample=resolved.sdk.index_vector_sample,
            request_attributes=_release_not_on(provider, resolved),
        )
    if old is not None:
        old.shutdown()
    _configure_feedback(resolved)


def _configure_feedback(settings: Settings) -> None:
    """`ragmon.feedback` posts to the agent the spans go to, with the same key and retry policy (export on)."""
    if not settings.export.enabled:
        _feedback.configure(None, {}, 1.0, RetryPolicy())
        return
    headers = {k: v.get_secret_value() for k, v in settings.export.headers.items()}
    if settings.export.api_key is not None:
        headers["Authorization"] = f"Bearer {settings.export.api_key.get_secret_value()}"
    policy = RetryPolicy(max_attempts=settings.export.max_attempts, deadline_s=settings.export.retry_deadline_s)
    _feedback.configure(settings.export.endpoint, headers, settings.export.timeout_s, policy)


def _resolve_settings(settings: Settings | Mapping[str, Any] | None, **arguments: Any) -> Settings:
    sdk_keys = ("service_name", "release", "environment", "capture_content", "price_file")
    sdk = {k: arguments[k] for k in sdk_keys if arguments[k] is not None}
    export = {k: arguments[k] for k in ("endpoint", "api_key") if arguments[k] is not None}
    if arguments["export"] is not None:
        export["enabled"] = arguments["export"]
    overrides = {"sdk": sdk, "export": export}
    if isinstance(settings, Settings):  # already resolved against the environment: don't read it again
        return Settings.model_validate(merge_tree(settings.model_dump(), overrides))
    return load_settings(merge_tree(dict(settings or {}), overrides))


def _load_prices(price_file: Path | None) -> PriceTable:
    global _price_problem
    try:
        table = load_price_table(price_file)
        _price_problem = None
        return table
    except PriceFileError as exc:
        # A broken price file must not break the app: keep the shipped table and say so.
        _price_problem = str(exc)
        logger.error("ragmon: %s; using the shipped price table", exc)
        return default_price_table()


def _provider(explicit: trace_api.TracerProvider | None, settings: Settings) -> trace_api.TracerProvider:
    if explicit is not None:
        return explicit
    installed = trace_api.get_tracer_provider()
    if isinstance(installed, TracerProvider):
        return installed  # join: someone (maybe an earlier configure) set one up
    if not isinstance(installed, trace_api.ProxyTracerProvider):
        return installed  # another implementation; join it, spans flow through its pipeline
    resource = Resource.create(
        {**settings.sdk.resource_attributes, "service.name": settings.sdk.service_name, **_release_attributes(settings)}
    )
    provider = TracerProvider(resource=resource)
    trace_api.set_tracer_provider(provider)
    return provider


def _release_attributes(settings: Settings) -> dict[str, str]:
    """The resource keys of the configured release and environment (none for what was not configured)."""
    keys = ((attr.SERVICE_VERSION, settings.sdk.release), (attr.DEPLOYMENT_ENVIRONMENT_NAME, settings.sdk.environment))
    return {key: value for key, value in keys if value}


def _release_not_on(provider: trace_api.TracerProvider, settings: Settings) -> dict[str, str]:
    """What of the configured release and environment the provider's resource does not say: a provider ragmon joined
    has a resource of its own, which ragmon cannot change, so those keys go on ragmon's request spans instead."""
    resource = getattr(provider, "resource", None)
    said = dict(resource.attributes) if isinstance(resource, Resource) else {}
    return {key: value for key, value in _release_attributes(settings).items() if said.get(key) != value}


def _switch_for(provider: TracerProvider) -> _SwitchableProcessor:
    switch = _switches.get(provider)
    if switch is None:
        switch = _switches[provider] = _SwitchableProcessor()
        provider.add_span_processor(switch)
    return switch


def _transport(settings: Settings, span_exporter: SpanExporter | None) -> Transport | None:
    if span_exporter is not None:
        return SpanExporterTransport(span_exporter)
    if not settings.export.enabled:
        return None
    headers = {k: v.get_secret_value() for k, v in settings.export.headers.items()}
    if settings.export.api_key is not None:
        headers["Authorization"] = f"Bearer {settings.export.api_key.get_secret_value()}"
    policy = RetryPolicy(max_attempts=settings.export.max_attempts, deadline_s=settings.export.retry_deadline_s)
    return OtlpHttpTransport(
        settings.export.endpoint,
        headers=headers,
        timeout_s=settings.export.timeout_s,
        compression=settings.export.compression,
        policy=policy,
    )


def force_flush(timeout_s: float = 5.0) -> bool:
    """Export everything ended so far; False if that did not finish within the timeout."""
    processor = _active
    spans = True if processor is None else processor.force_flush(int(timeout_s * 1000))
    return _feedback.flush(timeout_s) and spans


def shutdown(timeout_s: float = 5.0) -> None:
    """Flush and stop ragmon's exporter; every API becomes a no-op again. Other processors are untouched."""
    global _active
    with _lock:
        processor, _active = _active, None
        _state.current = None
        for switch in list(_switches.values()):
            if switch.delegate is processor:
                switch.delegate = None
    if processor is not None:
        processor.shutdown(timeout_s)
    _feedback.shutdown(timeout_s)


def stats() -> dict[str, Any]:
    """Counters of the SDK: export progress, every drop by reason, instrumentation problems."""
    processor = _active
    state = _state.current
    out: dict[str, Any] = {
        "configured": state is not None,
        "queued": 0,
        "attempted": 0,
        "exported": 0,
        "retries": 0,
        "dropped": {},
        "dropped_total": 0,
        "problems": dict(state.problems) if state is not None else {},
        "price_file_error": _price_problem,
        "feedback": _feedback.stats(),  # ragmon.feedback: queued, sent, dropped by reason
    }
    if processor is not None:
        s = processor.stats
        out.update(
            queued=processor.queue_depth,
            attempted=s.attempted,
            exported=s.exported,
            retries=s.retries,
            dropped=dict(s.dropped),
            dropped_total=s.dropped_total,
        )
    return out
