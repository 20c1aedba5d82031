"""`Store.compare` (the named read `compare`): a candidate release against a baseline, over rows whose numbers the
test chose — the figures equal what Python computes from the same rows, the intervals follow their stated methods,
and the question group whose paragraph stopped being retrieved comes first, on chDB and through a server."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from ragmon.sinks import Store
from ragmon.sinks.compare import choose_windows
from ragmon.sinks.intervals import holm, newcombe, quantile_rank, quantile_ranks, wilson
from ragmon.sinks.named_reads import run_read

from tests.support.release_rows import Group, Traffic, write

T0 = 1_800_000_000
RESET_A = Group("g-reset", "How do I reset my password?", 1 / 3, ("para-7", "para-3"), faithfulness=0.7)
BILL_A = Group("g-bill", "Where is my invoice?", 2 / 3, ("para-1",), faithfulness=0.7, error_rate=0.02)
RESET_B = Group(
    "g-reset", "How do I reset my password?", 1 / 3, ("para-2", "para-3"), faithfulness=0.8, refusal_rate=0.8
)
BILL_B = Group("g-bill", "Where is my invoice?", 2 / 3, ("para-1",), faithfulness=0.9, error_rate=0.02)


def _row(rows: list[dict], metric: str, part: str = "") -> dict:
    return next(r for r in rows if r["metric"] == metric and r["part"] == part)


def test_compare_equals_the_rows_numbers_and_names_the_broken_question(store: Store) -> None:
    written = write(
        store, [Traffic("A", T0, 900, 4.0, (RESET_A, BILL_A)), Traffic("B", T0 + 3600, 300, 4.0, (RESET_B, BILL_B))]
    )
    out = run_read(store, "compare", {"feature": "support", "baseline": None, "candidate": None})
    assert out["mode"] == "sequential"
    assert (out["baseline"]["release"], out["candidate"]["release"]) == ("A", "B")
    a, b = written.traces["A"], written.traces["B"]

    # error rate: exact counts, Newcombe's interval
    errors = _row(out["rows"], "error_rate")
    x_a, x_b = sum(t["failed"] for t in a), sum(t["failed"] for t in b)
    assert (errors["n_baseline"], errors["n_candidate"]) == (len(a), len(b))
    assert errors["baseline"] == pytest.approx(x_a / len(a)) and errors["candidate"] == pytest.approx(x_b / len(b))
    assert (errors["ci_low"], errors["ci_high"]) == pytest.approx(newcombe(x_a, len(a), x_b, len(b)))

    # request p95: the order statistic at rank ⌈0.95 n⌉, the interval from the 97.5 % ranks of each side
    p95 = _row(out["rows"], "p95_ms", "request")
    sorted_a = np.sort([t["duration_ms"] for t in a])
    sorted_b = np.sort([t["duration_ms"] for t in b])
    assert p95["baseline"] == pytest.approx(sorted_a[quantile_rank(len(a)) - 1])
    assert p95["candidate"] == pytest.approx(sorted_b[quantile_rank(len(b)) - 1])
    (ra, sa), (rb, sb) = quantile_ranks(len(a)), quantile_ranks(len(b))
    assert p95["ci_low"] == pytest.approx(sorted_b[rb - 1] - sorted_a[sa - 1])
    assert p95["ci_high"] == pytest.approx(sorted_b[sb - 1] - sorted_a[ra - 1])

    # cost per request: the mean of each trace's cost
    cost = _row(out["rows"], "cost_per_request_usd")
    assert cost["baseline"] == pytest.approx(np.mean([t["cost"] for t in a]))

    # quality weighted by 1/p rises overall ...
    quality = _row(out["rows"], "quality", "faithfulness")
    kept_a = [t["value"] for t in a if t["kept"] and t["value"] is not None]
    assert quality["baseline"] == pytest.approx(np.mean(kept_a))  # one p: the Hájek mean is the plain mean
    assert quality["delta"] > 0.1 and quality["ci_low"] > 0

    # ... while the most common question lost its paragraph: it comes first, and says so
    first = out["groups"][0]
    assert first["group_id"] == "g-reset" and first["question"] == "How do I reset my password?"
    assert first["regressed"] and first["stopped_retrieving"] == ["para-7"]
    lost = first["documents"][0]
    assert lost["document"] == "para-7" and lost["baseline"] == 1.0 and lost["candidate"] == 0.0
    assert set(first["example_traces"]) <= {t["trace_id"] for t in b if t["group"] == "g-reset"}
    assert _row(first["rows"], "refusal_rate")["regressed"]
    assert not out["groups"][1]["regressed"]


def test_side_by_side_when_the_baseline_still_serves(store: Store) -> None:
    write(store, [Traffic("A", T0, 600, 2.0, (BILL_A,)), Traffic("B", T0 + 600, 200, 3.0, (BILL_B,))], seed=2)
    out = store.compare("support")
    assert out["mode"] == "side by side"
    assert out["baseline"]["start_ns"] == out["candidate"]["start_ns"] == (T0 + 600) * 10**9


def test_a_comparison_it_cannot_make_says_why(store: Store) -> None:
    write(store, [Traffic("A", T0, 50, 2.0, (BILL_A,))])
    assert "no release before 'A'" in store.compare("support")["problem"]
    assert "no traffic of release 'C'" in store.compare("support", candidate="C")["problem"]
    assert store.compare(None, tenant="nobody")["problem"].startswith("no feature has a release")


def test_default_releases_are_the_two_first_seen_last() -> None:
    releases = [{"release": n, "first_ns": f, "last_ns": f + 10} for n, f in (("B", 200), ("A", 100), ("C", 300))]
    windows, mode = choose_windows(releases, None, None, lambda *_: 0)  # type: ignore[misc]
    assert (windows.baseline, windows.candidate, mode) == ("B", "C", "sequential")


def test_newcombe_matches_the_published_example() -> None:
    # Newcombe (1998), Statistics in Medicine 17:873, table II, example (a): 56/70 vs 48/80, method 10
    low, high = newcombe(48, 80, 56, 70)
    assert (round(low, 4), round(high, 4)) == (0.0524, 0.3339)
    assert tuple(round(v, 4) for v in wilson(0, 10)) == (0.0, 0.2775)


def test_order_statistic_ranks_cover_the_p95() -> None:
    for n in (86, 100, 400, 3000):
        r, s = quantile_ranks(n)
        # P(r ≤ X < s) for X ~ binomial(n, 0.95), exactly
        coverage = sum(math.comb(n, k) * 0.95**k * 0.05 ** (n - k) for k in range(r, s))
        assert coverage >= 0.975
    assert quantile_ranks(85) is None
    rng = random.Random(1)
    misses = 0
    for _ in range(400):
        values = sorted(rng.expovariate(1) for _ in range(200))
        r, s = quantile_ranks(200)
        misses += not values[r - 1] <= -math.log(0.05) <= values[s - 1]
    assert misses <= 400 * 0.05  # expected ≤ 2.5 %


def test_holm() -> None:
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_a_busy_windows_document_shares_come_from_a_sample_of_its_traces(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ragmon.sinks.compare as compare_module

    write(store, [Traffic("A", T0, 900, 4.0, (RESET_A, BILL_A)), Traffic("B", T0 + 3600, 300, 4.0, (RESET_B, BILL_B))])
    monkeypatch.setattr(compare_module, "MAX_DOCUMENT_TRACES", 300)  # 1,200 grouped traces: one in four counted
    first = store.compare("support")["groups"][0]
    lost = first["documents"][0]
    assert first["stopped_retrieving"] == ["para-7"] and (lost["baseline"], lost["candidate"]) == (1.0, 0.0)
    assert 0 < lost["n_baseline"] < first["traces_baseline"] and 0 < lost["n_candidate"] < first["traces_candidate"]
