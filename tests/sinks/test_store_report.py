"""The report equals numbers computed in Python from the same spans; p95 within 1% of the exact p95."""

from __future__ import annotations

import math
import time
from collections import defaultdict

import numpy as np
import pytest
from ragmon.sinks import Store
from ragmon.sinks.queries import full_hours
from ragmon.sinks.schema import QUANTILE_ACCURACY

from tests.support.span_rows import SpanBatch, insert_spans
from tests.support.synth import make_batch


def _bracket(values: np.ndarray, level: float) -> tuple[float, float]:
    """The order statistics either side of the exact quantile's rank, widened by one rank and by the sketch's
    0.5% relative accuracy: any correct estimate lies inside, whatever interpolation convention it uses."""
    ordered = np.sort(values.astype(np.float64))
    rank = level * (len(ordered) - 1)
    low = ordered[max(0, math.floor(rank) - 1)]
    high = ordered[min(len(ordered) - 1, math.ceil(rank) + 1)]
    return float(low) * (1 - QUANTILE_ACCURACY), float(high) * (1 + QUANTILE_ACCURACY)


def _expected(batch: SpanBatch, key_fields: tuple[str, ...]) -> dict[tuple[str, ...], dict[str, float]]:
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i in range(len(batch)):
        groups[tuple(getattr(batch, f)[i] for f in key_fields)].append(i)
    out = {}
    for key, idx in groups.items():
        costs = [batch.cost_usd[i] for i in idx if batch.cost_usd[i] is not None]
        durations = np.array([batch.duration_ms[i] for i in idx])
        ttfts = [batch.ttft_ms[i] for i in idx if batch.ttft_ms[i] is not None]
        out[key] = {
            "requests": len(idx),
            "errors": sum(batch.status[i] == "error" for i in idx),
            "input_tokens": sum(batch.input_tokens[i] for i in idx),
            "output_tokens": sum(batch.output_tokens[i] for i in idx),
            "cost_usd": math.fsum(costs) if costs else None,
            "p50_ms": _bracket(durations, 0.5),
            "p95_ms": _bracket(durations, 0.95),
            "p99_ms": _bracket(durations, 0.99),
            "ttft_p95_ms": _bracket(np.array(ttfts, dtype=np.float32), 0.95) if ttfts else None,
        }
    return out


def _check(row: dict, want: dict) -> None:
    assert row["requests"] == want["requests"]
    assert row["errors"] == want["errors"]
    assert row["error_rate"] == pytest.approx(want["errors"] / want["requests"])
    assert row["input_tokens"] == want["input_tokens"]
    assert row["output_tokens"] == want["output_tokens"]
    if want["cost_usd"] is None:
        assert row["cost_usd"] is None and row["cost_per_request_usd"] is None
    else:
        assert row["cost_usd"] == pytest.approx(want["cost_usd"], rel=1e-9)
        assert row["cost_per_request_usd"] == pytest.approx(want["cost_usd"] / want["requests"], rel=1e-9)
    for name in ("p50_ms", "p95_ms", "p99_ms", "ttft_p95_ms"):
        if want[name] is None:
            assert row[name] is None, name
        else:
            low, high = want[name]
            assert low <= row[name] <= high, name


def _store(store: Store, batch: SpanBatch, seq: int) -> None:
    """Insert `batch` as the request with ingest sequence `seq`, and roll it up (as the agent does once the sampler
    has decided its traces)."""
    batch.ingest_seq = [seq] * len(batch)
    insert_spans(store, batch)
    store.roll_up(seq, seq)


def test_report_matches_python(store: Store) -> None:
    batch = make_batch(4_000, seed=11, features=("support", "search", "billing"))
    # Three inserts and roll-ups, so per-minute states are merged across parts as well as across minutes.
    for part in range(3):
        _store(store, batch.take(list(range(part, len(batch), 3))), part + 1)
    report = store.report(3 * 3600)
    want = _expected(batch, ("feature", "stage"))
    assert {(r["feature"], r["stage"]) for r in report} == set(want)
    want_models = _expected(batch, ("feature", "stage", "model"))
    for row in report:
        _check(row, want[(row["feature"], row["stage"])])
        assert {m["model"] for m in row["models"]} == {
            k[2] for k in want_models if k[:2] == (row["feature"], row["stage"])
        }
        for model_row in row["models"]:
            _check(model_row, want_models[(row["feature"], row["stage"], model_row["model"])])


def test_p95_within_one_percent_on_a_bimodal_stream(chdb_store: Store) -> None:
    """Cache hits and misses: two latency modes, ~4k spans per (feature, stage) spread over many minutes."""
    rng = np.random.default_rng(5)
    batch = make_batch(8_000, seed=12, spread_s=3000)
    fast = rng.random(len(batch)) < 0.7
    durations = np.where(fast, rng.lognormal(3.0, 0.3, len(batch)), rng.lognormal(7.5, 0.6, len(batch)))
    batch.duration_ms = [float(d) for d in durations]
    _store(chdb_store, batch, 1)
    for row in chdb_store.report(3 * 3600):
        idx = [i for i in range(len(batch)) if (batch.feature[i], batch.stage[i]) == (row["feature"], row["stage"])]
        exact = float(np.quantile(durations[idx], 0.95))
        assert len(idx) > 3_000
        assert abs(row["p95_ms"] - exact) / exact < 0.01


def test_filters_and_window(store: Store) -> None:
    now_ns = make_batch(1).start_time[0] + 3600 * 10**9  # synth starts an hour ago
    recent = make_batch(100, seed=13, tenants=("acme", "globex"), features=("support", "search"))
    old = make_batch(100, seed=14, start_ns=now_ns - 5 * 3600 * 10**9, spread_s=60)
    _store(store, recent, 1)
    _store(store, old, 2)
    now_s = now_ns / 1e9
    every = store.report(2 * 3600, now_s=now_s)
    assert sum(r["requests"] for r in every) == len(recent)  # the 5-hour-old batch is outside the window
    assert sum(r["requests"] for r in store.report(6 * 3600, now_s=now_s)) == len(recent) + len(old)
    acme = store.report(2 * 3600, tenant="acme", now_s=now_s)
    assert sum(r["requests"] for r in acme) == recent.tenant.count("acme")
    support = store.report(2 * 3600, feature="support", tenant="globex", now_s=now_s)
    assert {r["feature"] for r in support} == {"support"}
    assert sum(r["requests"] for r in support) == sum(
        1 for t, f in zip(recent.tenant, recent.feature, strict=True) if (t, f) == ("globex", "support")
    )
    assert store.report(2 * 3600, tenant="nobody", now_s=now_s) == []


def test_report_reads_only_the_rollup(store: Store) -> None:
    _store(store, make_batch(50, seed=15), 1)
    db = store.topology.database
    store.backend.execute(f"TRUNCATE TABLE {db}.spans")
    assert sum(r["requests"] for r in store.report(7200)) == 250


def test_whole_hours_from_the_hourly_rollup_and_edge_minutes(store: Store) -> None:
    hour0 = (int(time.time()) // 3600 - 7) * 3600
    batch = make_batch(3_000, seed=16, start_ns=hour0 * 10**9, spread_s=6 * 3600)
    for part in range(2):
        _store(store, batch.take(list(range(part, len(batch), 2))), part + 1)
    now_s = hour0 + 5 * 3600 + 1830  # mid-hour and mid-minute: both edges are partial hours
    since_s = 4 * 3600 + 1234
    first_minute = (now_s - since_s) // 60 * 60
    inside = [i for i in range(len(batch)) if first_minute <= batch.start_time[i] // 10**9 // 60 * 60 <= now_s]
    report = store.report(since_s, now_s=now_s)
    want = _expected(batch.take(inside), ("feature", "stage"))
    assert {(r["feature"], r["stage"]) for r in report} == set(want)
    for row in report:
        _check(row, want[(row["feature"], row["stage"])])
    db = store.topology.database
    assert store.query(f"SELECT sum(spans) AS n FROM {db}.spans_1h") == [{"n": len(batch)}]


@pytest.mark.parametrize("start_s", [0, 59, 60, 3540, 3599, 3600, 3601, 7170])
@pytest.mark.parametrize("end_s", [3599, 3600, 7139, 7140, 7199, 7200, 10_799, 14_460])
def test_full_hours_cover_exactly_the_whole_hours_of_the_window(start_s: int, end_s: int) -> None:
    minutes = set(range(start_s // 60 * 60, end_s + 1, 60))
    whole = {h for h in range(0, 20_000, 3600) if set(range(h, h + 3600, 60)) <= minutes}
    first, last = full_hours(start_s, end_s)
    assert set(range(first, last, 3600)) == whole
