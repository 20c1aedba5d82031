"""`StoreSignalSource` computes what each signal means: the same generated spans and judge scores go into the store
(the embedded engine, a database per test) and into `tests.support.signal_oracle`, which restates every signal in
numpy, and every signal is compared window by window.

Tolerances, and why:
- counts, SLA shares, error rates: equal (integer counts behind them).
- means (cost, tokens, scores, gaps, norms, weighted judged quality, Kish n): relative 1e-9 — the same float64
  numbers summed in another order. The store keeps rank-1 scores, gaps and norms as Float32, so the oracle is
  fed the float32-rounded values (what the store holds); without that they would differ by ~1e-7.
- p95 latency: the store merges per-minute DDSketch states (relative accuracy α = 0.005), which return a value
  within α of an order statistic next to the rank of the 95th percentile, while the oracle interpolates
  (numpy) between the two order statistics around rank 0.95·(n − 1). With 30–60 spans a window those neighbours
  can be several percent apart, so a fixed relative tolerance would be either loose or flaky; both values must lie
  in [x(⌊r⌋−1)·(1−α), x(⌈r⌉+1)·(1+α)] with r = 0.95·(n − 1) — the bracket tests/sinks/test_store_report.py uses.
- example trace ids: the same badness (duration, cost, score ...) as the oracle's picks; ties may pick
  other traces with the same value. For errors: failed traces of that window.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ragmon.sinks import Store, open_store
from ragmon.sinks.schema import QUANTILE_ACCURACY

from ragmon.drift import SIGNALS, SampleQuery, ScopeKey, SeriesQuery, WindowPoint
from ragmon.drift.store_source import StoreSignalSource
from tests.support.signal_oracle import FeedbackVerdict, JudgedScore, Observation, SignalOracle
from tests.support.span_rows import SpanBatch, insert_spans
from tests.support.synth import make_batch

MINUTES = 30
SLA_MS = 1000.0


@pytest.fixture
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    opened = open_store(str(chdb_engine_dir), database=f"t_{uuid.uuid4().hex[:12]}")
    yield opened
    opened.close()


def _f32(value: float | None) -> float | None:
    return None if value is None else float(np.float32(value))


def _observations(batch: SpanBatch) -> list[Observation]:
    return [
        Observation(
            time_s=batch.start_time[i] / 1e9,
            trace_id=batch.trace_id[i],
            tenant=batch.tenant[i],
            feature=batch.feature[i],
            stage="" if batch.stage[i] == "request" else batch.stage[i],
            duration_ms=batch.duration_ms[i],
            error=batch.status[i] == "error",
            cost_usd=batch.cost_usd[i],
            tokens=batch.input_tokens[i] + batch.output_tokens[i],
            top1_score=_f32(batch.top1_score[i]),
            similarity_gap=_f32(batch.similarity_gap[i]),
            norm_deviation=_f32(batch.norm_deviation[i]),
        )
        for i in range(len(batch))
    ]


class World:
    """The same traffic in the store and in the oracle, and each span's numbers for checking example picks."""

    def __init__(self, store: Store) -> None:
        self.start_s = (int(time.time()) // 3600 - 2) * 3600  # hour-aligned, recent (rows past their TTL vanish)
        self.end_s = self.start_s + MINUTES * 60
        batch = make_batch(
            3_000,
            seed=7,
            start_ns=self.start_s * 10**9,
            spread_s=MINUTES * 60 - 5,  # every span (root + offsets of a few seconds) starts inside the range
            features=("support", "search"),
            tenants=("acme", "beta"),
            error_rate=0.05,
        )
        assert max(batch.start_time) < self.end_s * 10**9
        for part in range(3):  # three inserts and roll-ups: minute states merge across parts and minutes
            rows = batch.take(list(range(part, len(batch), 3)))
            rows.ingest_seq = [part + 1] * len(rows)
            insert_spans(store, rows)
            store.roll_up(part + 1, part + 1)
        self.observations = _observations(batch)
        self.store_source = StoreSignalSource(store)
        self.oracle = SignalOracle(self.observations, self._judge(store, batch), self._feedback(store, batch))

    def _judge(self, store: Store, batch: SpanBatch) -> list[JudgedScore]:
        """Judge a sample of traces, with the awkward cases: failed verdicts, re-judged traces (latest wins),
        back-evaluation runs (ignored), traces whose payload expired (probability 1)."""
        rng = random.Random(3)
        roots = [i for i in range(len(batch)) if batch.stage[i] == "request"]
        payloads: list[dict[str, Any]] = []
        scores: list[dict[str, Any]] = []
        judged: list[JudgedScore] = []
        for n, i in enumerate(rng.sample(roots, 600)):
            tenant, trace, feature = batch.tenant[i], batch.trace_id[i], batch.feature[i]
            probability = rng.choice((1.0, 0.5, 0.05))
            if n % 50 != 0:  # every 50th payload has expired: its scores count with probability 1
                payloads.append(
                    {
                        "tenant": tenant,
                        "trace_id": trace,
                        "feature": feature,
                        "start_time": batch.start_time[i],
                        "inclusion_probability": probability,
                    }
                )
            else:
                probability = 1.0
            scored_ms = batch.start_time[i] // 10**6 + rng.randrange(1_000, 240_000)
            if scored_ms >= self.end_s * 1000:
                scored_ms = self.end_s * 1000 - 1
            for metric in ("faithfulness", "relevance"):
                value = None if rng.random() < 0.05 else round(rng.random(), 6)
                row = {"tenant": tenant, "trace_id": trace, "feature": feature, "metric": metric}
                scores.append(
                    {**row, "judge_version": "v2", "value": value, "status": "ok" if value is not None else "error"}
                    | {"scored_at": _ms_datetime(scored_ms)}
                )
                if n % 7 == 0:  # judged before by an older version: the latest verdict is the one that counts
                    scores.append(
                        {**row, "judge_version": "v1", "value": 0.01, "status": "ok"}
                        | {"scored_at": _ms_datetime(scored_ms - 500)}
                    )
                if n % 11 == 0:  # an offline back-evaluation run: not online traffic
                    scores.append(
                        {**row, "judge_version": "v2", "value": 0.0, "status": "ok", "run_name": "backeval"}
                        | {"scored_at": _ms_datetime(scored_ms)}
                    )
                if value is not None:
                    judged.append(JudgedScore(scored_ms / 1000, trace, metric, value, probability, tenant, feature))
                elif n % 7 == 0:  # the new version failed on it: the older verdict is the latest one there is
                    judged.append(
                        JudgedScore((scored_ms - 500) / 1000, trace, metric, 0.01, probability, tenant, feature)
                    )
        store.insert_payloads(payloads)
        store.insert_scores(scores)
        self.judged = {(s.trace_id, s.metric): s.value for s in judged}
        return judged

    def _feedback(self, store: Store, batch: SpanBatch) -> list[FeedbackVerdict]:
        """End users' verdicts on a sample of traces, with the awkward cases: a voter who changed their mind (the
        latest counts, when it arrived), named scores (not verdicts), feedback on a trace never stored (no scope)."""
        rng = random.Random(5)
        roots = [i for i in range(len(batch)) if batch.stage[i] == "request"]
        rows: list[dict[str, Any]] = []
        verdicts: list[FeedbackVerdict] = []
        self.negative_traces: set[str] = set()
        for n, i in enumerate(rng.sample(roots, 500)):
            tenant, trace, feature = batch.tenant[i], batch.trace_id[i], batch.feature[i]
            for voter in range(1 + n % 2):
                received_ms = min(batch.start_time[i] // 10**6 + rng.randrange(1_000, 240_000), self.end_s * 1000 - 1)
                kind = "thumbs" if rng.random() < 0.6 else "rating"
                value = float(rng.randrange(2)) if kind == "thumbs" else float(rng.randrange(1, 6))
                negative = value == 0.0 if kind == "thumbs" else value <= 2.0
                row = {"tenant": tenant, "trace_id": trace, "name": kind, "kind": kind, "voter": f"user:{n}-{voter}"}
                if n % 9 == 0:  # changed their mind: an earlier opposite value, replaced
                    earlier = {**row, "value": 1.0 - value if kind == "thumbs" else 6.0 - value}
                    rows.append(earlier | _feedback_times(received_ms - 800) | {"negative": not negative})
                rows.append({**row, "value": value, "negative": negative} | _feedback_times(received_ms))
                verdicts.append(FeedbackVerdict(received_ms / 1000, trace, negative, tenant, feature))
                if negative:
                    self.negative_traces.add(trace)
            if n % 13 == 0:  # a named score: not a verdict
                rows.append(
                    {"tenant": tenant, "trace_id": trace, "name": "copied", "kind": "score", "value": 1.0}
                    | {"voter": f"user:{n}", "negative": False}
                    | _feedback_times(batch.start_time[i] // 10**6)
                )
        unknown = {"tenant": "acme", "trace_id": "f" * 32, "name": "thumbs", "kind": "thumbs", "value": 0.0}
        rows.append(unknown | {"voter": "user:x", "negative": True} | _feedback_times(self.start_s * 1000 + 90_000))
        store.insert_feedback(rows)
        return verdicts

    def badness(self, signal: str, scope: ScopeKey) -> dict[str, float]:
        """trace id -> how bad its span is for `signal`, within one scope (one span per trace and stage)."""
        if signal == "negative_feedback":
            return {t: 1.0 for t in self.negative_traces}
        if signal in ("faithfulness", "relevance"):
            return {t: -v for (t, m), v in self.judged.items() if m == signal and v is not None}
        out = {}
        for o in self.observations:
            if ScopeKey(o.tenant, o.feature, o.stage) != scope:
                continue
            if signal in ("latency_p95_ms", "sla_share"):
                out[o.trace_id] = o.duration_ms
            elif signal == "cost_per_request_usd":
                out[o.trace_id] = -math.inf if o.cost_usd is None else o.cost_usd
            elif signal == "tokens_per_request":
                out[o.trace_id] = float(o.tokens)
            elif signal == "error_rate":
                out[o.trace_id] = 1.0 if o.error else 0.0
            else:
                value = getattr(o, signal)
                if value is not None:
                    out[o.trace_id] = value if SIGNALS[signal].bad_direction == "up" else -value
        return out


def _feedback_times(ms: int) -> dict[str, datetime]:
    return {"given_at": _ms_datetime(ms), "received_at": _ms_datetime(ms)}


def _ms_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def _bracket(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    ordered = np.sort(values)
    rank = level * (len(ordered) - 1)
    low = ordered[max(0, math.floor(rank) - 1)]
    high = ordered[min(len(ordered) - 1, math.ceil(rank) + 1)]
    return float(low) * (1 - QUANTILE_ACCURACY), float(high) * (1 + QUANTILE_ACCURACY)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-12)


def _check_point(world: World, query: SeriesQuery, want: WindowPoint, got: WindowPoint) -> None:
    what = f"{query.signal} {query.scope} window {want.start_s} step {query.step_s}"
    assert got.start_s == want.start_s, what
    assert got.count == pytest.approx(want.count, rel=1e-9), what
    if query.signal == "latency_p95_ms":
        durations = world.oracle.sample(
            SampleQuery("latency_p95_ms", query.scope, want.start_s, want.start_s + query.step_s)
        ).values
        assert durations.size == want.count
        low, high = _bracket(durations)
        assert low <= want.value <= high, what  # the oracle's own convention sits inside the bracket
        assert low <= got.value <= high, what
    else:
        assert _same(got.value, want.value), f"{what}: {got.value} != {want.value}"
    assert set(got.extra) == set(want.extra), what
    for name, value in want.extra.items():
        assert got.extra[name] == pytest.approx(value, rel=1e-9), f"{what} {name}"
    bad = world.badness(query.signal, query.scope)
    if query.signal == "error_rate":
        assert len(got.trace_ids) == len(want.trace_ids), what
        assert all(bad[t] == 1.0 for t in got.trace_ids), what
    else:
        assert sorted(bad[t] for t in got.trace_ids) == sorted(bad[t] for t in want.trace_ids), what


def test_scopes_match(world: World) -> None:
    for signal in SIGNALS:
        want = world.oracle.scopes(signal, world.start_s, world.end_s)
        assert want, signal  # the traffic exercises every signal
        assert world.store_source.scopes(signal, world.start_s, world.end_s) == want, signal
        # a sub-range too: scopes are about the range asked for, not the table
        assert world.store_source.scopes(signal, world.start_s, world.start_s + 60) == world.oracle.scopes(
            signal, world.start_s, world.start_s + 60
        )


@pytest.mark.parametrize("step_s", [60.0, 300.0])
def test_series_match_window_by_window(world: World, step_s: float) -> None:
    compared = 0
    for signal in SIGNALS:
        for scope in world.oracle.scopes(signal, world.start_s, world.end_s):
            sla_ms = SLA_MS if signal == "sla_share" else None
            start_s = world.start_s + step_s  # not the table's first window: ranges are honoured
            query = SeriesQuery(signal, scope, start_s, world.end_s, step_s, sla_ms)
            want = world.oracle.series(query)
            got = world.store_source.series(query)
            assert [p.start_s for p in got] == [p.start_s for p in want], f"{signal} {scope}"
            for w, g in zip(want, got, strict=True):
                _check_point(world, query, w, g)
                compared += 1
    assert compared > 500


def test_baseline_reads_skip_examples(world: World) -> None:
    scope = ScopeKey("acme", "support", "generate")
    query = SeriesQuery("latency_p95_ms", scope, world.start_s, world.end_s, 60.0, examples=False)
    points = world.store_source.series(query)
    assert points and all(p.trace_ids == () for p in points)


@pytest.mark.parametrize("signal", ["latency_p95_ms", "top1_score", "similarity_gap", "norm_deviation"])
def test_samples_match(world: World, signal: str) -> None:
    for scope in world.oracle.scopes(signal, world.start_s, world.end_s):
        for start_s, end_s in ((world.start_s, world.end_s), (world.start_s + 600, world.start_s + 900)):
            query = SampleQuery(signal, scope, start_s, end_s)
            want = world.oracle.sample(query)
            got = world.store_source.sample(query)
            assert want.values.size > 0
            assert np.array_equal(np.sort(got.values), np.sort(want.values)), f"{signal} {scope}"
            bad = world.badness(signal, scope)
            assert sorted(bad[t] for t in got.trace_ids) == sorted(bad[t] for t in want.trace_ids)


def test_sample_beyond_max_values_is_a_stable_subsample(world: World) -> None:
    scope = ScopeKey("acme", "search", "search")
    full = world.store_source.sample(SampleQuery("top1_score", scope, world.start_s, world.end_s))
    query = SampleQuery("top1_score", scope, world.start_s, world.end_s, max_values=100)
    first, again = world.store_source.sample(query), world.store_source.sample(query)
    assert full.values.size > 100 and first.values.size == 100
    assert np.array_equal(first.values, again.values)
    assert set(first.values.tolist()) <= set(full.values.tolist())


def test_series_without_data_is_empty_and_misaligned_windows_are_refused(world: World) -> None:
    scope = ScopeKey("acme", "support", "generate")
    before = world.start_s - 3600
    assert world.store_source.series(SeriesQuery("error_rate", scope, before, world.start_s, 60.0)) == []
    assert world.store_source.series(SeriesQuery("faithfulness", ScopeKey("nobody", "x", ""), before, 0, 60)) == []
    assert world.store_source.sample(SampleQuery("error_rate", scope, world.start_s, world.end_s)).values.size == 0
    with pytest.raises(ValueError, match="whole minutes"):
        world.store_source.series(SeriesQuery("latency_p95_ms", scope, world.start_s + 30, world.end_s, 60.0))
