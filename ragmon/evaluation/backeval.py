"""Back-evaluation: re-score stored kept traces with a chosen judge as a new named run.

``ragmon backeval --since 7d [--feature F] [--judge NAME] [--name RUN] [--budget-usd X] [--yes]``:

1. select the kept traces (`backeval_source`), drop those the run's journal already holds (`backeval_journal`);
2. print the estimated judge cost (`backeval_cost`) and ask for confirmation unless ``--yes``;
3. score the rest with ``concurrency`` traces in flight — the judge paces its own calls (the LLM judge's
   requests-per-minute bucket, concurrency limit and budget, `ragmon.judges.llm_judge`), so parallelism never exceeds
   its limits — journalling each trace as it finishes;
4. write the results file (`ragmon.evaluation.gate_runs` format, one row per trace) and, when this process owns
   the store, the score rows under the run's name (``scores.run_name``).

The budget (``--budget-usd``) covers the whole run, resumes included: what the journal says was spent is
subtracted before the judge gets the rest as its hard cap. A trace whose metric came back ``budget_exhausted``
is not journalled (a resume with a larger budget scores it); the run stops launching traces and ends with
``stopped_by_budget``. An interrupted run (Ctrl-C, kill) resumes with the same ``--name``: every trace is scored
exactly once per run.

Results rows: ``row_id`` is the trace's evaluation row id when it came from ``ragmon eval run`` (so the run pairs
with that eval run in ``ragmon gate``), else the trace id; metrics are the judge's values (null for a non-ok
status); the ``faithful`` check is faithfulness ≥ the judge's threshold.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragmon.evaluation.backeval_journal import JournalEntry, RunJournal
from ragmon.evaluation.backeval_source import KeptTrace
from ragmon.evaluation.triage import TriageInput, diagnose
from ragmon.judges.llm_judge import current_feature
from ragmon.judges.queue import Lease
from ragmon.judges.score_rows import score_row
from ragmon.judges.types import MetricResult, RagSample, Status

ProgressFn = Callable[[int], None]  # traces finished so far in this invocation


@dataclass
class BackevalOutcome:
    selected: int = 0
    already_done: int = 0
    scored: int = 0
    stopped_by_budget: bool = False
    spent_usd: float = 0.0  # this invocation
    statuses: Counter[str] = field(default_factory=Counter)

    @property
    def complete(self) -> bool:
        return not self.stopped_by_budget and self.already_done + self.scored >= self.selected


def _lease(trace: KeptTrace, judge_version: str) -> Any:
    # score_row takes the worker's lease for the trace's identity and sampling facts; there is no queue here.
    return Lease(
        tenant=trace.tenant,
        trace_id=trace.trace_id,
        judge_version=judge_version,
        feature=trace.feature,
        span_id="",
        sampling_reason=trace.sampling_reason,
        inclusion_probability=trace.inclusion_probability,
        attempts=1,
        token="",
        eval_run=trace.eval_run,
        release=trace.release,
    )


async def score_traces(
    traces: Sequence[KeptTrace],
    judge: Any,
    journal: RunJournal,
    *,
    run_name: str,
    metrics: Sequence[str],
    concurrency: int = 8,
    budget_usd: float | None = None,
    progress: ProgressFn | None = None,
) -> BackevalOutcome:
    """Score the traces the journal lacks (journal opened by the caller). Returns what happened."""
    if concurrency < 1:
        raise ValueError("concurrency must be ≥ 1")
    done_keys = set(journal.state.entries)
    todo = [t for t in traces if t.key not in done_keys]
    outcome = BackevalOutcome(selected=len(traces), already_done=len(traces) - len(todo))
    spent_before = journal.state.spent_usd
    stop = asyncio.Event()
    pending: Iterator[KeptTrace] = iter(todo)
    version = str(judge.version)

    async def one_metric(metric: str, sample: RagSample, feature: str) -> MetricResult:
        token = current_feature.set(feature)  # per-feature budgets are charged to it
        try:
            result: MetricResult = await judge.score(metric, sample)
            return result
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a judge bug is a judge error on this trace, not the end of the run
            return MetricResult.failed(metric, Status.LLM_ERROR, f"judge raised {exc!r}")
        finally:
            current_feature.reset(token)

    async def score(trace: KeptTrace) -> None:
        sample = RagSample(question=trace.question, answer=trace.answer, passages=list(trace.passages))
        results = await asyncio.gather(*(one_metric(m, sample, trace.feature) for m in metrics))
        cost = sum(r.usage.cost_usd or 0.0 for r in results)
        outcome.spent_usd += cost
        if any(r.status is Status.BUDGET_EXHAUSTED for r in results):
            # Not journalled: a resume with a larger budget scores it whole. What it cost is still counted.
            journal.record_discarded_spend(trace.key, cost)
            outcome.stopped_by_budget = True
            stop.set()
            return
        rows = [
            score_row(_lease(trace, version), r, judge_version=version, feature=trace.feature, run_name=run_name)
            for r in results
        ]
        journal.record_trace(
            key=trace.key,
            tenant=trace.tenant,
            trace_id=trace.trace_id,
            row_id=trace.eval_row_id,
            cost_usd=cost,
            rows=rows,
        )
        outcome.scored += 1
        outcome.statuses.update(str(r.status) for r in results)
        if progress is not None:
            progress(outcome.scored)
        if budget_usd is not None and spent_before + outcome.spent_usd >= budget_usd:
            outcome.stopped_by_budget = outcome.already_done + outcome.scored < outcome.selected
            stop.set()

    async def worker() -> None:
        while not stop.is_set():
            trace = next(pending, None)
            if trace is None:
                return
            await score(trace)

    workers = [asyncio.create_task(worker()) for _ in range(min(concurrency, len(todo)))]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        for task in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return outcome


def results_rows(
    entries: Sequence[JournalEntry], *, run_name: str, faithfulness_threshold: float
) -> list[dict[str, Any]]:
    """The gate's results rows from journal entries (rules in the module docstring)."""
    counts = Counter(e.row_id or e.trace_id for e in entries)
    out: list[dict[str, Any]] = []
    for entry in sorted(entries, key=lambda e: (e.row_id or e.trace_id, e.tenant, e.trace_id)):
        question_id = entry.row_id or entry.trace_id
        # Two traces of one eval row (an app that made two requests) stay apart, resampled together.
        row_id = question_id if counts[question_id] == 1 else f"{question_id}@{entry.tenant}/{entry.trace_id}"
        metrics: dict[str, float | None] = {}
        statuses: dict[str, str] = {}
        for row in entry.rows:
            metric = str(row["metric"])
            statuses[metric] = str(row["status"])
            value = row.get("value")
            metrics[metric] = float(value) if row["status"] == "ok" and value is not None else None
        checks: dict[str, bool] = {}
        faithfulness = metrics.get("faithfulness")
        if faithfulness is not None:
            checks["faithful"] = faithfulness >= faithfulness_threshold
        first = entry.rows[0] if entry.rows else {}
        out.append(
            {
                "row_id": row_id,
                "question_id": question_id,
                "metrics": metrics,
                "checks": checks,
                "statuses": statuses,
                "trace_id": entry.trace_id,
                "tenant": entry.tenant,
                "feature": first.get("feature", ""),
                "judge_version": first.get("judge_version", ""),
                "sampling_reason": first.get("sampling_reason", ""),
                "inclusion_probability": first.get("inclusion_probability"),
                "run": run_name,
            }
        )
    return out


def merge_with_eval(eval_rows: Sequence[dict[str, Any]], judged: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """An eval run's rows with the judge's metrics and checks added, paired by row id (``--merge-eval``): one file
    holding both the reference-based and the judged figures of each row, to gate against another such file.
    Judged rows without an eval row are kept as they are; the verdict is recomputed over the merged checks, and
    each merged row gets its triage ``diagnosis`` (`ragmon.evaluation.triage`: which surface failed)."""
    by_id = {str(row["row_id"]): row for row in judged}
    merged: list[dict[str, Any]] = []
    for row in eval_rows:
        extra = by_id.pop(str(row["row_id"]), None)
        if extra is None:
            merged.append(row)
            continue
        checks = {**row.get("checks", {}), **extra["checks"]}
        combined = {**row, "metrics": {**row.get("metrics", {}), **extra["metrics"]}, "checks": checks}
        combined["judge"] = {key: extra[key] for key in ("trace_id", "statuses", "judge_version", "run")}
        if checks:
            combined["passed"] = all(checks.values())
        triage = diagnose(triage_input(str(row["row_id"]), combined["metrics"]))
        combined["diagnosis"] = triage.diagnosis.value
        combined["diagnosis_reasons"] = list(triage.reasons)
        merged.append(combined)
    return merged + list(by_id.values())


def _labelled_recall(metrics: Mapping[str, Any]) -> float | None:
    """Recall of what reached the prompt against the labels: the rerank stage's R@K at the largest K measured,
    else the search stage's."""
    for stage in ("rerank", "search"):
        cut_offs = [(int(name.rsplit("@", 1)[1]), name) for name in metrics if name.startswith(f"{stage}.R@")]
        if cut_offs:
            value = metrics[max(cut_offs)[1]]
            return None if value is None else float(value)
    return None


def triage_input(row_id: str, metrics: Mapping[str, Any]) -> TriageInput:
    """The triage signals of a merged row: the judge's context recall when it measured one (it needs a reference
    answer), else the labelled recall; the judge's context precision, faithfulness and answer relevance."""
    recall = metrics.get("context_recall")
    return TriageInput(
        question_id=row_id,
        context_recall=float(recall) if recall is not None else _labelled_recall(metrics),
        context_precision=metrics.get("context_precision"),
        faithfulness=metrics.get("faithfulness"),
        answer_relevance=metrics.get("answer_relevance"),
    )
