"""Drift detection and alerts: detectors, signals, rules, the evaluator and its channels.

    config = AlertsConfig.model_validate(settings.agent.alerts)      # fail fast at start-up
    dispatcher = build_dispatcher(config)
    evaluator = AlertEvaluator(config, source, sinks=[dispatcher, store_writer])
    evaluator.evaluate()                                              # every config.interval_s

`source` implements `SignalSource` (see `signals.py` for what each signal means): `StoreSignalSource` reads the
store (`ragmon serve` runs it in `ragmon/agent/alerting.py`); `InMemorySignalSource` is the reference implementation
used by the tests.

Names are loaded on first use (PEP 562), so `ragmon --help` can register `ragmon alerts` (drift/cli.py, standard
library only) without importing numpy or httpx.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragmon.agent.drift.channels import (
        Channel,
        Delivery,
        Dispatcher,
        LogChannel,
        WebhookChannel,
        build_channels,
        build_dispatcher,
    )
    from ragmon.agent.drift.detectors import (
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
    from ragmon.agent.drift.evaluator import AlertEvaluator, AlertSink, EvaluatorStats
    from ragmon.agent.drift.memory_source import InMemorySignalSource, JudgedScore, Observation
    from ragmon.agent.drift.record import ALERT_EXTRA_COLUMNS, AlertRecord
    from ragmon.agent.drift.rules import AlertsConfig, RuleConfig
    from ragmon.agent.drift.signals import (
        SIGNALS,
        Sample,
        SampleQuery,
        ScopeKey,
        SeriesQuery,
        SignalSource,
        WindowPoint,
    )
    from ragmon.agent.drift.store_source import StoreSignalSource

_EXPORTS: dict[str, str] = {
    "ALERT_EXTRA_COLUMNS": "ragmon.agent.drift.record",
    "AlertEvaluator": "ragmon.agent.drift.evaluator",
    "AlertRecord": "ragmon.agent.drift.record",
    "AlertSink": "ragmon.agent.drift.evaluator",
    "AlertsConfig": "ragmon.agent.drift.rules",
    "Channel": "ragmon.agent.drift.channels",
    "CusumDetector": "ragmon.agent.drift.detectors",
    "Delivery": "ragmon.agent.drift.channels",
    "Dispatcher": "ragmon.agent.drift.channels",
    "EvaluatorStats": "ragmon.agent.drift.evaluator",
    "Gate": "ragmon.agent.drift.detectors",
    "InMemorySignalSource": "ragmon.agent.drift.memory_source",
    "JudgedScore": "ragmon.agent.drift.memory_source",
    "KsDetector": "ragmon.agent.drift.detectors",
    "Level": "ragmon.agent.drift.detectors",
    "LogChannel": "ragmon.agent.drift.channels",
    "Observation": "ragmon.agent.drift.memory_source",
    "PageHinkleyDetector": "ragmon.agent.drift.detectors",
    "PsiDetector": "ragmon.agent.drift.detectors",
    "Reading": "ragmon.agent.drift.detectors",
    "RuleConfig": "ragmon.agent.drift.rules",
    "SIGNALS": "ragmon.agent.drift.signals",
    "Sample": "ragmon.agent.drift.signals",
    "SampleQuery": "ragmon.agent.drift.signals",
    "ScopeKey": "ragmon.agent.drift.signals",
    "SeriesQuery": "ragmon.agent.drift.signals",
    "SignalSource": "ragmon.agent.drift.signals",
    "StoreSignalSource": "ragmon.agent.drift.store_source",
    "ThresholdDetector": "ragmon.agent.drift.detectors",
    "Transition": "ragmon.agent.drift.detectors",
    "WebhookChannel": "ragmon.agent.drift.channels",
    "WindowPoint": "ragmon.agent.drift.signals",
    "build_channels": "ragmon.agent.drift.channels",
    "build_dispatcher": "ragmon.agent.drift.channels",
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
    "Channel",
    "CusumDetector",
    "Delivery",
    "Dispatcher",
    "EvaluatorStats",
    "Gate",
    "InMemorySignalSource",
    "JudgedScore",
    "KsDetector",
    "Level",
    "LogChannel",
    "Observation",
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
