"""Drift detection and alerts: detectors, signals, rules, the evaluator and its channels.

    config = AlertsConfig.model_validate(settings.agent.alerts)      # fail fast at start-up
    dispatcher = build_dispatcher(config)
    evaluator = AlertEvaluator(config, source, sinks=[dispatcher, store_writer])
    evaluator.evaluate()                                              # every config.interval_s

`source` implements `SignalSource` (see `signals.py` for what each signal means): `StoreSignalSource` reads the
store (`ragmon serve` runs it in `ragmon/agent/alerting.py`).

Names are loaded on first use (PEP 562), so `ragmon --help` can register `ragmon alerts` (drift/cli.py, standard
library only) without importing numpy or httpx.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragmon.drift.canary import CanaryAnalysis
    from ragmon.drift.canary_config import CanaryConfig
    from ragmon.drift.channels import (
        Channel,
        Delivery,
        Dispatcher,
        LogChannel,
        WebhookChannel,
        build_channels,
        build_dispatcher,
    )
    from ragmon.drift.detectors import (
        CusumDetector,
        Gate,
        KsDetector,
        Level,
        PageHinkleyDetector,
        PsiDetector,
        Reading,
        ThresholdDetector,
        Transition,
    )
    from ragmon.drift.evaluator import AlertEvaluator, AlertSink, EvaluatorStats
    from ragmon.drift.record import ALERT_EXTRA_COLUMNS, AlertRecord
    from ragmon.drift.rules import AlertsConfig, RuleConfig
    from ragmon.drift.signals import (
        SIGNALS,
        Sample,
        SampleQuery,
        ScopeKey,
        SeriesQuery,
        SignalSource,
        WindowPoint,
    )
    from ragmon.drift.store_source import StoreSignalSource
    from ragmon.drift.where import Locator

_EXPORTS: dict[str, str] = {
    "ALERT_EXTRA_COLUMNS": "ragmon.drift.record",
    "AlertEvaluator": "ragmon.drift.evaluator",
    "AlertRecord": "ragmon.drift.record",
    "AlertSink": "ragmon.drift.evaluator",
    "AlertsConfig": "ragmon.drift.rules",
    "CanaryAnalysis": "ragmon.drift.canary",
    "CanaryConfig": "ragmon.drift.canary_config",
    "Channel": "ragmon.drift.channels",
    "CusumDetector": "ragmon.drift.detectors",
    "Delivery": "ragmon.drift.channels",
    "Dispatcher": "ragmon.drift.channels",
    "EvaluatorStats": "ragmon.drift.evaluator",
    "Gate": "ragmon.drift.detectors",
    "KsDetector": "ragmon.drift.detectors",
    "Level": "ragmon.drift.detectors",
    "Locator": "ragmon.drift.where",
    "LogChannel": "ragmon.drift.channels",
    "PageHinkleyDetector": "ragmon.drift.detectors",
    "PsiDetector": "ragmon.drift.detectors",
    "Reading": "ragmon.drift.detectors",
    "RuleConfig": "ragmon.drift.rules",
    "SIGNALS": "ragmon.drift.signals",
    "Sample": "ragmon.drift.signals",
    "SampleQuery": "ragmon.drift.signals",
    "ScopeKey": "ragmon.drift.signals",
    "SeriesQuery": "ragmon.drift.signals",
    "SignalSource": "ragmon.drift.signals",
    "StoreSignalSource": "ragmon.drift.store_source",
    "ThresholdDetector": "ragmon.drift.detectors",
    "Transition": "ragmon.drift.detectors",
    "WebhookChannel": "ragmon.drift.channels",
    "WindowPoint": "ragmon.drift.signals",
    "build_channels": "ragmon.drift.channels",
    "build_dispatcher": "ragmon.drift.channels",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # next time, a plain module attribute
    return value


__all__ = [
    "ALERT_EXTRA_COLUMNS",
    "SIGNALS",
    "AlertEvaluator",
    "AlertRecord",
    "AlertSink",
    "AlertsConfig",
    "CanaryAnalysis",
    "CanaryConfig",
    "Channel",
    "CusumDetector",
    "Delivery",
    "Dispatcher",
    "EvaluatorStats",
    "Gate",
    "KsDetector",
    "Level",
    "Locator",
    "LogChannel",
    "PageHinkleyDetector",
    "PsiDetector",
    "Reading",
    "RuleConfig",
    "Sample",
    "SampleQuery",
    "ScopeKey",
    "SeriesQuery",
    "SignalSource",
    "StoreSignalSource",
    "ThresholdDetector",
    "Transition",
    "WebhookChannel",
    "WindowPoint",
    "build_channels",
    "build_dispatcher",
]
