"""A score as an OpenTelemetry GenAI evaluation event: one `gen_ai.evaluation.result` LogRecord per score row.

The GenAI semantic conventions (Development status, open-telemetry/semantic-conventions-genai, model/gen-ai/
events.yaml) define the evaluation result as an *event*: `gen_ai.evaluation.name` (required),
`gen_ai.evaluation.score.value` and `.score.label` (when applicable), `gen_ai.evaluation.explanation`,
`error.type` when the evaluation failed, and `gen_ai.response.id` when the evaluated span is not known (ragmon
does not store response ids, so it has none to send). An event
is a LogRecord whose EventName field carries the name (the `event.name` attribute is deprecated for it); it
SHOULD be parented to the evaluated span, which for a LogRecord means its trace id and span id.

Judging happens after the trace ended, so there is no live span: the record carries the evaluated trace's id,
and its span id when the queue item knows which span the scores are about (otherwise only the trace id: still
enough for a backend to show the event with the trace). Nothing here does I/O: `judges/event_export.py` sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from ragmon import attributes as attr

# An explanation is a sentence or two; a runaway one should not make every event of a batch large.
MAX_EXPLANATION_CHARS = 1_000


def evaluation_attributes(row: Mapping[str, Any], *, faithfulness_threshold: float | None = None) -> dict[str, Any]:
    """The event's attributes for one score row (shaped like ragmon.sinks.schema.SCORE_COLUMNS)."""
    metric = str(row["metric"])
    status = str(row["status"])
    out: dict[str, Any] = {attr.GEN_AI_EVALUATION_NAME: metric}
    value = row.get("value")
    if status == "ok" and value is not None:
        out[attr.GEN_AI_EVALUATION_SCORE_VALUE] = float(value)
        # Faithfulness has a decision threshold (the judge's, the one `ragmon calibrate` measures): say the
        # verdict a reader would draw. The other metrics are graded, with no threshold to read a label from.
        if metric == "faithfulness" and faithfulness_threshold is not None:
            out[attr.GEN_AI_EVALUATION_SCORE_LABEL] = "pass" if float(value) >= faithfulness_threshold else "fail"
    else:
        # No value and no label: a failed evaluation is never reported as a number (GUIDE §3).
        out[attr.ERROR_TYPE] = status
    explanation = str(row.get("explanation") or "")
    if explanation:
        out[attr.GEN_AI_EVALUATION_EXPLANATION] = explanation[:MAX_EXPLANATION_CHARS]
    out[attr.RAGMON_EVALUATION_STATUS] = status
    out[attr.RAGMON_JUDGE_VERSION] = str(row.get("judge_version") or "")
    out[attr.RAGMON_JUDGE_MODEL] = str(row.get("judge_model") or "")
    out[attr.RAGMON_TENANT] = str(row.get("tenant") or "")
    out[attr.RAGMON_FEATURE] = str(row.get("feature") or "")
    if row.get("eval_run"):  # a `ragmon eval run`'s trace: as its spans say, so a backend keeps it apart too
        out[attr.RAGMON_EVAL_RUN] = str(row["eval_run"])
    out[attr.GEN_AI_USAGE_INPUT_TOKENS] = int(row.get("input_tokens") or 0)
    out[attr.GEN_AI_USAGE_OUTPUT_TOKENS] = int(row.get("output_tokens") or 0)
    if row.get("cost_usd") is not None:
        out[attr.RAGMON_COST_USD] = float(row["cost_usd"])
    return out


def hex_id(text: str, digits: int) -> int:
    """A W3C trace id (32 hex digits) or span id (16) as an int; 0 (OTel's "none") when absent or malformed."""
    if len(text) != digits:
        return 0
    try:
        return int(text, 16)
    except ValueError:
        return 0


def evaluated_context(trace_id: str, span_id: str = "") -> Context:
    """A context whose current span is the evaluated one (remote, never recorded), so the LogRecord built in it
    takes its trace id and span id; the invalid span (ids 0: unparented) when the trace id is unusable. Never an
    empty context: the SDK reads an empty one as "use the current span", whatever the judging thread runs under."""
    trace_int = hex_id(trace_id, 32)
    if not trace_int:
        return trace.set_span_in_context(trace.INVALID_SPAN, Context())
    span = SpanContext(trace_int, hex_id(span_id, 16), is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(span), Context())


def evaluation_event(
    row: Mapping[str, Any], *, span_id: str = "", faithfulness_threshold: float | None = None
) -> LogRecord:
    """The `gen_ai.evaluation.result` event of one score row. `span_id`: the evaluated span, when known."""
    scored_at = row.get("scored_at")
    return LogRecord(
        # When the score was made (the row's time, which the store keeps too), not when the event left.
        timestamp=int(scored_at) if isinstance(scored_at, int) else None,
        context=evaluated_context(str(row.get("trace_id") or ""), span_id),
        severity_number=SeverityNumber.INFO,  # events SHOULD carry a severity; a score is information
        event_name=attr.GEN_AI_EVALUATION_RESULT_EVENT,
        attributes=evaluation_attributes(row, faithfulness_threshold=faithfulness_threshold),
    )
