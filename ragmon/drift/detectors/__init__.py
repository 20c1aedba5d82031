"""Drift detectors, one per module: pure functions of the data they are fed, no clock, no I/O.

Series detectors (`cusum`, `page_hinkley`, `threshold`) watch one value per window; sample detectors (`psi`, `ks`)
compare the distribution of per-request values in a current window with a baseline window's. Each module states its
detector's settings too (what a rule's `detector = {...}` may say, and how it becomes the detector); `DETECTORS` lists
them by type: a new detector is its module and one entry there.
"""

from ragmon.drift.detectors.base import (
    Gate,
    Level,
    Reading,
    SampleDetector,
    SeriesDetector,
    Transition,
)
from ragmon.drift.detectors.cusum import CusumDetector, CusumSettings
from ragmon.drift.detectors.ks import KsDetector, KsSettings, kolmogorov_sf, ks_p_value, ks_statistic
from ragmon.drift.detectors.page_hinkley import PageHinkleyDetector, PageHinkleySettings
from ragmon.drift.detectors.psi import PsiDetector, PsiSettings
from ragmon.drift.detectors.settings import DetectorSettings, Strict, by_type
from ragmon.drift.detectors.threshold import ThresholdDetector, ThresholdSettings

# Every detector's settings, in the order error messages list them.
DETECTOR_SETTINGS = (CusumSettings, PageHinkleySettings, ThresholdSettings, PsiSettings, KsSettings)
DETECTORS = by_type(DETECTOR_SETTINGS)

__all__ = [
    "DETECTORS",
    "DETECTOR_SETTINGS",
    "CusumDetector",
    "DetectorSettings",
    "Gate",
    "KsDetector",
    "Level",
    "PageHinkleyDetector",
    "PsiDetector",
    "Reading",
    "SampleDetector",
    "SeriesDetector",
    "Strict",
    "ThresholdDetector",
    "Transition",
    "kolmogorov_sf",
    "ks_p_value",
    "ks_statistic",
]
