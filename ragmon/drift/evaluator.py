"""`AlertEvaluator`: runs the rules over a `SignalSource` at the clock's time and opens and resolves alerts.

One detector lives per (rule, scope). Each run judges the windows that closed since the last run, at least
`settle_s` ago (late spans), in time order: series detectors get every window once; sample detectors compare the
current window (the last `current_minutes`) with the baseline once per new window end. A scope seen for the first
time replays `warmup_windows` windows so the sequential detectors have history after a restart.

The baseline covers `baseline_minutes` ending `baseline_lag_minutes` before the data being judged, is re-read every
`baseline_refresh_minutes` of data time, and is *frozen while an alert is firing* — otherwise the faulty level would
become the baseline and the alert would resolve while the fault persists.

Alerts open and resolve on the detectors' transitions (hysteresis and cooldown live in `detectors.base.Gate`). Records
go to the dispatcher, whose failures are counted there; a failing source is counted per rule and the run goes on.
Nothing here raises after construction (GUIDE §4: never crash after start-up).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ragmon.drift.detectors import Level, Reading, SampleDetector, SeriesDetector, Transition
from ragmon.drift.record import AlertRecord, alert_id_for
from ragmon.drift.rules import AlertsConfig, RuleConfig
from ragmon.drift.signals import SampleQuery, ScopeKey, SeriesQuery, SignalSource, WindowPoint

logger = logging.getLogger("ragmon.alerts")

_EXAMPLE_TRACES = 5


class AlertSink(Protocol):
    """Where records go (the dispatcher to channels, the store writer). Must not raise; the evaluator guards anyway."""

    def deliver(self, record: AlertRecord) -> None: ...


@dataclass
class EvaluatorStats:
    runs: int = 0
    windows: int = 0  # window updates fed to detectors
    insufficient: int = 0  # updates without a decision (thin window, no baseline yet)
    suppressed: int = 0  # at the fire threshold but inside a cooldown
    fired: int = 0
    resolved: int = 0
    source_errors: Counter[str] = field(default_factory=Counter)  # per rule
    sink_errors: int = 0
    locate_errors: int = 0  # firing alerts sent without where (`ragmon.drift.where`): its read failed
    last_error: str = ""


@dataclass
class _ScopeState:
    series: SeriesDetector | None = None
    sample: SampleDetector | None = None
    next_start_s: float | None = None  # series: first window not yet judged; samples: last judged end
    baseline_read_s: float | None = None  # data time of the last baseline read
    baseline_short: bool = True  # the last read had too little data: read again next run, not in an hour
    baseline: dict[str, float] = field(default_factory=dict)
    open: AlertRecord | None = None
    recent: deque[WindowPoint] = field(default_factory=lambda: deque(maxlen=_EXAMPLE_TRACES))

    @property
    def firing(self) -> bool:
        detector = self.series or self.sample
        return detector is not None and detector.firing


class AlertEvaluator:
    def __init__(
        self,
        config: AlertsConfig,
        source: SignalSource,
        *,
        clock: Callable[[], float] = time.time,
        sinks: Sequence[AlertSink] = (),
        history: int = 1000,
        locate: Callable[[AlertRecord, RuleConfig], AlertRecord] | None = None,
    ) -> None:
        self.config = config
        self.rules = config.effective_rules()
        self.source = source
        self.clock = clock
        self.sinks = list(sinks)
        # Says where a firing alert's change is (`ragmon.drift.where.Locator`); a failure leaves the record as it was.
        self.locate = locate
        self.stats = EvaluatorStats()
        self._states: dict[tuple[str, ScopeKey], _ScopeState] = {}
        self._recent: deque[AlertRecord] = deque(maxlen=history)
        # evaluate() runs on the agent's drift thread; open_alerts()/recent() are read by the API and dashboard.
        self._lock = threading.Lock()

    # -- public --------------------------------------------------------------------------------------------------
    def evaluate(self) -> list[AlertRecord]:
        """Judge every window that has closed and settled; return (and deliver) the alert records produced."""
        with self._lock:
            records = self._evaluate(self.clock())
        for record in records:  # outside the lock: a slow webhook must not block readers
            for sink in self.sinks:
                try:
                    sink.deliver(record)
                except Exception as exc:
                    self.stats.sink_errors += 1
                    self.stats.last_error = f"sink: {exc!r}"
        return records

    def _evaluate(self, now_s: float) -> list[AlertRecord]:
        self.stats.runs += 1
        records: list[AlertRecord] = []
        for rule in self.rules:
            step_s = rule.window_minutes * 60.0
            end_s = math.floor((now_s - self.config.settle_s) / step_s) * step_s
            try:
                keys = self._scopes(rule, end_s)
            except Exception as exc:  # a broken source must not stop the other rules
                self._source_error(rule, exc)
                continue
            for key in keys:
                try:
                    produced = self._run(rule, key, end_s, now_s)
                except Exception as exc:
                    self._source_error(rule, exc)
                    continue
                records.extend(self._placed(record, rule) for record in produced)
        self._recent.extend(records)
        return records

    def _placed(self, record: AlertRecord, rule: RuleConfig) -> AlertRecord:
        if self.locate is None:
            return record
        try:
            return self.locate(record, rule)
        except Exception as exc:  # the alert goes out without its place rather than not at all
            self.stats.locate_errors += 1
            self.stats.last_error = f"locating: {exc!r}"
            return record

    def open_alerts(self) -> list[AlertRecord]:
        with self._lock:
            opened = [s.open for s in self._states.values() if s.open is not None]
        return sorted(opened, key=lambda r: r.fired_at_s)

    def recent(self) -> list[AlertRecord]:
        """Records produced by this evaluator, oldest first (bounded by `history`)."""
        with self._lock:
            return list(self._recent)

    # -- one rule, one scope -------------------------------------------------------------------------------------
    def _scopes(self, rule: RuleConfig, end_s: float) -> list[ScopeKey]:
        step_s = rule.window_minutes * 60.0
        look_back_s = max(rule.current_minutes * 60.0, max(rule.warmup_windows, 1) * step_s)
        found = set(self.source.scopes(rule.signal, end_s - look_back_s, end_s))
        found.update(key for (name, key) in self._states if name == rule.name)  # keep judging scopes we know
        trace_level = rule.spec.trace_level
        return sorted(key for key in found if rule.scope.matches(key) and (key.stage == "" or not trace_level))

    def _state(self, rule: RuleConfig, key: ScopeKey) -> _ScopeState:
        state = self._states.get((rule.name, key))
        if state is None:
            if rule.kind == "series":
                state = _ScopeState(series=rule.build_series_detector())
            else:
                state = _ScopeState(sample=rule.build_sample_detector())
            self._states[(rule.name, key)] = state
        return state

    def _run(self, rule: RuleConfig, key: ScopeKey, end_s: float, now_s: float) -> list[AlertRecord]:
        state = self._state(rule, key)
        if rule.kind == "series":
            return self._run_series(rule, key, state, end_s, now_s)
        return self._run_sample(rule, key, state, end_s, now_s)

    def _run_series(
        self, rule: RuleConfig, key: ScopeKey, state: _ScopeState, end_s: float, now_s: float
    ) -> list[AlertRecord]:
        step_s = rule.window_minutes * 60.0
        start_s = end_s - rule.warmup_windows * step_s if state.next_start_s is None else state.next_start_s
        start_s = max(start_s, end_s - self.config.max_catchup_windows * step_s)
        if start_s >= end_s:
            return []
        detector = state.series
        assert detector is not None
        if self._baseline_due(rule, state, start_s):
            baseline_end_s = start_s - rule.baseline_lag_minutes * 60.0
            points = self.source.series(
                SeriesQuery(
                    rule.signal,
                    key,
                    baseline_end_s - rule.baseline_minutes * 60.0,
                    baseline_end_s,
                    step_s,
                    rule.sla_ms,
                    examples=False,
                )
            )
            min_count = getattr(rule.detector, "min_count", 0.0)
            usable = [p for p in points if p.count >= min_count and math.isfinite(p.value)]
            detector.set_baseline((_scaled(rule, p.value) for p in usable), noise_floor=_noise_floor(rule, usable))
            state.baseline = _series_summary(usable)
            state.baseline_read_s = start_s
            state.baseline_short = len(usable) < _min_baseline(rule)
        points = self.source.series(SeriesQuery(rule.signal, key, start_s, end_s, step_s, rule.sla_ms))
        state.next_start_s = end_s
        records: list[AlertRecord] = []
        for point in sorted(points, key=lambda p: p.start_s):
            if not start_s <= point.start_s < end_s:
                continue
            window_end_s = point.start_s + step_s
            reading = detector.update(_scaled(rule, point.value), point.count, window_end_s)
            if point.trace_ids:
                state.recent.append(point)
            evidence: dict[str, float] = {**reading.evidence, **{f"current_{k}": v for k, v in point.extra.items()}}
            evidence.update(state.baseline)  # raw-unit baseline figures win over the detector's (maybe logged) ones
            evidence["value"] = point.value
            traces = tuple(t for p in reversed(state.recent) for t in p.trace_ids)[:_EXAMPLE_TRACES]
            records.extend(self._account(rule, key, state, reading, window_end_s, now_s, point.value, evidence, traces))
        return records

    def _run_sample(
        self, rule: RuleConfig, key: ScopeKey, state: _ScopeState, end_s: float, now_s: float
    ) -> list[AlertRecord]:
        if state.next_start_s is not None and end_s <= state.next_start_s:
            return []
        detector = state.sample
        assert detector is not None
        current_start_s = end_s - rule.current_minutes * 60.0
        if self._baseline_due(rule, state, end_s):
            baseline_end_s = current_start_s - rule.baseline_lag_minutes * 60.0
            baseline = self.source.sample(
                SampleQuery(rule.signal, key, baseline_end_s - rule.baseline_minutes * 60.0, baseline_end_s)
            )
            detector.set_baseline(baseline.values)
            state.baseline_read_s = end_s
            state.baseline_short = baseline.values.size < _min_baseline(rule)
        current = self.source.sample(SampleQuery(rule.signal, key, current_start_s, end_s))
        state.next_start_s = end_s
        reading = detector.update(current.values, end_s)
        evidence = {**reading.evidence, "current_window_s": rule.current_minutes * 60.0}
        current_value = float(np.median(current.values)) if current.values.size else math.nan
        return self._account(rule, key, state, reading, end_s, now_s, current_value, evidence, current.trace_ids)

    def _baseline_due(self, rule: RuleConfig, state: _ScopeState, data_time_s: float) -> bool:
        if state.firing:
            return False  # frozen while firing
        if state.baseline_read_s is None or state.baseline_short:
            return True
        return data_time_s - state.baseline_read_s >= rule.baseline_refresh_minutes * 60.0

    # -- transitions into records --------------------------------------------------------------------------------
    def _account(
        self,
        rule: RuleConfig,
        key: ScopeKey,
        state: _ScopeState,
        reading: Reading,
        t_s: float,
        now_s: float,
        current_value: float,
        evidence: Mapping[str, float],
        trace_ids: tuple[str, ...],
    ) -> list[AlertRecord]:
        self.stats.windows += 1
        if reading.level is Level.INSUFFICIENT:
            self.stats.insufficient += 1
        if reading.suppressed:
            self.stats.suppressed += 1
        if reading.transition is None:
            return []
        baseline_value = evidence.get("baseline_median", evidence.get("baseline_mean"))
        if rule.kind == "sample":
            current_value = evidence.get("current_median", current_value)
        full_evidence: dict[str, float | str] = {**evidence, "detector": rule.detector.type, "signal": rule.signal}
        fired = reading.transition is Transition.FIRED
        if fired:
            self.stats.fired += 1
        else:
            self.stats.resolved += 1
        opened = None if fired else state.open  # a resolve closes the alert that fired (unknown after a restart)
        fired_at_s = opened.fired_at_s if opened is not None else t_s
        record = AlertRecord(
            alert_id=opened.alert_id
            if opened is not None
            else alert_id_for(rule.name, key.tenant, key.feature, key.stage, fired_at_s),
            state="firing" if fired else "resolved",
            rule=rule.name,
            severity=rule.severity,
            tenant=key.tenant,
            feature=key.feature,
            stage=key.stage,
            metric=rule.signal,
            detector=rule.detector.type,
            fired_at_s=fired_at_s,
            resolved_at_s=None if fired else t_s,
            detected_at_s=now_s,
            value=reading.statistic,
            threshold=reading.fire_threshold if fired else reading.clear_threshold,
            message=_message(rule, key, reading, current_value, baseline_value, fired=fired),
            baseline_value=baseline_value,
            current_value=current_value,
            evidence=full_evidence,
            trace_ids=trace_ids,
            channels=tuple(rule.channels),
        )
        state.open = record if fired else None
        return [record]

    def _source_error(self, rule: RuleConfig, exc: Exception) -> None:
        first = self.stats.source_errors[rule.name] == 0
        self.stats.source_errors[rule.name] += 1
        self.stats.last_error = f"{rule.name}: {exc!r}"
        if first:  # log the first failure per rule; the counter tells the rest
            logger.warning("alert rule %s: reading the signal failed: %r", rule.name, exc)


def _min_baseline(rule: RuleConfig) -> int:
    """How much baseline the rule's detector needs before deciding (windows, or values for sample detectors)."""
    for name in ("min_baseline_windows", "min_windows", "min_baseline"):
        needed = getattr(rule.detector, name, None)
        if isinstance(needed, int):
            return needed
    return 1


def _scaled(rule: RuleConfig, value: float) -> float:
    """What a standardising detector sees: the value, or its transform (see `SignalSpec.transform`); a static
    threshold is written in the signal's own units and sees the raw value."""
    transform = rule.spec.transform
    if transform is None or rule.detector.type == "threshold" or not math.isfinite(value):
        return value
    if transform == "log":
        return math.log(max(value, 0.0) + rule.spec.log_offset)
    return math.asin(math.sqrt(min(1.0, max(0.0, value))))


def _noise_floor(rule: RuleConfig, points: Sequence[WindowPoint]) -> float:
    """The sampling noise of one window's value, when theory gives it: asin(√p̂) over n requests has std ≈ 1/(2√n)
    whatever p is. A short baseline of a rare event (4 errors in an hour where 1% is normal) otherwise yields a tiny
    std, and the next ordinary burst looks like a tenfold rise — measured as a false alarm on generated traffic."""
    if rule.spec.transform != "asin_sqrt" or not points or rule.detector.type == "threshold":
        return 0.0
    mean_count = float(np.mean([p.count for p in points]))
    return 0.5 / math.sqrt(mean_count) if mean_count > 0 else 0.0


def _series_summary(points: Sequence[WindowPoint]) -> dict[str, float]:
    """Baseline figures for the evidence, in the signal's units: mean and std of the values, the mean count and
    the mean of each extra (input_qps ...)."""
    if not points:
        return {"baseline_windows": 0.0}
    values = [p.value for p in points]
    summary = {
        "baseline_windows": float(len(points)),
        "baseline_mean": float(np.mean(values)),
        "baseline_std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
        "baseline_count_mean": float(np.mean([p.count for p in points])),
    }
    for name in points[0].extra:
        summary[f"baseline_{name}"] = float(np.mean([p.extra.get(name, math.nan) for p in points]))
    return summary


def _fmt(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.4g}"


def _message(
    rule: RuleConfig,
    key: ScopeKey,
    reading: Reading,
    current: float | None,
    baseline: float | None,
    *,
    fired: bool,
) -> str:
    spec = rule.spec
    figures = f"{_fmt(current)} {spec.unit} now vs {_fmt(baseline)} {spec.unit} baseline"
    if fired:
        test = f"{rule.detector.type} {_fmt(reading.statistic)} ≥ {_fmt(reading.fire_threshold)}"
        return f"[{rule.severity}] {rule.name}: {spec.description} changed for {key.describe()}: {figures} ({test})"
    test = f"{rule.detector.type} {_fmt(reading.statistic)} < {_fmt(reading.clear_threshold)}"
    return f"[resolved] {rule.name}: {spec.description} back to normal for {key.describe()}: {figures} ({test})"
