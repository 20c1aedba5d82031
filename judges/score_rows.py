"""Score rows: one dict per (trace, metric, judge version), shaped like `ragmon.sinks.schema.SCORE_COLUMNS`.

Rows carry keys the scores table has only from schema v3 on (see `EXTRA_SCORE_KEYS`): per-claim flags and evidence
inside `claims` (stored as the parallel `claim_flags` / `claim_support` columns), the metric's `flags` (refusal,
noncommittal, unparseable_verdicts), the number of judge calls, and the trace's sampling reason and inclusion
probability (its weight is 1 / inclusion_probability), and from v9 the trace's eval run (`eval_run`, '' for
production traffic: an eval run's scores stay apart from production's), and from v10 its release (`release`, the
app's `service.version`, so judged quality compares by release). A store that lacks them drops them at its
adapter (ragmon/pipeline/judge_store.py), counted, instead of failing the insert.

Rows are plain JSON values (times as integer unix nanoseconds), because they wait in the queue file before they
reach the store, and a re-sent row must be byte-identical to the first send.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ragmon.judges.queue import Lease
from ragmon.judges.types import MetricResult, Status

# Keys beyond the v1 scores table (and claim fields beyond its (claim, verdict, reason) tuple): schema v3 added them,
# v4 the context source, v9 the eval run, v10 the release.
EXTRA_SCORE_KEYS = (
    "flags",
    "judge_calls",
    "sampling_reason",
    "inclusion_probability",
    "context_source",
    "eval_run",
    "release",
)
EXTRA_CLAIM_KEYS = ("flag", "support")


def score_row(
    lease: Lease,
    result: MetricResult,
    *,
    judge_version: str,
    feature: str,
    run_name: str = "",
    scored_at_ns: int | None = None,
    context_source: str = "",
) -> dict[str, Any]:
    usage = result.usage
    return {
        "tenant": lease.tenant,
        "trace_id": lease.trace_id,
        "feature": feature,
        "eval_run": lease.eval_run,
        "release": lease.release,
        "metric": result.metric,
        "judge_version": judge_version,
        # A value only with status ok: a failure is never a number (GUIDE §3).
        "value": result.value if result.status is Status.OK else None,
        "status": str(result.status),
        "explanation": result.explanation,
        "claims": [
            {
                "claim": c.claim,
                "verdict": str(c.verdict),
                "reason": c.reason,
                "flag": c.flag,
                "support": c.support,
            }
            for c in result.claims
        ],
        "flags": list(result.flags),
        "judge_model": result.judge_model,
        "prompt_version": result.prompt_version,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": usage.cost_usd,
        "judge_calls": usage.calls,
        "run_name": run_name,
        "scored_at": time.time_ns() if scored_at_ns is None else scored_at_ns,
        "sampling_reason": lease.sampling_reason,
        "inclusion_probability": lease.inclusion_probability,
        # judged against retrieved passages or against the prompt ('' when the payload did not say)
        "context_source": context_source,
    }


def status_rows(
    lease: Lease,
    metrics: Sequence[str],
    status: Status,
    explanation: str,
    *,
    judge_version: str,
    feature: str,
    run_name: str = "",
) -> list[dict[str, Any]]:
    """The same non-ok status for every metric of a trace (payload missing, gave up)."""
    now_ns = time.time_ns()
    return [
        score_row(
            lease,
            MetricResult.failed(metric, status, explanation),
            judge_version=judge_version,
            feature=feature,
            run_name=run_name,
            scored_at_ns=now_ns,
        )
        for metric in metrics
    ]


def summary_status(rows: Sequence[dict[str, Any]]) -> str:
    """One status for a trace's rows: theirs when they agree, else "mixed"."""
    statuses = {str(r["status"]) for r in rows}
    return statuses.pop() if len(statuses) == 1 else "mixed"
