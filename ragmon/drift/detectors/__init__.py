"""Drift detectors, one per module: pure functions of the data they are fed, no clock, no I/O.

Series detectors (`cusum`, `page_hinkley`, `threshold`) watch one value per window; sample detectors (`psi`, `ks`)
compare the distribution of per-request values in a current window with a baseline window's.
"""

from ragmon.drift.detectors.base import (
    Gate,
    Level,
    Reading,
    SampleDetector,
    SeriesDetector,
    Transition,
)
from ragmon.drift.detectors.cusum import CusumDetector
from ragmon.drift.detectors.ks import KsDetector, kolmogorov_sf, ks_p_value, ks_statistic
from ragmon.drift.detectors.page_hinkley import PageHinkleyDetector
from ragmon.drift.detectors.psi import PsiDetector
from ragmon.drift.detectors.threshold import ThresholdDetector

__all__ = [
    "CusumDetector",
    "Gate",
    "KsDetector",
    "Level",
    "PageHinkleyDetector",
    "PsiDetector",
    "Reading",
    "SampleDetector",
    "SeriesDetector",
    "ThresholdDetector",
    "Transition",
    "kolmogorov_sf",
    "ks_p_value",
    "ks_statistic",
]
