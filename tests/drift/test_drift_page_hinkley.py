"""Page–Hinkley: documented delays, false-alarm rate, and a mean frozen while firing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from ragmon.drift import Level, PageHinkleyDetector, Transition
from ragmon.drift.detectors.page_hinkley import DOCUMENTED_DELAY_WINDOWS, DOCUMENTED_FALSE_ALARM_RATE


def make() -> PageHinkleyDetector:
    return PageHinkleyDetector(cooldown_s=0)


@pytest.mark.parametrize("shift", sorted(DOCUMENTED_DELAY_WINDOWS))
def test_fires_within_documented_delay(series_delays: Callable[..., Any], shift: float) -> None:
    run = series_delays(make, shift, trials=200, seed=12)
    assert run.missed == 0
    p95 = float(np.quantile(run.delays, 0.95))
    assert p95 <= DOCUMENTED_DELAY_WINDOWS[shift], f"{shift}σ: 95% within {p95} windows (median {run.median})"


def test_false_alarm_rate_on_stationary_stream(series_false_alarms: Callable[..., int]) -> None:
    windows = 20_000
    fires = series_false_alarms(make, windows=windows, seed=4048)
    assert fires <= windows * DOCUMENTED_FALSE_ALARM_RATE


def test_without_baseline_it_learns_mean_and_scale_from_the_stream() -> None:
    rng = np.random.default_rng(2)
    detector = PageHinkleyDetector(min_windows=50, cooldown_s=0)
    readings = [detector.update(float(v), 10, 60.0 * i) for i, v in enumerate(rng.normal(100, 5, 300))]
    assert readings[10].level is Level.INSUFFICIENT  # before min_windows
    assert not any(r.transition is Transition.FIRED for r in readings)
    fired_at = next(
        i
        for i, v in enumerate(rng.normal(120, 5, 50))  # a 4σ step
        if detector.update(float(v), 10, 60.0 * (300 + i)).transition is Transition.FIRED
    )
    assert fired_at < 5


def test_running_mean_is_frozen_while_firing() -> None:
    rng = np.random.default_rng(3)
    detector = make()
    detector.set_baseline(rng.normal(0, 1, 1440))
    for i in range(500):  # a fault that lasts 500 windows
        detector.update(float(rng.normal(3, 1)), 100, 60.0 * i)
    assert detector.firing, "the shifted level must not be learnt as normal while the alert is open"
    assert abs(detector.mean) < 0.1
