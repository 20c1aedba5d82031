"""``ragmon eval run``: drive an app over a dataset with tracing on, score every row, write a results file.

Each row runs inside `run_tracing.tagging_row`, so every span the app emits carries ``ragmon.eval.run`` and
``ragmon.eval.row_id`` (the run also as a resource attribute; `run_tracing` says how it reaches third-party spans) —
the agent keeps the run's traffic out of production views by it — and goes wherever the run exports: the agent at
``--endpoint`` (or the configured ``RAGMON_EXPORT__ENDPOINT``), an embedded agent on ``--data-dir`` that stores them
before the command returns, or nowhere (``--no-export``; tests pass an OpenTelemetry exporter). The same spans are
kept in memory and scored per row (`ragmon.evaluation.row_metrics`). Content capture is on for the run (answers,
passages and tool arguments are what offline evaluation is about), so keep datasets free of secrets as you would
test fixtures.

The results file is the gate's format (`ragmon.evaluation.gate_runs`), one row per dataset row, written
atomically when the run ends; ``ragmon gate`` compares two of them, or one with a back-evaluation run.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import ragmon
from ragmon import attributes as attr
from ragmon.evaluation.app_entry import AppFn, to_app_result
from ragmon.evaluation.dataset import DatasetRow
from ragmon.evaluation.retrieval import DEFAULT_KS
from ragmon.evaluation.row_metrics import AppResult, RowResult, score_row
from ragmon.evaluation.run_tracing import RowSpanCollector, RowTagger, tag_global_provider, tagging_row

ProgressFn = Callable[[int, int], None]  # (rows done, rows in all)


@dataclass
class RunSummary:
    name: str
    rows: int = 0
    passed: int = 0
    app_errors: int = 0
    means: dict[str, float] = field(default_factory=dict)
    measured: dict[str, int] = field(default_factory=dict)  # rows that measured each metric

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rows": self.rows,
            "passed": self.passed,
            "app_errors": self.app_errors,
            "means": self.means,
            "measured": self.measured,
        }


def summarise(name: str, results: Sequence[RowResult]) -> RunSummary:
    """Means over the rows that measured each metric (nulls left out, as the gate does)."""
    summary = RunSummary(name=name, rows=len(results))
    totals: dict[str, float] = {}
    for result in results:
        summary.passed += result.passed
        summary.app_errors += not result.checks.get("app_error", True)
        for metric, value in result.metrics.items():
            if value is None or math.isnan(value):
                continue
            totals[metric] = totals.get(metric, 0.0) + value
            summary.measured[metric] = summary.measured.get(metric, 0) + 1
    summary.means = {metric: totals[metric] / summary.measured[metric] for metric in sorted(totals)}
    return summary


def run_rows(
    rows: Iterable[DatasetRow],
    app: AppFn,
    collector: RowSpanCollector,
    *,
    run_name: str,
    dataset_name: str = "",
    ks: Sequence[int] = DEFAULT_KS,
    progress: ProgressFn | None = None,
) -> list[RowResult]:
    """Call the app on each row inside the row's tagging context and score it. Needs ragmon configured with a
    provider that has `RowTagger` and ``collector`` (see `traced_run`)."""
    chosen = list(rows)
    results: list[RowResult] = []
    for done, row in enumerate(chosen, start=1):
        with tagging_row(run_name, row.id, dataset_name):
            try:
                outcome = to_app_result(app(row))
            except Exception as exc:  # one broken row must not end the run; it fails, with the reason
                outcome = AppResult(error=f"{type(exc).__name__}: {exc}")
        results.append(score_row(row, outcome, collector.take(row.id), ks=ks))
        if progress is not None:
            progress(done, len(chosen))
    return results


def traced_run(
    rows: Sequence[DatasetRow],
    app: AppFn,
    *,
    run_name: str,
    dataset_name: str = "",
    ks: Sequence[int] = DEFAULT_KS,
    endpoint: str | None = None,
    export: bool = True,
    span_exporter: Any = None,
    service_name: str = "ragmon-eval",
    progress: ProgressFn | None = None,
    flush_timeout_s: float = 30.0,
) -> list[RowResult]:
    """Configure ragmon for the run (own TracerProvider with the tagger and collector, content capture on),
    run the rows, flush what was exported, and leave ragmon unconfigured again. The run's name is a resource
    attribute of that provider, and the app's global provider (third-party instrumentation) gets the tagger too:
    how the marker reaches every span is in `run_tracing`'s docstring."""
    resource = Resource.create({"service.name": service_name, attr.RAGMON_EVAL_RUN: run_name})
    provider = TracerProvider(resource=resource)
    collector = RowSpanCollector()
    provider.add_span_processor(RowTagger())
    tag_global_provider()
    provider.add_span_processor(collector)
    ragmon.configure(
        service_name=service_name,
        tracer_provider=provider,
        capture_content=True,
        endpoint=endpoint,
        export=export if span_exporter is None else None,
        span_exporter=span_exporter,
    )
    try:
        return run_rows(rows, app, collector, run_name=run_name, dataset_name=dataset_name, ks=ks, progress=progress)
    finally:
        ragmon.force_flush(flush_timeout_s)
        ragmon.shutdown(flush_timeout_s)
        provider.shutdown()


def write_results(path: str | Path, results: Iterable[RowResult], *, run_name: str) -> Path:
    """Write the results file atomically (a reader never sees half a run)."""
    return write_json_lines(path, ({**result.to_json(), "run": run_name} for result in results))


def write_json_lines(path: str | Path, records: Iterable[dict[str, Any]]) -> Path:
    """One JSON object per line, written to a temporary file and renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            for record in records:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
