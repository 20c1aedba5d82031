"""PSI: the index itself on hand-made data, documented delays, false alarms on 10,000 stationary windows."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from ragmon.drift import Level, PsiDetector, Transition
from ragmon.drift.detectors.psi import DOCUMENTED_DELAY_WINDOWS, DOCUMENTED_FALSE_ALARM_RATE

CURRENT_N, BASELINE_N = 200, 2000  # the defaults' minimum sizes: the noisiest case the detector decides on


def make() -> PsiDetector:
    return PsiDetector(cooldown_s=0)


def test_index_matches_the_formula_on_hand_made_bins() -> None:
    detector = PsiDetector(bins=2, epsilon=1e-9, min_baseline=4, min_current=4, alert=10, watch=5)
    detector.set_baseline([1.0, 2.0, 3.0, 4.0])  # median edge 2.5: half the baseline on each side
    reading = detector.update([1.0, 1.0, 1.0, 4.0], 60)  # current: 3/4 below, 1/4 above
    expected = (0.75 - 0.5) * math.log(0.75 / 0.5) + (0.25 - 0.5) * math.log(0.25 / 0.5)
    assert reading.statistic == pytest.approx(expected, rel=1e-6)


def test_empty_bins_stay_finite_thanks_to_smoothing() -> None:
    detector = PsiDetector(min_baseline=10, min_current=10)
    detector.set_baseline(np.linspace(0, 1, 1000))
    reading = detector.update(np.full(300, 5.0), 60)  # everything in the top bin
    assert reading.statistic is not None and math.isfinite(reading.statistic)
    assert reading.level is Level.ALERT


def test_tied_baseline_values_merge_bins() -> None:
    detector = PsiDetector(min_baseline=10, min_current=10)
    detector.set_baseline([1.0] * 700 + list(np.linspace(0.5, 0.99, 300)))  # 70% exactly 1.0
    assert detector.edges is not None and detector.edges.size < 9
    assert detector.update([1.0] * 70 + list(np.linspace(0.5, 0.99, 30)), 60).level is Level.OK


@pytest.mark.parametrize("shift", sorted(DOCUMENTED_DELAY_WINDOWS))
def test_fires_within_documented_delay(sample_delays: Callable[..., Any], shift: float) -> None:
    run = sample_delays(make, shift, current_n=CURRENT_N, baseline_n=BASELINE_N, trials=150, seed=21)
    assert run.missed == 0 and run.early == 0
    assert float(np.quantile(run.delays, 0.95)) <= DOCUMENTED_DELAY_WINDOWS[shift]


def test_false_alarm_rate_on_stationary_stream(sample_false_alarms: Callable[..., int]) -> None:
    windows = 10_000
    fires = sample_false_alarms(make, windows=windows, current_n=CURRENT_N, baseline_n=BASELINE_N, seed=31)
    assert fires <= windows * DOCUMENTED_FALSE_ALARM_RATE


def test_hysteresis_between_watch_and_alert() -> None:
    rng = np.random.default_rng(4)
    detector = make()
    detector.set_baseline(rng.normal(0, 1, BASELINE_N))
    assert detector.update(rng.normal(1.5, 1, 400), 60).transition is Transition.FIRED
    # A smaller shift that sits between watch (0.1) and alert (0.25) keeps it open ...
    held = detector.update(rng.normal(0.4, 1, 4000), 120)
    assert held.level is Level.WATCH and held.firing and held.transition is None
    # ... and only a return below 0.1 resolves it.
    assert detector.update(rng.normal(0, 1, 400), 180).transition is Transition.RESOLVED


def test_no_decision_on_small_samples() -> None:
    detector = make()
    detector.set_baseline(np.zeros(100))
    assert detector.update(np.ones(1000), 60).level is Level.INSUFFICIENT  # baseline below 2,000
    detector.set_baseline(np.random.default_rng(0).normal(size=BASELINE_N))
    assert detector.update(np.ones(50), 60).level is Level.INSUFFICIENT  # current below 200
