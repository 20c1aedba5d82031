"""The canary analysis (`ragmon.drift.canary`) over a real store: a new release is looked at once it has served
enough requests and again as its traffic doubles; a release that broke one question raises one alert naming the
release, the question as users asked it, the paragraph it stopped retrieving and example traces, linking to the
comparison — while its mean quality rose; a release that changes nothing raises nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ragmon.sinks import Store, open_store

from ragmon.drift import AlertsConfig, CanaryAnalysis, CanaryConfig
from tests.support.release_rows import Group, Traffic, write

T0 = 1_800_000_000
RESET = "How do I reset my password?"
GROUPS_A = (
    Group("g-reset", RESET, 1 / 3, ("para-7", "para-3"), faithfulness=0.7, refusal_rate=0.02),
    Group("g-bill", "Where is my invoice?", 1 / 3, ("para-1", "para-4"), faithfulness=0.7, document_rate=0.8),
    Group("g-ship", "When will my order ship?", 1 / 3, ("para-5",), faithfulness=0.7, error_rate=0.02),
)
GROUPS_B = (
    Group("g-reset", RESET, 1 / 3, ("para-2", "para-3"), faithfulness=0.8, refusal_rate=0.6),
    Group("g-bill", "Where is my invoice?", 1 / 3, ("para-1", "para-4"), faithfulness=0.9, document_rate=0.8),
    Group("g-ship", "When will my order ship?", 1 / 3, ("para-5",), faithfulness=0.9, error_rate=0.02),
)


@pytest.fixture
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    opened = open_store(str(chdb_engine_dir), database=f"t_{uuid.uuid4().hex[:12]}")
    yield opened
    opened.close()


def _grow(store: Store, canary: CanaryAnalysis, groups_b: tuple[Group, ...], sizes: list[int], seed: int) -> list:
    """Release A for an hour, then B's traffic in stretches of `sizes` requests, the canary run after each: each
    run's alerts and the looks taken so far."""
    write(store, [Traffic("A", T0, 900, 4.0, GROUPS_A)], seed=seed)
    alerts, start = [], T0 + 3600.0
    for i, n in enumerate(sizes):
        write(store, [Traffic("B", start, n, 2.0, groups_b)], seed=seed * 1000 + i + 1)
        start += 2.0 * n
        alerts.append((canary.evaluate(), canary.looks))
    return alerts


def test_a_release_that_broke_one_question_is_named_with_its_question_and_paragraph(store: Store) -> None:
    canary = CanaryAnalysis(CanaryConfig(), store, clock=lambda: 0.0)
    looks = _grow(store, canary, GROUPS_B, [150, 150, 300], seed=1)
    # 150 requests: below the minimum, no look yet; then at 300 and at 600 (twice as many)
    assert [taken for _, taken in looks] == [0, 1, 2]
    fired = [record for records, _ in looks for record in records]
    # one alert for the question (the overall refusal rate rose with it: an alert of its own, without a question)
    by_question = [r for r in fired if "question" in r.labels]
    assert len(by_question) == 1, [r.message for r in fired]
    assert all(r.labels["release"] == "B" for r in fired) and len(fired) <= 2
    alert = by_question[0]
    assert (alert.rule, alert.feature, alert.labels["release"], alert.labels["baseline_release"]) == (
        "canary",
        "support",
        "B",
        "A",
    )
    assert alert.labels["question"] == RESET and alert.labels["stopped_retrieving"] == "para-7"
    assert RESET in alert.message and "para-7" in alert.message and "release B" in alert.message
    assert alert.trace_ids and all(t in alert.message for t in alert.trace_ids)
    assert alert.labels["link"] == "#/compare?feature=support&baseline=A&candidate=B&group=g-reset"
    # the point: overall, judged quality rose
    overall = store.compare("support")
    quality = next(r for r in overall["rows"] if r["metric"] == "quality")
    assert quality["delta"] > 0 and quality["ci_low"] > 0


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_a_release_that_changes_nothing_raises_nothing(store: Store, seed: int) -> None:
    canary = CanaryAnalysis(CanaryConfig(), store, clock=lambda: 0.0)
    looks = _grow(store, canary, GROUPS_A, [200, 200, 400], seed=seed)
    assert looks == [([], 1), ([], 2), ([], 3)]


def test_canary_settings_are_checked() -> None:
    assert AlertsConfig.model_validate({}).canary.min_requests == 200
    with pytest.raises(ValueError, match="canary names undefined channel"):
        AlertsConfig.model_validate({"canary": {"channels": ["pager"]}})
    with pytest.raises(ValueError):
        AlertsConfig.model_validate({"canary": {"min_requests": 5}})
