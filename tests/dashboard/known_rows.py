"""Known rows for the dashboard tests: traces built span by span, their payloads, scores and alerts, so every
figure a test expects is worked out from the numbers written here."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ragmon.sinks import Store

from tests.support.span_rows import SpanBatch, insert_spans

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


@dataclass
class Span:
    stage: str
    offset_ms: float
    duration_ms: float
    name: str = ""
    parent: int | None = 0  # index of the parent span in the trace; None for the root
    status: str = "ok"
    model: str = ""
    cost_usd: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class Trace:
    trace_id: str
    start_s: float
    spans: list[Span]
    tenant: str = "acme"
    feature: str = "docs-qa"
    eval_run: str = ""  # '' = production; a name = that `ragmon eval run`'s traffic
    extra: dict[str, Any] = field(default_factory=dict)


def trace_id(n: int) -> str:
    return f"{n:032x}"


def span_id(trace: Trace, index: int) -> str:
    return f"{int(trace.trace_id[-8:], 16):08x}{index:08x}"


def request(n: int, start_s: float, *, tenant: str = "acme", feature: str = "docs-qa", scale: float = 1.0) -> Trace:
    """A request of four stages: embed 2, search 5, generate 40 ms (times `scale`), the root around them."""
    embed, search, generate = 2.0 * scale, 5.0 * scale, 40.0 * scale
    return Trace(
        trace_id(n),
        start_s,
        [
            Span("request", 0.0, embed + search + generate + 1.0, name=f"request {feature}", parent=None),
            Span("embed", 0.5, embed, name="embeddings mini", model="embed-mini", cost_usd=0.001, input_tokens=10),
            Span("search", 0.5 + embed, search, name="retrieval docs"),
            Span(
                "generate",
                0.5 + embed + search,
                generate,
                name="chat gpt",
                model="gpt-test",
                cost_usd=0.02,
                input_tokens=900,
                output_tokens=100,
            ),
        ],
        tenant=tenant,
        feature=feature,
    )


def insert_traces(store: Store, traces: list[Trace]) -> None:
    batch = SpanBatch()
    for trace in traces:
        for index, span in enumerate(trace.spans):
            batch.tenant.append(trace.tenant)
            batch.trace_id.append(trace.trace_id)
            batch.span_id.append(span_id(trace, index))
            batch.parent_span_id.append("" if span.parent is None else span_id(trace, span.parent))
            batch.name.append(span.name or span.stage)
            batch.stage.append(span.stage)
            batch.feature.append(trace.feature)
            batch.eval_run.append(trace.eval_run)
            batch.user.append("u")
            batch.session.append("s")
            batch.service.append("svc")
            batch.start_time.append(int(trace.start_s * 1e9 + span.offset_ms * 1e6))
            batch.duration_ms.append(span.duration_ms)
            batch.status.append(span.status)
            batch.error_type.append("TimeoutError" if span.status == "error" else "")
            batch.model.append(span.model)
            batch.provider.append("test" if span.model else "")
            batch.input_tokens.append(span.input_tokens)
            batch.output_tokens.append(span.output_tokens)
            batch.cached_input_tokens.append(0)
            batch.cost_usd.append(span.cost_usd)
            batch.top1_score.append(0.9 if span.stage == "search" else None)
            batch.similarity_gap.append(0.1 if span.stage == "search" else None)
            batch.norm_deviation.append(None)
            batch.ttft_ms.append(None)
            batch.retrieved_ids.append([])
            batch.retrieved_scores.append([])
            # the root span's own attributes, when the trace names some (e.g. ragmon.request_id)
            batch.attributes.append(dict(trace.extra.get("root_attributes", {})) if span.parent is None else {})
            batch.ingest_seq.append(0)
    insert_spans(store, batch)
    store.roll_up(0, 0)  # as the agent does once the sampler has decided the traces


def utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def payload(trace: Trace, *, probability: float, reasons: list[str], question: str = "q?", **extra: Any) -> dict:
    return {
        "tenant": trace.tenant,
        "trace_id": trace.trace_id,
        "feature": trace.feature,
        "start_time": utc(trace.start_s),
        "question": question,
        "answer": extra.pop("answer", "an answer"),
        "passages": extra.pop("passages", [{"id": "doc#1", "score": 0.8, "text": "a passage"}]),
        "sampling_reason": reasons[0],
        "sampling_reasons": reasons,
        "inclusion_probability": probability,
        **extra,
    }


def score(trace: Trace, metric: str, value: float | None, *, at_s: float, **extra: Any) -> dict:
    return {
        "tenant": trace.tenant,
        "trace_id": trace.trace_id,
        "feature": trace.feature,
        "metric": metric,
        "judge_version": extra.pop("judge_version", "v1"),
        "value": value,
        "status": extra.pop("status", "ok" if value is not None else "error"),
        "scored_at": utc(at_s),
        **extra,
    }


def alert(alert_id: str, state: str, *, at_s: float, tenant: str = "acme", severity: str = "warning", **extra: Any):
    return {
        "tenant": tenant,
        "alert_id": alert_id,
        "fired_at": utc(at_s),
        "rule": extra.pop("rule", "p95-shift"),
        "severity": severity,
        "state": state,
        "feature": "docs-qa",
        "stage": "generate",
        "metric": "p95_ms",
        "value": 7.5,
        "threshold": 5.0,
        "message": extra.pop("message", f"{alert_id} fired"),
        **extra,
    }
