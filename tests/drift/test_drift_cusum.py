"""CUSUM: documented detection delays on injected steps, false-alarm rate on a long stationary stream, hysteresis."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from ragmon.drift import CusumDetector, Level, Transition
from ragmon.drift.detectors.cusum import DOCUMENTED_DELAY_WINDOWS, DOCUMENTED_FALSE_ALARM_RATE


def make() -> CusumDetector:
    return CusumDetector(cooldown_s=0)


@pytest.mark.parametrize("shift", sorted(DOCUMENTED_DELAY_WINDOWS))
def test_fires_within_documented_delay(series_delays: Callable[..., Any], shift: float) -> None:
    run = series_delays(make, shift, trials=200, seed=11)
    assert run.missed == 0  # every trial fired within the 200 shifted windows
    p95 = float(np.quantile(run.delays, 0.95))
    assert p95 <= DOCUMENTED_DELAY_WINDOWS[shift], f"{shift}σ: 95% within {p95} windows (median {run.median})"


def test_huge_step_fires_on_the_second_or_third_window(series_delays: Callable[..., Any]) -> None:
    # z is clipped at 4: 3.5 per window, so one wild window cannot reach h = 8 from a zero sum; two can only when
    # noise had already left the sum above 1.
    run = series_delays(make, 50.0, trials=50, seed=3)
    assert set(run.delays) <= {2, 3}
    assert 3 in run.delays


def test_false_alarm_rate_on_stationary_stream(series_false_alarms: Callable[..., int]) -> None:
    windows = 20_000
    fires = series_false_alarms(make, windows=windows, seed=2024)
    assert fires <= windows * DOCUMENTED_FALSE_ALARM_RATE


def test_downward_and_two_sided() -> None:
    rng = np.random.default_rng(5)
    down = CusumDetector(direction="down", cooldown_s=0)
    both = CusumDetector(direction="both", cooldown_s=0)
    up = CusumDetector(direction="up", cooldown_s=0)
    for detector in (down, both, up):
        detector.set_baseline(rng.normal(10.0, 2.0, 600))
    values = rng.normal(10.0 - 2 * 2.0, 2.0, 30)  # a 2σ drop
    fired = {name: False for name in ("down", "both", "up")}
    for i, value in enumerate(values):
        for name, detector in (("down", down), ("both", both), ("up", up)):
            if detector.update(float(value), 50, 60.0 * i).transition is Transition.FIRED:
                fired[name] = True
    assert fired == {"down": True, "both": True, "up": False}


def test_single_wild_window_does_not_fire() -> None:
    detector = make()
    detector.set_baseline(np.random.default_rng(1).normal(0, 1, 600))
    assert detector.update(1e6, 100, 60).level is not Level.ALERT
    assert not detector.firing


def test_resolves_within_bound_after_the_mean_returns() -> None:
    rng = np.random.default_rng(9)
    detector = make()
    detector.set_baseline(rng.normal(0, 1, 1440))
    for i in range(300):  # a long fault drives the sum to its cap
        detector.update(float(rng.normal(3, 1)), 100, 60.0 * i)
    assert detector.firing
    assert detector.upper == pytest.approx(2 * detector.h)
    for j in range(60):
        reading = detector.update(float(rng.normal(0, 1)), 100, 60.0 * (300 + j))
        if reading.transition is Transition.RESOLVED:
            break
    else:
        pytest.fail("did not resolve within 60 windows of recovery")
    # (cap - clear_h) / k = (16 - 2) / 0.5 = 28 windows on average; the noise allows some slack.
    assert j + 1 <= 45


def test_no_decision_without_baseline_or_on_thin_windows() -> None:
    detector = CusumDetector(min_count=20, min_baseline_windows=30)
    assert detector.update(5.0, 100, 60).level is Level.INSUFFICIENT  # no baseline yet
    detector.set_baseline([1.0] * 10)
    assert detector.update(5.0, 100, 60).level is Level.INSUFFICIENT  # baseline too short
    detector.set_baseline(np.random.default_rng(0).normal(1.0, 0.1, 100))
    assert detector.update(5.0, 3, 60).level is Level.INSUFFICIENT  # 3 requests: too thin
    assert detector.update(5.0, 30, 60).level is not Level.INSUFFICIENT


def test_std_floor_makes_a_constant_baseline_usable() -> None:
    # A day of error rate exactly 0: without a floor the first error would be an infinite z-score.
    detector = CusumDetector(min_std=0.01)
    detector.set_baseline([0.0] * 1440)
    reading = detector.update(0.005, 100, 60)
    assert reading.evidence["z"] == pytest.approx(0.5)


def test_rejects_inconsistent_parameters() -> None:
    with pytest.raises(ValueError, match="clear_h"):
        CusumDetector(h=4, clear_h=5)
