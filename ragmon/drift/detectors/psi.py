"""Population stability index: how far the current window's distribution has moved from the baseline's.

PSI = Σ_i (q_i - p_i) · ln(q_i / p_i) over bins i, where p is the baseline share and q the current share of values
in each bin — a symmetrised Kullback–Leibler divergence. The bins are fixed when the baseline is set: the baseline's
deciles (fewer when values tie), with open outer bins, so every bin holds about a tenth of the baseline and the index
does not depend on the unit of the value. Empty bins would make ln(q/p) infinite, so shares are smoothed:
share = (count / n + ε) / (1 + bins · ε).

Thresholds (the credit-scoring convention): below 0.1 stable, 0.1–0.25 worth watching, 0.25 and above a real shift.
The detector fires at `alert` (0.25) and resolves below `watch` (0.1).

Sampling noise: for two samples of the same distribution, PSI ≈ (1/n + 1/m) · χ²(bins - 1). The baseline term is
shared by every window judged against that baseline, so a small unlucky baseline raises false alarms for an hour at
a time: measured with a 500-value baseline, 0–7 alarms per 10,000 windows; with the default minimum of 2,000
(a day of retrieval spans for most scopes) and 200 current values, 0 in 50,000 windows (baseline re-drawn every 60;
`python -m ragmon.drift.calibrate`).
Documented bound: 1 per 10,000 windows.

Delay, on whole windows of shifted data (200 values against 2,000; 400 trials): a 1σ mean shift fires on the first
window; a 0.5σ shift on the first in the median case, 95% within 3 windows (`tests/drift/test_drift_psi.py`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
from pydantic import Field

from ragmon.drift.detectors.base import FloatArray, Gate, Reading, finite_array
from ragmon.drift.detectors.settings import DetectorSettings

if TYPE_CHECKING:
    from ragmon.drift.signals import SignalSpec

DOCUMENTED_FALSE_ALARM_RATE = 1 / 10_000  # per window, stationary, at the minimum sample sizes
DOCUMENTED_DELAY_WINDOWS = {0.5: 3, 1.0: 1}  # mean shift (std units) -> 95% of alarms within, minimum sizes
WATCH = 0.1
ALERT = 0.25


class PsiDetector:
    """PSI between a baseline sample and each current sample.

    Parameters:
        bins: number of quantile bins taken from the baseline.
        epsilon: additive smoothing of the bin shares.
        watch: resolve below this PSI (and report "watch" between it and `alert`).
        alert: fire at this PSI.
        min_baseline: baseline values needed before any decision.
        min_current: current values needed for a decision; fewer → no decision that window.
        cooldown_s, fire_after, clear_after: see `Gate`.
    """

    name = "psi"

    def __init__(
        self,
        *,
        bins: int = 10,
        epsilon: float = 1e-4,
        watch: float = WATCH,
        alert: float = ALERT,
        min_baseline: int = 2000,
        min_current: int = 200,
        cooldown_s: float = 600.0,
        fire_after: int = 1,
        clear_after: int = 1,
    ) -> None:
        if bins < 2 or epsilon <= 0 or not 0 <= watch < alert:
            raise ValueError("psi needs bins >= 2, epsilon > 0 and 0 <= watch < alert")
        self.bins, self.epsilon, self.watch, self.alert = bins, epsilon, watch, alert
        self.min_baseline, self.min_current = min_baseline, min_current
        self.gate = Gate(cooldown_s=cooldown_s, fire_after=fire_after, clear_after=clear_after)
        self.edges: FloatArray | None = None
        self.baseline_shares: FloatArray | None = None
        self.baseline_n = 0
        self.baseline_mean = math.nan
        self.baseline_median = math.nan

    @property
    def firing(self) -> bool:
        return self.gate.firing

    def set_baseline(self, values: Iterable[float]) -> None:
        baseline = finite_array(values)
        self.baseline_n = int(baseline.size)
        if baseline.size == 0:
            self.edges = self.baseline_shares = None
            return
        interior = np.quantile(baseline, np.arange(1, self.bins) / self.bins)
        self.edges = np.unique(interior)  # ties (a score that is often exactly 1.0) merge bins
        self.baseline_shares = self._shares(baseline)
        self.baseline_mean = float(baseline.mean())
        self.baseline_median = float(np.median(baseline))

    def _shares(self, values: FloatArray) -> FloatArray:
        assert self.edges is not None
        # side="right": a value equal to an edge goes to the bin above it, the same way for baseline and current.
        counts = np.bincount(np.searchsorted(self.edges, values, side="right"), minlength=self.edges.size + 1)
        shares: FloatArray = (counts / values.size + self.epsilon) / (1.0 + counts.size * self.epsilon)
        return shares

    def update(self, current: Iterable[float], t_s: float) -> Reading:
        values = finite_array(current)
        if self.baseline_shares is None or self.baseline_n < self.min_baseline or values.size < self.min_current:
            return self.gate.hold({"baseline_n": float(self.baseline_n), "current_n": float(values.size)})
        shares = self._shares(values)
        psi = float(np.sum((shares - self.baseline_shares) * np.log(shares / self.baseline_shares)))
        evidence = {
            "psi": psi,
            "bins": float(shares.size),
            "baseline_n": float(self.baseline_n),
            "current_n": float(values.size),
            "baseline_mean": self.baseline_mean,
            "current_mean": float(values.mean()),
            "baseline_median": self.baseline_median,
            "current_median": float(np.median(values)),
        }
        return self.gate.step(psi, self.alert, self.watch, t_s, evidence)


class PsiSettings(DetectorSettings):
    type: Literal["psi"]
    kind: ClassVar[str] = "sample"
    bins: int = Field(default=10, ge=2, le=100)
    epsilon: float = Field(default=1e-4, gt=0)
    watch: float = Field(default=0.1, ge=0)
    alert: float = Field(default=0.25, gt=0)
    min_baseline: int = Field(default=2000, ge=1)
    min_current: int = Field(default=200, ge=1)

    def build(self, spec: SignalSpec) -> PsiDetector:
        return PsiDetector(
            bins=self.bins,
            epsilon=self.epsilon,
            watch=self.watch,
            alert=self.alert,
            min_baseline=self.min_baseline,
            min_current=self.min_current,
            **self.gate_options(),
        )
