"""The fire/clear gate every detector shares, driven window by window with explicit times; the threshold detector."""

from __future__ import annotations

import pytest

from ragmon.drift import Gate, Level, ThresholdDetector, Transition

FIRE, CLEAR = 10.0, 4.0


def step(gate: Gate, statistic: float, t_s: float) -> tuple[Level, Transition | None, bool]:
    reading = gate.step(statistic, FIRE, CLEAR, t_s, {})
    return reading.level, reading.transition, reading.suppressed


def test_hysteresis_holds_the_alert_between_the_thresholds() -> None:
    gate = Gate()
    assert step(gate, 9.9, 60) == (Level.WATCH, None, False)
    assert step(gate, 10.0, 120) == (Level.ALERT, Transition.FIRED, False)
    # Falling under the fire threshold is not enough: 4 <= s < 10 keeps it open.
    for t in range(3):
        assert step(gate, 5.0, 180 + 60 * t) == (Level.WATCH, None, False)
        assert gate.firing
    assert step(gate, 3.9, 400) == (Level.OK, Transition.RESOLVED, False)
    assert not gate.firing


def test_consecutive_windows_to_fire_and_to_clear() -> None:
    gate = Gate(fire_after=3, clear_after=2)
    assert [step(gate, s, t)[1] for t, s in enumerate([11, 11, 0, 11, 11, 11])] == [None] * 5 + [Transition.FIRED]
    assert [step(gate, s, 10 + t)[1] for t, s in enumerate([0, 5, 0, 0])] == [None, None, None, Transition.RESOLVED]


def test_cooldown_suppresses_a_refire_until_it_has_passed() -> None:
    gate = Gate(cooldown_s=600)
    assert step(gate, 20, 0)[1] is Transition.FIRED
    assert step(gate, 0, 60)[1] is Transition.RESOLVED
    assert step(gate, 20, 120) == (Level.ALERT, None, True)  # 60 s after the resolve: suppressed, counted
    assert step(gate, 20, 659) == (Level.ALERT, None, True)
    assert step(gate, 20, 660) == (Level.ALERT, Transition.FIRED, False)  # exactly cooldown_s later


def test_hold_changes_nothing() -> None:
    gate = Gate(fire_after=2)
    step(gate, 20, 0)
    assert gate.hold().level is Level.INSUFFICIENT
    assert step(gate, 20, 120)[1] is Transition.FIRED  # the hold did not reset the consecutive count


def test_clear_above_fire_is_rejected() -> None:
    with pytest.raises(ValueError, match="clear threshold"):
        Gate().step(1.0, 1.0, 2.0, 0, {})


def test_threshold_detector_up_and_down() -> None:
    up = ThresholdDetector(fire=0.05, clear=0.01, direction="up", fire_after=2, clear_after=1, cooldown_s=0)
    assert up.update(0.3, 10, 60).transition is None
    fired = up.update(0.3, 10, 120)
    assert fired.transition is Transition.FIRED and fired.statistic == 0.3 and fired.fire_threshold == 0.05
    assert up.update(0.03, 10, 180).firing  # between the thresholds
    assert up.update(0.001, 10, 240).transition is Transition.RESOLVED

    down = ThresholdDetector(fire=0.9, clear=0.95, direction="down", fire_after=1, clear_after=1, cooldown_s=0)
    assert down.update(0.97, 10, 60).level is Level.OK
    assert down.update(0.85, 10, 120).transition is Transition.FIRED
    assert down.update(0.93, 10, 180).firing
    assert down.update(0.96, 10, 240).transition is Transition.RESOLVED
    assert down.update(0.1, 0.5, 300).level is Level.INSUFFICIENT  # below min_count


def test_threshold_rejects_clear_beyond_fire() -> None:
    with pytest.raises(ValueError, match="must not be beyond"):
        ThresholdDetector(fire=0.05, clear=0.1, direction="up")
