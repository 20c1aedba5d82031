"""Scores as OpenTelemetry GenAI evaluation records: one span per score, carrying a `gen_ai.evaluation.result` event.

The GenAI semantic conventions (Development status) define the evaluation result as an *event* with
`gen_ai.evaluation.name` (required), `gen_ai.evaluation.score.value` and `.score.label` (when applicable),
`gen_ai.evaluation.explanation` and `error.type`, and say it SHOULD be parented to the operation span being
evaluated. Judging happens after the trace ended and was exported, so there is no live span to add an event to:
each score becomes a short span of its own with the same attributes, holding the event, so backends that read
either find it.

The evaluated trace is linked: when the queue item knows the evaluated span (`span_id`), the evaluation span is
its child, inside the evaluated trace; otherwise it starts a trace of its own with a link (trace id only) and
`ragmon.evaluation.trace_id`. A failed score carries no value and sets `error.type` to its status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags, Tracer

from ragmon import attributes as attr

# Names ragmon/attributes.py does not hold yet (to move there).
GEN_AI_EVALUATION_RESULT_EVENT = "gen_ai.evaluation.result"
GEN_AI_EVALUATION_SCORE_LABEL = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION = "gen_ai.evaluation.explanation"
RAGMON_EVALUATION_STATUS = "ragmon.evaluation.status"
RAGMON_EVALUATION_TRACE_ID = "ragmon.evaluation.trace_id"
RAGMON_JUDGE_VERSION = "ragmon.judge.version"
RAGMON_JUDGE_MODEL = "ragmon.judge.model"

_MAX_EXPLANATION_CHARS = 1_000
TRACER_NAME = "ragmon.judges"


def default_tracer() -> Tracer:
    """The global tracer: a no-op until the process configures an OpenTelemetry tracer provider."""
    return trace.get_tracer(TRACER_NAME)


def _hex_id(text: str, digits: int) -> int | None:
    if len(text) != digits:
        return None
    try:
        value = int(text, 16)
    except ValueError:
        return None
    return value or None


def emit(
    tracer: Tracer, row: Mapping[str, Any], *, span_id: str = "", faithfulness_threshold: float | None = None
) -> None:
    """One evaluation span (and event) for one score row."""
    metric = str(row["metric"])
    status = str(row["status"])
    event: dict[str, Any] = {attr.GEN_AI_EVALUATION_NAME: metric}
    value = row.get("value")
    if status == "ok" and value is not None:
        event[attr.GEN_AI_EVALUATION_SCORE_VALUE] = float(value)
        if metric == "faithfulness" and faithfulness_threshold is not None:
            event[GEN_AI_EVALUATION_SCORE_LABEL] = "pass" if float(value) >= faithfulness_threshold else "fail"
    else:
        event[attr.ERROR_TYPE] = status
    explanation = str(row.get("explanation") or "")
    if explanation:
        event[GEN_AI_EVALUATION_EXPLANATION] = explanation[:_MAX_EXPLANATION_CHARS]
    attributes: dict[str, Any] = {
        **event,
        RAGMON_EVALUATION_STATUS: status,
        RAGMON_EVALUATION_TRACE_ID: str(row["trace_id"]),
        RAGMON_JUDGE_VERSION: str(row["judge_version"]),
        RAGMON_JUDGE_MODEL: str(row.get("judge_model") or ""),
        attr.RAGMON_TENANT: str(row["tenant"]),
        attr.RAGMON_FEATURE: str(row.get("feature") or ""),
        attr.GEN_AI_USAGE_INPUT_TOKENS: int(row.get("input_tokens") or 0),
        attr.GEN_AI_USAGE_OUTPUT_TOKENS: int(row.get("output_tokens") or 0),
    }
    if row.get("cost_usd") is not None:
        attributes[attr.RAGMON_COST_USD] = float(row["cost_usd"])
    trace_id = _hex_id(str(row["trace_id"]), 32)
    parent_span = _hex_id(span_id, 16)
    context = None
    links: list[Link] = []
    if trace_id is not None and parent_span is not None:
        parent = SpanContext(trace_id, parent_span, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        context = trace.set_span_in_context(NonRecordingSpan(parent))
    elif trace_id is not None:
        # The evaluated span is unknown: link the trace (span id 0; the attribute keeps the link from being dropped).
        links.append(Link(SpanContext(trace_id, 0, is_remote=True), {RAGMON_EVALUATION_TRACE_ID: str(row["trace_id"])}))
    with tracer.start_as_current_span(
        f"evaluation {metric}", context=context, kind=SpanKind.INTERNAL, links=links, attributes=attributes
    ) as span:
        span.add_event(GEN_AI_EVALUATION_RESULT_EVENT, event)
