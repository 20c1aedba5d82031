"""The evaluator over the store's signals (traffic written into a store on the embedded engine) with a hand-driven
clock: faults injected at known minutes raise the right alerts with evidence, resolve with the same id, respect
cooldowns, and nothing raises into the caller."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from ragmon.drift import (
    ALERT_EXTRA_COLUMNS,
    AlertEvaluator,
    AlertRecord,
    AlertsConfig,
    Delivery,
    Dispatcher,
    ScopeKey,
    SeriesQuery,
)
from ragmon.drift.signals import SampleQuery, WindowPoint
from tests.support.signal_oracle import JudgedScore

MINUTE = 60.0


class RecordingChannel:
    """A channel that keeps what it is sent."""

    def __init__(self, name: str = "log") -> None:
        self._name = name
        self.sent: list[AlertRecord] = []

    @property
    def name(self) -> str:
        return self._name

    def send(self, record: AlertRecord) -> Delivery:
        self.sent.append(record)
        return Delivery(True)


def run_minutes(evaluator: AlertEvaluator, clock: Any, minutes: int) -> list[AlertRecord]:
    records: list[AlertRecord] = []
    for _ in range(minutes):
        clock.advance(MINUTE)
        records.extend(evaluator.evaluate())
    return records


def minute_of(record: AlertRecord, epoch_s: float) -> int:
    """The data minute whose window end fired the alert (the window is [minute - 1, minute))."""
    return round((record.fired_at_s - epoch_s) / MINUTE)


def start_at(clock: Any, epoch_s: float, minute: int, settle_s: float) -> None:
    clock.now_s = epoch_s + minute * MINUTE + settle_s


def test_latency_step_alerts_the_affected_stages_with_evidence(traffic: Callable[..., Any], clock: Any) -> None:
    epoch = clock.now_s
    source = traffic(minutes=200, seed=1, shape=lambda m: {"latency_ms": 1200.0} if m >= 150 else {})
    traffic(source, minutes=200, seed=2, feature="chat")  # a healthy neighbour
    config = AlertsConfig(settle_s=120)
    evaluator = AlertEvaluator(config, source, clock=clock)
    start_at(clock, epoch, 120, config.settle_s)
    assert evaluator.evaluate() == []  # warm-up replay of healthy windows
    records = run_minutes(evaluator, clock, 60)
    fired = [r for r in records if r.state == "firing"]
    latency = {r.stage: r for r in fired if r.rule == "latency_p95_up"}
    assert set(latency) == {"generate", ""}, "only the stages whose latency moved"
    assert {r.feature for r in fired} == {"qa"}
    # Allowed companions: the SLA share of whole requests drops as latency triples. Nothing else.
    assert {r.rule for r in fired} <= {"latency_p95_up", "saturation_sla_share"}
    generate = latency["generate"]
    # The fault starts in minute 150, i.e. the window ending at minute 151; CUSUM (z clipped) needs 2–3 windows.
    assert 152 <= minute_of(generate, epoch) <= 154
    assert generate.severity == "warning" and generate.detector == "cusum" and generate.metric == "latency_p95_ms"
    assert generate.value is not None and generate.threshold == 8.0 and generate.value >= 8.0
    assert generate.current_value is not None and generate.baseline_value is not None
    assert generate.current_value > 2.5 * generate.baseline_value
    assert generate.evidence["baseline_windows"] >= 30
    assert generate.trace_ids and all(int(t.split("-")[1]) >= 150 for t in generate.trace_ids)
    assert "latency_p95_up" in generate.message and "stage=generate" in generate.message
    assert generate.detected_at_s == pytest.approx(generate.fired_at_s + config.settle_s, abs=MINUTE)
    # Firing stays firing: no re-emission on later runs, and open_alerts lists it once.
    assert sum(1 for r in records if r.alert_id == generate.alert_id) == 1
    assert generate in evaluator.open_alerts()


def test_re_running_at_the_same_instant_emits_nothing(traffic: Callable[..., Any], clock: Any) -> None:
    epoch = clock.now_s
    source = traffic(minutes=210, seed=3, shape=lambda m: {"latency_ms": 1500.0} if m >= 180 else {})
    evaluator = AlertEvaluator(AlertsConfig(settle_s=0), source, clock=clock)
    start_at(clock, epoch, 200, 0)
    first = evaluator.evaluate()
    assert any(r.rule == "latency_p95_up" for r in first)  # the warm-up replay sees the step
    assert evaluator.evaluate() == []
    assert evaluator.stats.runs == 2


def test_resolves_with_the_same_id_after_recovery(traffic: Callable[..., Any], clock: Any) -> None:
    epoch = clock.now_s
    fault = range(150, 170)
    source = traffic(minutes=260, seed=4, shape=lambda m: {"latency_ms": 1200.0} if m in fault else {})
    config = AlertsConfig.model_validate(
        {
            "default_rules": False,
            "settle_s": 0,
            "rules": [
                {
                    "name": "gen_latency",
                    "signal": "latency_p95_ms",
                    "scope": {"stages": ["generate"]},
                    "detector": {"type": "cusum", "min_count": 20},
                },
            ],
        }
    )
    evaluator = AlertEvaluator(config, source, clock=clock)
    start_at(clock, epoch, 120, 0)
    records = evaluator.evaluate() + run_minutes(evaluator, clock, 140)
    assert [r.state for r in records] == ["firing", "resolved"]
    firing, resolved = records
    assert resolved.alert_id == firing.alert_id and resolved.fired_at_s == firing.fired_at_s
    assert resolved.resolved_at_s is not None
    # The sum is capped at 2h = 16 and falls by about k = 0.5 a window: (16 - 2) / 0.5 ≈ 28 windows after recovery.
    resolved_minute = (resolved.resolved_at_s - epoch) / MINUTE
    assert 170 < resolved_minute <= 170 + 45
    assert resolved.threshold == 2.0 and resolved.value is not None and resolved.value < 2.0
    # The baseline stayed frozen while firing: it still describes the healthy level.
    assert resolved.baseline_value == pytest.approx(firing.baseline_value)
    assert evaluator.open_alerts() == []


def test_cooldown_suppresses_a_quick_refire(traffic: Callable[..., Any], clock: Any) -> None:
    epoch = clock.now_s

    def shape(minute: int) -> dict[str, float]:
        # fault, a 3-minute recovery, the fault again (inside the 10-minute cooldown), lasting past the cooldown
        return {"latency_ms": 2000.0} if 150 <= minute < 155 or 158 <= minute < 175 else {}

    source = traffic(minutes=180, seed=5, shape=shape)
    config = AlertsConfig.model_validate(
        {
            "default_rules": False,
            "settle_s": 0,
            "rules": [
                {
                    "name": "gen_latency_static",
                    "signal": "latency_p95_ms",
                    "scope": {"stages": ["generate"]},
                    "detector": {
                        "type": "threshold",
                        "fire": 1200,
                        "clear": 900,
                        "fire_after": 1,
                        "clear_after": 1,
                        "cooldown_s": 600,
                    },
                },
            ],
        }
    )
    evaluator = AlertEvaluator(config, source, clock=clock)
    start_at(clock, epoch, 140, 0)
    records = evaluator.evaluate() + run_minutes(evaluator, clock, 40)

    def resolved_minute(record: AlertRecord) -> int | None:
        return None if record.resolved_at_s is None else round((record.resolved_at_s - epoch) / MINUTE)

    assert [(r.state, minute_of(r, epoch), resolved_minute(r)) for r in records] == [
        ("firing", 151, None),  # the first faulty window [150, 151)
        ("resolved", 151, 156),  # the first healthy window [155, 156)
        ("firing", 166, None),  # faulty again from [158, 159), held back until 156 + 10 minutes
        ("resolved", 166, 176),
    ]
    assert records[2].alert_id != records[0].alert_id
    assert evaluator.stats.suppressed == 166 - 159  # windows ending 159..165 were over the line but held back


def test_normalisation_mismatch_raises_a_critical_alert(traffic: Callable[..., Any], clock: Any) -> None:
    """After an embedding-library upgrade the query vectors stop being unit-length (minute 150 on)."""
    epoch = clock.now_s
    source = traffic(minutes=170, seed=6, shape=lambda m: {"normalised": 0.0} if m >= 150 else {})
    evaluator = AlertEvaluator(AlertsConfig(settle_s=0), source, clock=clock)
    start_at(clock, epoch, 140, 0)
    records = evaluator.evaluate() + run_minutes(evaluator, clock, 30)
    norm = [r for r in records if r.rule == "embedding_norm_jump"]
    assert len(norm) == 1
    alert = norm[0]
    assert alert.state == "firing" and alert.severity == "critical" and alert.stage == "embed"
    assert 152 <= minute_of(alert, epoch) <= 153  # a jump this size fires on the 2nd or 3rd window
    assert alert.baseline_value is not None and alert.baseline_value < 1e-6  # unit vectors: |‖v‖ - 1| ≈ 0
    assert alert.current_value is not None and alert.current_value > 1.0  # raw 16-d vectors have norm ≈ 4
    assert alert.trace_ids


def test_saturation_evidence_shows_offered_against_effective_load(traffic: Callable[..., Any], clock: Any) -> None:
    epoch = clock.now_s

    def shape(minute: int) -> dict[str, float]:
        return {"requests": 90.0, "latency_ms": 1900.0} if minute >= 150 else {}  # 3x load, the queue builds

    source = traffic(minutes=170, seed=7, shape=shape)
    evaluator = AlertEvaluator(AlertsConfig(settle_s=0), source, clock=clock)
    start_at(clock, epoch, 140, 0)
    records = evaluator.evaluate() + run_minutes(evaluator, clock, 30)
    alert = next(r for r in records if r.rule == "saturation_sla_share")
    assert alert.stage == "" and alert.metric == "sla_share"
    evidence = alert.evidence
    assert evidence["baseline_input_qps"] == pytest.approx(0.5)
    assert evidence["current_input_qps"] == pytest.approx(1.5)
    assert evidence["current_effective_qps"] < 0.8 * evidence["current_input_qps"]
    assert evidence["baseline_effective_qps"] == pytest.approx(evidence["baseline_input_qps"], rel=0.02)


def test_retrieval_score_shifts_are_caught_as_distribution_changes(traffic: Callable[..., Any], clock: Any) -> None:
    epoch = clock.now_s
    source = traffic(minutes=240, seed=8, shape=lambda m: {"top1_mean": 0.70, "gap_mean": 0.03} if m >= 200 else {})
    evaluator = AlertEvaluator(AlertsConfig(settle_s=0), source, clock=clock)
    start_at(clock, epoch, 190, 0)
    records = evaluator.evaluate() + run_minutes(evaluator, clock, 40)
    by_rule = {r.rule: r for r in records if r.state == "firing"}
    psi, ks = by_rule["top1_score_shift"], by_rule["similarity_gap_shift"]
    assert psi.stage == ks.stage == "search"
    # The current window is the last 30 minutes: the shift must fill part of it first. Measured: a few minutes.
    assert 200 < minute_of(psi, epoch) <= 215 and 200 < minute_of(ks, epoch) <= 215
    assert psi.value is not None and psi.value >= 0.25 and psi.evidence["psi"] == psi.value
    assert psi.current_value is not None and psi.baseline_value is not None
    assert psi.current_value < psi.baseline_value  # medians
    assert ks.evidence["p_value"] < 1e-4 and ks.threshold is not None and ks.value is not None
    assert ks.value >= ks.threshold
    assert psi.trace_ids and all(int(t.split("-")[1]) >= 170 for t in psi.trace_ids)  # from the current window
    assert set(by_rule) == {"top1_score_shift", "similarity_gap_shift"}


def test_judged_quality_is_sampling_weighted(judged: Callable[..., Any], clock: Any) -> None:
    # One window: an error trace kept at p = 1 scored 0.2, a baseline trace kept at p = 0.1 scored 0.9.
    source = judged(
        [
            JudgedScore(clock.now_s + 1, "t-err", "faithfulness", 0.2, 1.0, tenant="a", feature="qa"),
            JudgedScore(clock.now_s + 2, "t-ok", "faithfulness", 0.9, 0.1, tenant="a", feature="qa"),
            JudgedScore(clock.now_s + 3, "t-fail", "faithfulness", None, 0.1, tenant="a", feature="qa"),  # judge failed
        ]
    )
    [point] = source.series(SeriesQuery("faithfulness", ScopeKey("a", "qa", ""), clock.now_s, clock.now_s + 900, 900))
    assert point.value == pytest.approx((0.2 * 1 + 0.9 * 10) / 11)  # not the unweighted 0.55; the failure ignored
    assert point.count == pytest.approx(11**2 / 101)  # Kish effective sample size
    assert point.trace_ids[0] == "t-err"


def test_faithfulness_drop_fires_on_weighted_windows(judged: Callable[..., Any], clock: Any) -> None:
    epoch = clock.now_s
    rng = np.random.default_rng(9)
    scores = []
    for minute in range(600):
        healthy = minute < 480
        for i in range(6):
            kept_for_error = i == 0  # kept at p = 1 because it failed: scored low whatever happens
            p = 1.0 if kept_for_error else 0.1
            mean = 0.3 if kept_for_error else (0.9 if healthy else 0.7)
            value = float(np.clip(rng.normal(mean, 0.08), 0, 1))
            scores.append(JudgedScore(epoch + minute * MINUTE + i, f"j-{minute}-{i}", "faithfulness", value, p))
    source = judged(scores)
    evaluator = AlertEvaluator(AlertsConfig(settle_s=0), source, clock=clock)
    start_at(clock, epoch, 450, 0)
    records = evaluator.evaluate() + run_minutes(evaluator, clock, 150)
    [alert] = [r for r in records if r.rule == "faithfulness_down"]
    assert alert.stage == "" and alert.feature == "" and alert.tenant == "default"
    assert 480 < minute_of(alert, epoch) <= 480 + 4 * 15  # within four 15-minute windows
    # Weighted: the p = 1 error trace (0.3) counts once, each p = 0.1 trace (0.9) ten times.
    assert alert.baseline_value is not None
    assert alert.baseline_value == pytest.approx((0.3 + 5 * 10 * 0.9) / 51, abs=0.01)


class BrokenSource:
    def scopes(self, signal: str, start_s: float, end_s: float) -> Sequence[ScopeKey]:
        return [ScopeKey("a", "qa", "")]

    def series(self, query: SeriesQuery) -> Sequence[WindowPoint]:
        raise ConnectionError("store unreachable")

    def sample(self, query: SampleQuery) -> Any:
        raise ConnectionError("store unreachable")


class BrokenSink:
    def deliver(self, record: AlertRecord) -> None:
        raise RuntimeError("sink down")


def test_source_and_sink_failures_are_counted_never_raised(traffic: Callable[..., Any], clock: Any) -> None:
    evaluator = AlertEvaluator(AlertsConfig(), BrokenSource(), clock=clock)
    assert evaluator.evaluate() == []
    assert evaluator.stats.source_errors["latency_p95_up"] == 1
    assert "store unreachable" in evaluator.stats.last_error

    epoch = clock.now_s
    source = traffic(minutes=170, seed=10, shape=lambda m: {"latency_ms": 2000.0} if m >= 150 else {})
    evaluator = AlertEvaluator(AlertsConfig(settle_s=0), source, clock=clock, sinks=[BrokenSink()])
    start_at(clock, epoch, 140, 0)
    records = evaluator.evaluate() + run_minutes(evaluator, clock, 30)
    assert records and evaluator.stats.sink_errors == len(records)


def test_a_restarted_evaluator_re_emits_the_same_ids_and_the_dispatcher_drops_them(
    traffic: Callable[..., Any], clock: Any
) -> None:
    epoch = clock.now_s
    source = traffic(minutes=180, seed=11, shape=lambda m: {"latency_ms": 2000.0} if m >= 150 else {})
    config = AlertsConfig.model_validate(
        {
            "default_rules": False,
            "settle_s": 0,
            "rules": [
                {
                    "name": "gen_latency_static",
                    "signal": "latency_p95_ms",
                    "scope": {"stages": ["generate"]},
                    "detector": {"type": "threshold", "fire": 1200, "clear": 900},
                },
            ],
        }
    )
    channel = RecordingChannel()
    dispatcher = Dispatcher({"log": channel})
    first = AlertEvaluator(config, source, clock=clock, sinks=[dispatcher])
    start_at(clock, epoch, 140, 0)
    first.evaluate()
    run_minutes(first, clock, 20)
    assert [r.state for r in channel.sent] == ["firing"]
    # The agent restarts: a fresh evaluator replays the warm-up windows and re-detects the same alert.
    second = AlertEvaluator(config, source, clock=clock, sinks=[dispatcher])
    replayed = second.evaluate()
    assert [r.alert_id for r in replayed] == [channel.sent[0].alert_id]
    assert len(channel.sent) == 1 and dispatcher.stats["log"].deduplicated == 1


def test_rows_fit_the_alerts_table(traffic: Callable[..., Any], clock: Any) -> None:
    from ragmon.sinks.schema import ALERT_COLUMNS

    epoch = clock.now_s
    source = traffic(minutes=170, seed=12, shape=lambda m: {"latency_ms": 2000.0} if m >= 150 else {})
    evaluator = AlertEvaluator(AlertsConfig(settle_s=0), source, clock=clock)
    start_at(clock, epoch, 140, 0)
    record = next(r for r in evaluator.evaluate() + run_minutes(evaluator, clock, 30) if r.state == "firing")
    base = [name for name, _ in ALERT_COLUMNS]
    assert list(record.to_row(extended=False)) == base
    assert list(record.to_row()) == base + [name for name, _ in ALERT_EXTRA_COLUMNS]
    folded = record.to_row(extended=False)["labels"]
    assert folded["detector"] == "cusum" and "baseline_mean" in folded["evidence"]
    assert record.to_json()["evidence"]["signal"] == "latency_p95_ms"


def test_a_slow_slide_in_retrieval_scores_is_caught(traffic: Callable[..., Any], clock: Any) -> None:
    """The case fixed thresholds miss: the rank-1 score slides by 0.001 a minute (a fifth of its spread per
    request every 10 minutes); no single minute looks wrong."""
    epoch = clock.now_s

    def shape(minute: int) -> dict[str, float]:
        return {"top1_mean": 0.78 - 0.001 * max(0, minute - 200)}

    source = traffic(minutes=300, seed=13, shape=shape)
    config = AlertsConfig.model_validate(
        {
            "default_rules": False,
            "settle_s": 0,
            "rules": [
                {"name": "top1_drift", "signal": "top1_score", "detector": {"type": "psi"}},
            ],
        }
    )
    evaluator = AlertEvaluator(config, source, clock=clock)
    start_at(clock, epoch, 190, 0)
    records = evaluator.evaluate() + run_minutes(evaluator, clock, 100)
    [alert] = records
    # Measured: fires at minute 236, when the 30-minute window's median is 0.03 below the baseline's.
    assert 200 < minute_of(alert, epoch) <= 260
    assert alert.evidence["current_median"] < alert.evidence["baseline_median"] - 0.02
