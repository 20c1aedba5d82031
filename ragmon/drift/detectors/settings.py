"""What a rule's `detector = {type = "...", ...}` may say, and how it becomes a detector: the settings every detector
shares (its gate), those the standardising ones share, and the registry of each detector's own settings class.

Each detector module states its settings class beside the detector (`CusumSettings` in `cusum.py`): its `type`
name, the `kind` of signal it reads (one value per window, or per-request samples of two windows), its parameters
with their defaults, and `build`. `DETECTOR_SETTINGS` lists them; rules validate a rule's detector by its type from
there (`ragmon.drift.rules`), so a detector is added in its module and one entry here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, get_args

from pydantic import BaseModel, ConfigDict, Field

from ragmon.drift.detectors.base import Direction, SampleDetector, SeriesDetector

if TYPE_CHECKING:
    from ragmon.drift.signals import SignalSpec


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DetectorSettings(Strict):
    type: str
    kind: ClassVar[str]  # "series" or "sample" (`ragmon.drift.signals.SignalKind`)
    cooldown_s: float = Field(default=600.0, ge=0)  # no re-fire this soon after a resolve (data time)
    fire_after: int = Field(default=1, ge=1)
    clear_after: int = Field(default=1, ge=1)

    def gate_options(self) -> dict[str, Any]:
        return {"cooldown_s": self.cooldown_s, "fire_after": self.fire_after, "clear_after": self.clear_after}

    def build(self, spec: SignalSpec) -> SeriesDetector | SampleDetector:
        """The detector these settings describe, for a rule on the signal `spec` (its defaults fill the gaps)."""
        raise NotImplementedError


class StandardisedSettings(DetectorSettings):
    """Detectors that standardise each window's value by a baseline (CUSUM, Page–Hinkley)."""

    direction: Direction | None = None  # None: the signal's bad direction
    z_clip: float = Field(default=4.0, gt=0)
    cap_factor: float = Field(default=2.0, ge=1)
    min_count: float = Field(default=1.0, ge=0)  # samples behind a window's value
    min_std: float | None = Field(default=None, ge=0)  # None: the signal's floor
    min_std_rel: float | None = Field(default=None, ge=0)

    def standard_options(self, spec: SignalSpec) -> dict[str, Any]:
        return {
            "direction": self.direction or spec.bad_direction,
            "z_clip": self.z_clip,
            "cap_factor": self.cap_factor,
            "min_count": self.min_count,
            "min_std": spec.min_std if self.min_std is None else self.min_std,
            "min_std_rel": spec.min_std_rel if self.min_std_rel is None else self.min_std_rel,
            **self.gate_options(),
        }


def by_type(settings: tuple[type[DetectorSettings], ...]) -> Mapping[str, type[DetectorSettings]]:
    """Each settings class under its `type` literal's value."""
    return {get_args(cls.model_fields["type"].annotation)[0]: cls for cls in settings}
