"""The regression gate: compare a candidate run with a baseline run and decide pass or regression.

Rules (the CLI's ``ragmon gate`` applies them; exit codes in `ragmon.evaluation.cli`):

- Rows are paired by ``row_id``. A metric's delta is ``mean(candidate) - mean(baseline)`` over the rows where both
  runs measured it, so a row a judge failed on in one run cannot move the mean. Rows present in only one run are
  counted in the report and not gated.
- **Every metric present in both runs is gated**, with the tolerance given for it, else the default tolerance
  (0.0 unless set). ``ignore`` lists metrics to report without gating. A metric regresses when it moves the wrong
  way by more than its tolerance (absolute, in the metric's units): ``delta < -tolerance``, or
  ``delta > tolerance`` for metrics declared lower-is-better (latency, cost). A metric the baseline measured but
  the candidate never did (all rows null or absent — a judge failing everywhere) regresses too, unless ignored.
  A metric new in the candidate is reported, not gated. A metric named in the options but found in neither run
  is an input error (a typo, most likely).
- The gate decides on the point delta; the bootstrap interval (questions resampled, seeded) is reported so a
  reviewer can tell a real drop from noise.
- **Newly failing rows** passed in the baseline and fail in the candidate; they are listed, not gated.
- A **protected** id (a row id or a question id) regresses when one of its rows passed in the baseline and, in
  the candidate, fails, lost its verdict or is missing. A protected id found in neither run is an input error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ragmon.evaluation.bootstrap import bootstrap_delta_ci
from ragmon.evaluation.errors import EvalInputError
from ragmon.evaluation.gate_runs import ResultRow

# Deltas are differences of float means: without slack, "-0.02 vs tolerance 0.02" fails on rounding.
_SLACK = 1e-12

MetricStatus = Literal["pass", "regression", "not gated", "missing in candidate", "missing in baseline"]


@dataclass(frozen=True)
class GateConfig:
    tolerances: Mapping[str, float] = field(default_factory=dict)
    default_tolerance: float = 0.0
    lower_is_better: frozenset[str] = frozenset()
    ignore: frozenset[str] = frozenset()
    protected: tuple[str, ...] = ()
    resamples: int = 2000
    confidence: float = 0.95
    seed: int = 0


@dataclass(frozen=True)
class MetricComparison:
    metric: str
    paired_rows: int
    baseline_mean: float | None
    candidate_mean: float | None
    delta: float | None
    ci_low: float | None
    ci_high: float | None
    tolerance: float | None
    lower_is_better: bool
    status: MetricStatus


@dataclass(frozen=True)
class RowChange:
    row_id: str
    question_id: str
    reason: str


@dataclass(frozen=True)
class GateResult:
    metrics: tuple[MetricComparison, ...]
    newly_failing: tuple[RowChange, ...]
    newly_passing: tuple[RowChange, ...]
    protected_regressions: tuple[RowChange, ...]
    paired_rows: int
    only_baseline: tuple[str, ...]
    only_candidate: tuple[str, ...]
    config: GateConfig

    @property
    def regressed_metrics(self) -> tuple[MetricComparison, ...]:
        return tuple(m for m in self.metrics if m.status in ("regression", "missing in candidate"))

    @property
    def passed(self) -> bool:
        return not self.regressed_metrics and not self.protected_regressions


def _metric_names(rows: Iterable[ResultRow]) -> set[str]:
    return {name for row in rows for name in row.metrics}


def _compare_metric(
    name: str,
    baseline: Mapping[str, ResultRow],
    candidate: Mapping[str, ResultRow],
    paired: list[str],
    config: GateConfig,
) -> MetricComparison:
    lower = name in config.lower_is_better
    gated = name not in config.ignore
    tolerance = config.tolerances.get(name, config.default_tolerance) if gated else None
    before, after, clusters = [], [], []
    for row_id in paired:
        b, c = baseline[row_id].metrics.get(name), candidate[row_id].metrics.get(name)
        if b is not None and c is not None:
            before.append(b)
            after.append(c)
            clusters.append(baseline[row_id].question_id)
    if not before:
        in_baseline = any(row.metrics.get(name) is not None for row in baseline.values())
        in_candidate = any(row.metrics.get(name) is not None for row in candidate.values())
        status: MetricStatus = "not gated"
        if in_baseline and not in_candidate and gated:
            # A judge that errs on every row yields only nulls; that must not pass as "nothing to compare".
            status = "missing in candidate"
        elif in_candidate and not in_baseline:
            status = "missing in baseline"
        return MetricComparison(name, 0, None, None, None, None, None, tolerance, lower, status)
    b_arr, c_arr = np.asarray(before), np.asarray(after)
    delta = float(np.mean(c_arr - b_arr))
    low, high = bootstrap_delta_ci(
        c_arr - b_arr,
        clusters,
        resamples=config.resamples,
        confidence=config.confidence,
        seed=config.seed,
        name=name,
    )
    if tolerance is None:
        status = "not gated"
    else:
        worse = delta > tolerance + _SLACK if lower else delta < -tolerance - _SLACK
        status = "regression" if worse else "pass"
    return MetricComparison(
        name, len(before), float(np.mean(b_arr)), float(np.mean(c_arr)), delta, low, high, tolerance, lower, status
    )


def _protected_regressions(
    protected: Iterable[str], baseline: Mapping[str, ResultRow], candidate: Mapping[str, ResultRow]
) -> list[RowChange]:
    regressions: list[RowChange] = []
    all_rows = list(baseline.values()) + list(candidate.values())
    for identifier in dict.fromkeys(protected):
        matching = dict.fromkeys(r.row_id for r in all_rows if identifier in (r.row_id, r.question_id))
        if not matching:
            raise EvalInputError(f"protected id {identifier!r} matches no row or question in either run")
        for row_id in matching:
            before, after = baseline.get(row_id), candidate.get(row_id)
            if before is None or before.passed is not True:
                continue
            if after is None:
                reason = "passed in baseline, missing from candidate"
            elif after.passed is None:
                reason = "passed in baseline, no verdict in candidate"
            elif after.passed is False:
                reason = "passed in baseline, fails in candidate"
            else:
                continue
            regressions.append(RowChange(row_id, before.question_id, reason))
    return regressions


def compare_runs(
    baseline: Mapping[str, ResultRow], candidate: Mapping[str, ResultRow], config: GateConfig | None = None
) -> GateResult:
    """Apply the gate's rules (module docstring) to two runs read by `ragmon.evaluation.gate_runs.read_results`."""
    config = config or GateConfig()
    if config.resamples < 1 or not 0.0 < config.confidence < 1.0:
        raise EvalInputError("resamples must be ≥ 1 and confidence in (0, 1)")
    for metric, tolerance in config.tolerances.items():
        if not math.isfinite(tolerance) or tolerance < 0:
            raise EvalInputError(f"tolerance for {metric!r} must be a finite number ≥ 0, got {tolerance}")
    if not math.isfinite(config.default_tolerance) or config.default_tolerance < 0:
        raise EvalInputError(f"default tolerance must be a finite number ≥ 0, got {config.default_tolerance}")
    baseline_metrics, candidate_metrics = _metric_names(baseline.values()), _metric_names(candidate.values())
    known = baseline_metrics | candidate_metrics
    for metric in [*config.tolerances, *config.lower_is_better, *config.ignore]:
        if metric not in known:
            raise EvalInputError(f"metric {metric!r} appears in neither run (known: {', '.join(sorted(known))})")
    paired = [row_id for row_id in baseline if row_id in candidate]
    names = sorted(known)
    metrics = tuple(_compare_metric(name, baseline, candidate, paired, config) for name in names)

    newly_failing = tuple(
        RowChange(row_id, candidate[row_id].question_id, "passed in baseline, fails in candidate")
        for row_id in paired
        if baseline[row_id].passed is True and candidate[row_id].passed is False
    )
    newly_passing = tuple(
        RowChange(row_id, candidate[row_id].question_id, "failed in baseline, passes in candidate")
        for row_id in paired
        if baseline[row_id].passed is False and candidate[row_id].passed is True
    )
    return GateResult(
        metrics=metrics,
        newly_failing=newly_failing,
        newly_passing=newly_passing,
        protected_regressions=tuple(_protected_regressions(config.protected, baseline, candidate)),
        paired_rows=len(paired),
        only_baseline=tuple(row_id for row_id in baseline if row_id not in candidate),
        only_candidate=tuple(row_id for row_id in candidate if row_id not in baseline),
        config=config,
    )
