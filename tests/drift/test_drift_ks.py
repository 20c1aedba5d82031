"""Two-sample KS: the Kolmogorov series against tabulated values, the statistic, delays and false alarms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from ragmon.drift import KsDetector, Level, Transition
from ragmon.drift.detectors import kolmogorov_sf, ks_p_value, ks_statistic
from ragmon.drift.detectors.ks import DOCUMENTED_DELAY_WINDOWS, DOCUMENTED_FALSE_ALARM_RATE, critical_d

CURRENT_N, BASELINE_N = 100, 1000


def make() -> KsDetector:
    return KsDetector(cooldown_s=0)


@pytest.mark.parametrize(
    ("lam", "tail"),
    # The classic critical values of the Kolmogorov distribution: P(K > 1.358) = 0.05 and so on.
    [(1.2238, 0.10), (1.3581, 0.05), (1.6276, 0.01), (1.9495, 0.001)],
)
def test_kolmogorov_tail_matches_tabulated_critical_values(lam: float, tail: float) -> None:
    assert kolmogorov_sf(lam) == pytest.approx(tail, rel=2e-3)


def test_both_series_forms_agree_where_they_meet() -> None:
    # Below 1.18 the Jacobi form is used, above it the alternating series: the function must be continuous.
    assert kolmogorov_sf(1.1799999) == pytest.approx(kolmogorov_sf(1.1800001), abs=1e-6)
    assert kolmogorov_sf(0.0) == 1.0 and kolmogorov_sf(0.1) == pytest.approx(1.0)
    assert kolmogorov_sf(5.0) < 1e-20


def test_statistic_on_a_hand_example() -> None:
    a = np.array([1.0, 2.0, 3.0, 4.0])
    b = np.array([3.5, 4.5, 5.5, 6.5])
    # F_a reaches 3/4 at 3.0 while F_b is still 0 → D = 0.75.
    assert ks_statistic(a, b) == pytest.approx(0.75)
    assert ks_statistic(a, a) == 0.0


def test_p_value_is_calibrated_under_no_change() -> None:
    rng = np.random.default_rng(8)
    p = np.array([ks_p_value(ks_statistic(rng.normal(size=300), rng.normal(size=150)), 300, 150) for _ in range(3000)])
    assert abs(float(np.mean(p < 0.05)) - 0.05) < 0.015
    assert float(np.mean(p < 0.01)) < 0.02


def test_critical_d_inverts_the_p_value() -> None:
    d = critical_d(0.01, 500, 200)
    assert ks_p_value(d, 500, 200) == pytest.approx(0.01, rel=1e-6)


@pytest.mark.parametrize("shift", sorted(DOCUMENTED_DELAY_WINDOWS))
def test_fires_within_documented_delay(sample_delays: Callable[..., Any], shift: float) -> None:
    run = sample_delays(make, shift, current_n=CURRENT_N, baseline_n=BASELINE_N, trials=150, seed=22)
    assert run.missed == 0
    assert float(np.quantile(run.delays, 0.95)) <= DOCUMENTED_DELAY_WINDOWS[shift]


def test_false_alarm_rate_on_stationary_stream(sample_false_alarms: Callable[..., int]) -> None:
    windows = 10_000
    fires = sample_false_alarms(make, windows=windows, current_n=CURRENT_N, baseline_n=BASELINE_N, seed=32)
    assert fires <= windows * DOCUMENTED_FALSE_ALARM_RATE


def test_large_samples_need_a_meaningful_effect() -> None:
    # 50,000 values each and a 0.05σ shift: "significant" (p ≪ 1e-4) but D ≈ 0.02 < min_effect 0.1 — no alert.
    rng = np.random.default_rng(6)
    detector = KsDetector(cooldown_s=0)
    detector.set_baseline(rng.normal(0, 1, 50_000))
    reading = detector.update(rng.normal(0.05, 1, 50_000), 60)
    assert reading.evidence["p_value"] < 1e-4
    assert reading.level is not Level.ALERT and not reading.firing
    assert reading.fire_threshold == pytest.approx(0.1)


def test_resolves_when_the_distribution_returns() -> None:
    rng = np.random.default_rng(7)
    detector = make()
    detector.set_baseline(rng.normal(0, 1, BASELINE_N))
    assert detector.update(rng.normal(1, 1, 200), 60).transition is Transition.FIRED
    # Resolving needs p > 0.05 (D below the critical D at α = 0.05): most same-distribution windows, not all.
    transitions = [detector.update(rng.normal(0, 1, 200), 120.0 + 60 * i).transition for i in range(5)]
    assert Transition.RESOLVED in transitions
