"""Releases in the store's reads (schema v10): the report, judged quality and the releases read narrowed to one
release or environment, and each release seen side by side — on chDB and through a ClickHouse server (HTTP)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ragmon.sinks import Store
from ragmon.sinks.named_reads import BadParameter, named_read, run_read
from ragmon.sinks.traffic import Traffic

from tests.support.span_rows import SpanBatch, insert_spans
from tests.support.synth import make_batch


def _released(batch: SpanBatch, release: str, environment: str, *, root_only: bool = False) -> SpanBatch:
    """The batch as sent by `release` in `environment`; with `root_only` only the app's own (root) span says so."""
    roots = [stage == "request" for stage in batch.stage]
    batch.release = [release if root or not root_only else "" for root in roots]
    batch.environment = [environment if root or not root_only else "" for root in roots]
    return batch


def _requests(report: list[dict[str, Any]]) -> int:
    return sum(row["requests"] for row in report if row["stage"] == "request")


@pytest.fixture
def released(store: Store) -> dict[str, int]:
    """Release 2.3.0 in prod since 50 minutes ago, 2.3.1 in prod and staging since 20, an eval run of 2.3.1
    (not production), and judged scores of both releases."""
    now_s = int(time.time())
    old = _released(
        make_batch(40, seed=1, start_ns=(now_s - 3000) * 10**9, spread_s=600, features=("qa",)), "2.3.0", "prod"
    )
    new = make_batch(30, seed=2, start_ns=(now_s - 1200) * 10**9, spread_s=300, features=("qa",), error_rate=0.0)
    _released(new, "2.3.1", "prod", root_only=True)  # a downstream service's spans carry no release of ours
    staging = _released(make_batch(10, seed=3, start_ns=(now_s - 1200) * 10**9, features=("qa",)), "2.3.1", "staging")
    nightly = make_batch(7, seed=4, start_ns=(now_s - 1200) * 10**9, features=("qa",), eval_run="nightly")
    for batch in (old, new, staging, _released(nightly, "2.3.1", "prod")):
        insert_spans(store, batch)
    store.roll_up(0, 0)

    scored = datetime.now(UTC) - timedelta(minutes=1)
    base = {"tenant": "acme", "feature": "qa", "start_time": scored, "question": "q", "answer": "a"}
    payloads, scores = [], []
    for i, (release, environment, value, p) in enumerate(
        [("2.3.0", "prod", 0.6, 0.5)] * 4 + [("2.3.1", "prod", 0.9, 0.25)] * 3 + [("2.3.1", "staging", 0.1, 1.0)]
    ):
        trace = f"{i + 1:032x}"
        payloads.append({**base, "trace_id": trace, "release": release, "environment": environment})
        score = {"tenant": "acme", "trace_id": trace, "feature": "qa", "metric": "faithfulness", "judge_version": "v1"}
        scores.append(
            score
            | {"status": "ok", "value": value, "run_name": "", "scored_at": scored, "release": release}
            | {"inclusion_probability": p}
        )
    store.insert_payloads(payloads)
    store.insert_scores(scores)
    return {"old": 40, "new": 30, "staging": 10}


def test_the_report_and_quality_narrow_to_a_release_and_an_environment(store: Store, released: dict[str, int]) -> None:
    assert _requests(store.report(3600)) == 80
    assert _requests(store.report(3600, release="2.3.0")) == 40
    assert _requests(store.report(3600, release="2.3.1")) == 40
    assert _requests(store.report(3600, release="2.3.1", environment="prod")) == 30
    # the trace's release counts for its every stage, though only its root span said it
    search = [row for row in store.report(3600, release="2.3.1", environment="prod") if row["stage"] == "search"]
    assert sum(row["requests"] for row in search) == 30
    assert store.report(3600, release="9.9.9") == []
    assert _requests(store.report(3600, release="2.3.1", traffic=Traffic.of(eval_run="nightly"))) == 7

    def means(**where: str) -> list[float]:
        return [row["weighted"]["mean"] for row in store.quality(3600, **where)]

    assert means(release="2.3.0") == [pytest.approx(0.6)]
    assert means(release="2.3.1", environment="prod") == [pytest.approx(0.9)]
    assert means(environment="staging") == [pytest.approx(0.1)]


def test_the_releases_read_puts_each_release_side_by_side(store: Store, released: dict[str, int]) -> None:
    rows = store.releases(3600)
    assert [(row["feature"], row["release"], row["environments"], row["requests"]) for row in rows] == [
        ("qa", "2.3.0", ["prod"], 40),
        ("qa", "2.3.1", ["prod", "staging"], 40),  # the eval run's 7 requests are not production
    ]
    old, new = rows
    assert old["first_seen"] < new["first_seen"] and old["last_seen"] < new["first_seen"]
    assert datetime.fromisoformat(new["first_seen"]) >= datetime.now(UTC) - timedelta(minutes=21)
    assert new["error_rate"] == pytest.approx(new["errors"] / 40)
    assert old["p95_ms"] is not None and old["p95_ms"] > 0
    (old_quality,) = old["quality"]
    assert (old_quality["metric"], old_quality["judged"]) == ("faithfulness", 4)
    assert old_quality["weighted"]["mean"] == pytest.approx(0.6)
    # weighted by 1 / inclusion probability: 3 × 0.9 at weight 4, 1 × 0.1 at weight 1
    assert new["quality"][0]["weighted"]["mean"] == pytest.approx((3 * 4 * 0.9 + 0.1) / 13)
    assert new["quality"][0]["kept"]["mean"] == pytest.approx((3 * 0.9 + 0.1) / 4)
    (prod,) = store.releases(3600, release="2.3.1", environment="prod")
    assert (prod["requests"], prod["errors"], prod["quality"][0]["judged"]) == (30, 0, 3)
    nightly = store.releases(3600, traffic=Traffic.of(eval_run="nightly"))
    assert [(row["release"], row["requests"], row["quality"]) for row in nightly] == [("2.3.1", 7, [])]


def test_the_named_reads_take_a_release_and_an_environment(store: Store, released: dict[str, int]) -> None:
    read = named_read("releases")
    values = read.parse({"since_s": ["3600"], "release": ["2.3.1"], "environment": ["staging"]})
    (row,) = run_read(store, "releases", values, tenant="acme")
    assert (row["release"], row["requests"]) == ("2.3.1", 10)
    assert run_read(store, "releases", values, tenant="other") == []
    report = run_read(store, "report", named_read("report").parse({"release": ["2.3.0"]}), tenant="acme")
    assert _requests(report) == 40
    with pytest.raises(BadParameter, match="kept_share does not take release"):
        named_read("kept_share").parse({"release": ["2.3.0"]})
