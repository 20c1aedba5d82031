"""What every detector returns, and the fire/clear gate (hysteresis, cooldown, consecutive windows) they share.

A detector turns data into one statistic per update where *higher is worse* (a CUSUM sum, a PSI, a KS distance) and
hands it to a `Gate`. The gate owns the alert state: it fires when the statistic reaches the fire threshold (for
`fire_after` updates in a row, and not within `cooldown_s` of the last resolve) and resolves only when it falls below
the lower clear threshold (for `clear_after` updates in a row). Two thresholds instead of one keep an alert from
flapping while the statistic hovers around the line.

Time is whatever the caller passes as `t_s` (the end of the window, in epoch seconds); detectors never read a clock,
so tests drive them window by window.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

Direction = Literal["up", "down", "both"]
FloatArray = npt.NDArray[np.float64]


class Level(Enum):
    INSUFFICIENT = "insufficient"  # too few samples (or no baseline yet): no decision, alert state unchanged
    OK = "ok"  # below the clear threshold
    WATCH = "watch"  # between the clear and the fire threshold
    ALERT = "alert"  # at or above the fire threshold


class Transition(Enum):
    FIRED = "fired"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class Reading:
    """One update's outcome. `evidence` holds the detector's figures (baseline vs current, p-value ...)."""

    level: Level
    firing: bool  # the alert state after this update
    transition: Transition | None = None
    statistic: float | None = None
    fire_threshold: float | None = None
    clear_threshold: float | None = None
    suppressed: bool = False  # at the fire threshold but held back by the cooldown
    evidence: Mapping[str, float] = field(default_factory=dict)


class Gate:
    """Hysteresis and cooldown over a statistic where higher is worse.

    Parameters:
        cooldown_s: after a resolve, the gate does not fire again for this long (data time).
        fire_after: consecutive updates at or above the fire threshold before firing.
        clear_after: consecutive updates below the clear threshold before resolving.
    """

    def __init__(self, *, cooldown_s: float = 0.0, fire_after: int = 1, clear_after: int = 1) -> None:
        if cooldown_s < 0 or fire_after < 1 or clear_after < 1:
            raise ValueError("cooldown_s must be >= 0, fire_after and clear_after >= 1")
        self.cooldown_s = cooldown_s
        self.fire_after = fire_after
        self.clear_after = clear_after
        self.firing = False
        self.fired_at_s: float | None = None
        self.resolved_at_s: float | None = None
        self._above = 0
        self._below = 0

    def step(
        self, statistic: float, fire_at: float, clear_at: float, t_s: float, evidence: Mapping[str, float]
    ) -> Reading:
        if clear_at > fire_at:
            raise ValueError(f"clear threshold {clear_at} above fire threshold {fire_at}")
        if statistic >= fire_at:
            level = Level.ALERT
        elif statistic >= clear_at:
            level = Level.WATCH
        else:
            level = Level.OK
        transition: Transition | None = None
        suppressed = False
        if not self.firing:
            self._above = self._above + 1 if level is Level.ALERT else 0
            if self._above >= self.fire_after:
                if self.resolved_at_s is not None and t_s - self.resolved_at_s < self.cooldown_s:
                    suppressed = True
                else:
                    self.firing, self.fired_at_s, self._above, self._below = True, t_s, 0, 0
                    transition = Transition.FIRED
        else:
            self._below = self._below + 1 if level is Level.OK else 0
            if self._below >= self.clear_after:
                self.firing, self.resolved_at_s, self._above, self._below = False, t_s, 0, 0
                transition = Transition.RESOLVED
        return Reading(level, self.firing, transition, statistic, fire_at, clear_at, suppressed, evidence)

    def hold(self, evidence: Mapping[str, float] | None = None) -> Reading:
        """No decision this update (too few samples): the alert state and the consecutive counts stay as they are."""
        return Reading(Level.INSUFFICIENT, self.firing, evidence=evidence or {})


@dataclass(frozen=True, slots=True)
class Baseline:
    """Mean and spread of the baseline windows a series detector standardises by."""

    mean: float
    std: float  # after the floors below; never 0
    raw_std: float
    windows: int


def baseline_of(
    values: Iterable[float], *, min_std: float, min_std_rel: float, noise_floor: float = 0.0
) -> Baseline | None:
    """Mean and std of the finite values; None when there are none.

    The std is widened by one standard error of its own estimate, × (1 + 1/√(2(n−1))): a short baseline that
    happens to be calm would otherwise make every later window look unusual (measured: a 60-window baseline 15% below
    the stream's true spread raised a false CUSUM alarm; the widening is 9% at 60 windows and 2% at a day of 1,440).
    It is then floored at `min_std`, at `min_std_rel * |mean|` and at `noise_floor` (the sampling noise one window's
    value is known to have, when the caller knows it): a baseline with no variation at all (an error rate of exactly
    0 for a day) would otherwise turn the first error into an infinite z-score.
    """
    array = np.asarray([v for v in values if math.isfinite(v)], dtype=np.float64)
    if array.size == 0:
        return None
    mean = float(array.mean())
    raw_std = float(array.std(ddof=1)) if array.size > 1 else 0.0
    widened = raw_std * (1.0 + 1.0 / math.sqrt(2.0 * (array.size - 1))) if array.size > 1 else 0.0
    std = max(widened, min_std, min_std_rel * abs(mean), noise_floor, 1e-12)
    return Baseline(mean, std, raw_std, int(array.size))


class SeriesDetector(Protocol):
    """Watches one value per window (p95 latency, an error rate, a weighted mean score)."""

    @property
    def firing(self) -> bool: ...

    def set_baseline(self, values: Iterable[float], *, noise_floor: float = 0.0) -> None:
        """`noise_floor`: a lower bound for the baseline std, when the sampling noise of a window is known."""
        ...

    def update(self, value: float, count: float, t_s: float) -> Reading: ...


class SampleDetector(Protocol):
    """Compares the distribution of per-request values in the current window with a baseline window's."""

    @property
    def firing(self) -> bool: ...

    def set_baseline(self, values: Iterable[float]) -> None: ...

    def update(self, current: Iterable[float], t_s: float) -> Reading: ...


def finite_array(values: Iterable[float]) -> FloatArray:
    array = np.fromiter(values, dtype=np.float64)
    return array[np.isfinite(array)]
