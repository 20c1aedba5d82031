"""Two-sample Kolmogorov–Smirnov test: the largest gap between the baseline's and the current window's CDFs.

D = max_x |F_baseline(x) - F_current(x)|. Its asymptotic p-value uses the Kolmogorov distribution,
Q(λ) = 2 Σ_{j≥1} (-1)^{j-1} exp(-2 j² λ²), at λ = (√nₑ + 0.12 + 0.11/√nₑ) · D with nₑ = n·m / (n + m)
(Stephens' small-sample correction). For small λ that alternating series converges slowly, so below λ = 1.18 the
equivalent form 1 - (√(2π)/λ) Σ_{j≥1} exp(-(2j-1)² π² / (8 λ²)) is used instead. No scipy needed.

The detector fires when p < `alpha_fire` (10⁻⁴) *and* D ≥ `min_effect` (0.1): with tens of thousands of values
any difference becomes "significant", and an alert should mean a difference worth a look. It resolves when the p-value
rises above `alpha_clear` (0.05) or D falls below half of `min_effect`. Both rules are expressed as thresholds on D
(the critical D for a given α and sample sizes), so the alert record carries D and the D it was compared with.

Calibration: with independent samples of one distribution, P(p < α) measured 0.0527 / 0.0074 / 0.00095 for
α = 0.05 / 0.01 / 0.001 at n = 100, m = 200 (20,000 draws each). At the minimum sizes (100 current, 1,000
baseline, re-drawn every 60 windows) the detector fired 7 times in 50,000 stationary windows (1.4·10⁻⁴, against
α = 10⁻⁴: the asymptotic p-value is a little optimistic that far in the tail for n = 100; `python -m
ragmon.drift.calibrate`). Documented bound: 1 per 2,000 windows.
Delay (400 trials): a 1σ mean shift fires on the first whole window of shifted data; a 0.5σ shift on the first in
the median case, 95% within 5 windows (`tests/drift/test_drift_ks.py`).
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

DOCUMENTED_FALSE_ALARM_RATE = 1 / 2000  # per window, stationary, at the minimum sample sizes
DOCUMENTED_DELAY_WINDOWS = {0.5: 5, 1.0: 1}  # mean shift (std units) -> 95% of alarms within, minimum sizes


def kolmogorov_sf(lam: float) -> float:
    """P(K > λ) for the Kolmogorov distribution K (the limit law of √n · D)."""
    if lam <= 0.0:
        return 1.0
    if lam < 1.18:
        # Jacobi-theta form of the CDF; the terms fall like exp(-j²): 10 terms are ample.
        total = sum(math.exp(-((2 * j - 1) ** 2) * math.pi**2 / (8.0 * lam * lam)) for j in range(1, 11))
        return min(1.0, max(0.0, 1.0 - math.sqrt(2.0 * math.pi) / lam * total))
    total = 0.0
    for j in range(1, 101):
        term = math.exp(-2.0 * j * j * lam * lam)
        total += term if j % 2 else -term
        if term < 1e-16:
            break
    return min(1.0, max(0.0, 2.0 * total))


def ks_statistic(a: FloatArray, b: FloatArray) -> float:
    """D = max |F_a - F_b| over the pooled values (both samples non-empty)."""
    a_sorted, b_sorted = np.sort(a), np.sort(b)
    pooled = np.concatenate([a_sorted, b_sorted])
    cdf_a = np.searchsorted(a_sorted, pooled, side="right") / a_sorted.size
    cdf_b = np.searchsorted(b_sorted, pooled, side="right") / b_sorted.size
    return float(np.max(np.abs(cdf_a - cdf_b)))


def _root_effective_n(n: int, m: int) -> float:
    return math.sqrt(n * m / (n + m))


def ks_p_value(statistic: float, n: int, m: int) -> float:
    """Asymptotic two-sided p-value of D for sample sizes n and m."""
    root = _root_effective_n(n, m)
    return kolmogorov_sf((root + 0.12 + 0.11 / root) * statistic)


def kolmogorov_isf(alpha: float) -> float:
    """λ with P(K > λ) = α, by bisection (the sf is monotone)."""
    low, high = 0.0, 10.0
    for _ in range(80):
        mid = (low + high) / 2
        if kolmogorov_sf(mid) > alpha:
            low = mid
        else:
            high = mid
    return high


def critical_d(alpha: float, n: int, m: int) -> float:
    """The D at which the asymptotic p-value equals α for sample sizes n and m."""
    root = _root_effective_n(n, m)
    return kolmogorov_isf(alpha) / (root + 0.12 + 0.11 / root)


class KsDetector:
    """Two-sample KS between a baseline sample and each current sample.

    Parameters:
        alpha_fire: fire when the p-value is below this (and D ≥ min_effect).
        alpha_clear: resolve when the p-value is above this (or D < min_effect / 2).
        min_effect: the smallest D worth an alert, whatever the p-value.
        min_baseline, min_current: values needed for a decision.
        cooldown_s, fire_after, clear_after: see `Gate`.
    """

    name = "ks"

    def __init__(
        self,
        *,
        alpha_fire: float = 1e-4,
        alpha_clear: float = 0.05,
        min_effect: float = 0.1,
        min_baseline: int = 1000,
        min_current: int = 100,
        cooldown_s: float = 600.0,
        fire_after: int = 1,
        clear_after: int = 1,
    ) -> None:
        if not 0 < alpha_fire < alpha_clear < 1 or not 0 <= min_effect < 1:
            raise ValueError("ks needs 0 < alpha_fire < alpha_clear < 1 and 0 <= min_effect < 1")
        self.alpha_fire, self.alpha_clear, self.min_effect = alpha_fire, alpha_clear, min_effect
        self.lambda_fire, self.lambda_clear = kolmogorov_isf(alpha_fire), kolmogorov_isf(alpha_clear)
        self.min_baseline, self.min_current = min_baseline, min_current
        self.gate = Gate(cooldown_s=cooldown_s, fire_after=fire_after, clear_after=clear_after)
        self.baseline: FloatArray | None = None

    @property
    def firing(self) -> bool:
        return self.gate.firing

    def set_baseline(self, values: Iterable[float]) -> None:
        baseline = finite_array(values)
        self.baseline = baseline if baseline.size else None

    def update(self, current: Iterable[float], t_s: float) -> Reading:
        values = finite_array(current)
        base = self.baseline
        baseline_n = 0 if base is None else int(base.size)
        if base is None or baseline_n < self.min_baseline or values.size < self.min_current:
            return self.gate.hold({"baseline_n": float(baseline_n), "current_n": float(values.size)})
        statistic = ks_statistic(base, values)
        n, m = baseline_n, int(values.size)
        root = _root_effective_n(n, m)
        scale = root + 0.12 + 0.11 / root
        fire_at = max(self.lambda_fire / scale, self.min_effect)
        clear_at = max(self.lambda_clear / scale, self.min_effect / 2)
        evidence = {
            "ks_d": statistic,
            "p_value": ks_p_value(statistic, n, m),
            "baseline_n": float(n),
            "current_n": float(m),
            "baseline_mean": float(base.mean()),
            "current_mean": float(values.mean()),
            "baseline_median": float(np.median(base)),
            "current_median": float(np.median(values)),
        }
        return self.gate.step(statistic, fire_at, clear_at, t_s, evidence)


class KsSettings(DetectorSettings):
    type: Literal["ks"]
    kind: ClassVar[str] = "sample"
    alpha_fire: float = Field(default=1e-4, gt=0, lt=1)
    alpha_clear: float = Field(default=0.05, gt=0, lt=1)
    min_effect: float = Field(default=0.1, ge=0, lt=1)
    min_baseline: int = Field(default=1000, ge=1)
    min_current: int = Field(default=100, ge=1)

    def build(self, spec: SignalSpec) -> KsDetector:
        return KsDetector(
            alpha_fire=self.alpha_fire,
            alpha_clear=self.alpha_clear,
            min_effect=self.min_effect,
            min_baseline=self.min_baseline,
            min_current=self.min_current,
            **self.gate_options(),
        )
