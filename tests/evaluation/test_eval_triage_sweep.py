"""Triage on constructed rows, one per diagnosis, and the K sweep's knee."""

from __future__ import annotations

import math

import pytest

from ragmon.evaluation.sweep import k_sweep
from ragmon.evaluation.triage import (
    Diagnosis,
    TriageInput,
    TriageThresholds,
    count_diagnoses,
    diagnose,
    diagnose_all,
)

GOOD = {"context_recall": 0.9, "context_precision": 0.8, "faithfulness": 0.95, "answer_relevance": 0.9}


def _row(**overrides: float | None) -> TriageInput:
    return TriageInput("q", **(GOOD | overrides))


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, Diagnosis.OK),
        ({"faithfulness": 0.3}, Diagnosis.GENERATOR),  # low faithfulness with good context
        ({"answer_relevance": 0.2}, Diagnosis.INSTRUCTION),  # faithful, but not to the question
        ({"context_recall": 0.2}, Diagnosis.RETRIEVAL),  # evidence never arrived
        ({"context_precision": 0.1}, Diagnosis.RERANKING),  # arrived, buried in noise
    ],
)
def test_each_diagnosis(overrides: dict[str, float], expected: Diagnosis) -> None:
    result = diagnose(_row(**overrides))
    assert result.diagnosis is expected
    assert len(result.reasons) == len(result.findings)


def test_upstream_failure_is_primary_and_all_findings_listed() -> None:
    result = diagnose(_row(context_recall=0.2, faithfulness=0.3))
    # An unfaithful answer from missing evidence is a retrieval problem first; the generator rule needs good context.
    assert result.diagnosis is Diagnosis.RETRIEVAL and result.findings == (Diagnosis.RETRIEVAL,)
    both = diagnose(_row(context_precision=0.1, answer_relevance=0.1))
    assert both.findings == (Diagnosis.RERANKING, Diagnosis.INSTRUCTION)


def test_thresholds_are_parameters() -> None:
    row = _row(faithfulness=0.6)
    assert diagnose(row).diagnosis is Diagnosis.GENERATOR
    assert diagnose(row, TriageThresholds(faithfulness=0.5)).diagnosis is Diagnosis.OK


def test_missing_scores_do_not_fire_rules() -> None:
    assert diagnose(TriageInput("q")).diagnosis is Diagnosis.UNKNOWN
    assert diagnose(TriageInput("q", faithfulness=0.1)).diagnosis is Diagnosis.UNKNOWN  # no context signal
    assert diagnose(TriageInput("q", context_recall=math.nan, faithfulness=0.9, answer_relevance=0.9)).diagnosis is (
        Diagnosis.OK
    )
    counts = count_diagnoses(diagnose_all([_row(), _row(context_recall=0.1), TriageInput("x")]))
    assert counts[Diagnosis.OK] == counts[Diagnosis.RETRIEVAL] == counts[Diagnosis.UNKNOWN] == 1
    assert counts[Diagnosis.GENERATOR] == 0


def test_knee_where_recall_saturates_before_quality_falls() -> None:
    recall = {3: 0.55, 5: 0.78, 8: 0.90, 10: 0.91, 15: 0.92}
    quality = {3: 0.60, 5: 0.70, 8: 0.74, 10: 0.74, 15: 0.69}
    result = k_sweep(recall, quality)
    assert result.knee == 8
    assert [p.recall_saturated for p in result.points] == [False, False, True, True, True]
    assert [p.quality_fallen for p in result.points] == [False, False, False, False, True]
    assert result.best_quality_k == 8


def test_no_knee_when_quality_falls_before_recall_saturates() -> None:
    recall = {3: 0.5, 5: 0.6, 8: 0.7, 10: 0.8, 15: 0.9}
    quality = {3: 0.8, 5: 0.82, 8: 0.75, 10: 0.7, 15: 0.6}
    result = k_sweep(recall, quality)
    assert result.knee is None and result.best_quality_k == 5
    assert "before recall saturates" in result.reason


def test_sweep_averages_per_question_values_and_checks_keys() -> None:
    result = k_sweep({3: [0.5, 1.0], 5: [1.0, 1.0]}, {3: [0.5, math.nan], 5: [0.5, 0.5]})
    assert result.points[0].recall == 0.75 and result.points[0].quality == 0.5
    assert result.knee == 5
    with pytest.raises(ValueError):
        k_sweep({3: 0.5}, {5: 0.5})
