"""A plain static threshold on a per-window value, with hysteresis: for signals whose healthy level is known.

Embedding norms are the example: a unit-normalised embedding has |‖v‖ - 1| ≈ 0 on every deployment, so "mean
deviation ≥ 0.05 for 2 windows" needs no baseline (and also catches a deployment that was broken from its first
minute, which a baseline-relative detector would learn as normal). For "down" signals the value is negated so the
gate's "higher is worse" holds: fire when value ≤ fire, resolve when value > clear.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from ragmon.drift.detectors.base import Direction, Gate, Reading
from ragmon.drift.detectors.settings import DetectorSettings

if TYPE_CHECKING:
    from ragmon.drift.signals import SignalSpec


class ThresholdDetector:
    """Static fire/clear thresholds.

    Parameters:
        fire: fire at or beyond this value (above for "up", below for "down").
        clear: resolve once the value is back past this one (below for "up", above for "down").
        direction: "up" or "down".
        min_count: windows with fewer samples are skipped.
        fire_after: consecutive windows beyond `fire` before firing (default 2: one odd minute is not an alert).
        clear_after, cooldown_s: see `Gate`.
    """

    name = "threshold"

    def __init__(
        self,
        *,
        fire: float,
        clear: float,
        direction: Direction = "up",
        min_count: float = 1.0,
        cooldown_s: float = 600.0,
        fire_after: int = 2,
        clear_after: int = 2,
    ) -> None:
        if direction == "both":
            raise ValueError("a threshold watches one direction: 'up' or 'down'")
        sign = 1.0 if direction == "up" else -1.0
        if sign * clear > sign * fire:
            raise ValueError(f"threshold {direction}: clear {clear} must not be beyond fire {fire}")
        self.fire, self.clear, self.direction, self.sign = fire, clear, direction, sign
        self.min_count = min_count
        self.gate = Gate(cooldown_s=cooldown_s, fire_after=fire_after, clear_after=clear_after)

    @property
    def firing(self) -> bool:
        return self.gate.firing

    def set_baseline(self, values: Iterable[float], *, noise_floor: float = 0.0) -> None:
        """Static thresholds need no baseline."""

    def update(self, value: float, count: float, t_s: float) -> Reading:
        if count < self.min_count or not math.isfinite(value):
            return self.gate.hold({"value": value, "count": count})
        reading = self.gate.step(
            self.sign * value, self.sign * self.fire, self.sign * self.clear, t_s, {"value": value, "count": count}
        )
        # Report the value and thresholds in the signal's own sign, not the gate's.
        return Reading(
            reading.level,
            reading.firing,
            reading.transition,
            value,
            self.fire,
            self.clear,
            reading.suppressed,
            reading.evidence,
        )


class ThresholdSettings(DetectorSettings):
    type: Literal["threshold"]
    kind: ClassVar[str] = "series"
    fire: float
    clear: float
    direction: Literal["up", "down"] | None = None
    min_count: float = Field(default=1.0, ge=0)
    fire_after: int = Field(default=2, ge=1)
    clear_after: int = Field(default=2, ge=1)

    def build(self, spec: SignalSpec) -> ThresholdDetector:
        direction = self.direction or ("down" if spec.bad_direction == "down" else "up")
        return ThresholdDetector(
            fire=self.fire, clear=self.clear, direction=direction, min_count=self.min_count, **self.gate_options()
        )
