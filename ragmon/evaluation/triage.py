"""Triage: name the surface that failed for each question, following the diagnosis table.

=========================================  =============  =================================================
signal                                      diagnosis      what to change
=========================================  =============  =================================================
low context recall                          retrieval      the evidence never reached the prompt
low context precision, high recall          reranking      the evidence arrived, buried in noise
low faithfulness with good context          generator      the model strayed from good evidence
good faithfulness, low answer relevance     instruction    faithful to the context, but not to the question
=========================================  =============  =================================================

Rules are checked in pipeline order — retrieval, reranking, generator, instruction — and the first that fires is
the *primary* diagnosis, because an upstream failure explains the downstream ones (an unfaithful answer drawn from
missing evidence is a retrieval problem first). Every rule that fires is listed in ``findings``. A rule whose
inputs are missing (None/NaN) does not fire; when no rule can be evaluated at all the diagnosis is ``UNKNOWN``
rather than ``OK``. Thresholds are parameters: scores ≥ the threshold are "good".
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


class Diagnosis(enum.Enum):
    OK = "ok"
    RETRIEVAL = "retrieval"
    RERANKING = "reranking"
    GENERATOR = "generator"
    INSTRUCTION = "instruction"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class TriageThresholds:
    """A score at or above its threshold is good."""

    context_recall: float = 0.7
    context_precision: float = 0.5
    faithfulness: float = 0.7
    answer_relevance: float = 0.7


@dataclass(frozen=True)
class TriageInput:
    """One question's scores in [0, 1]; None when not measured."""

    question_id: str
    context_recall: float | None = None
    context_precision: float | None = None
    faithfulness: float | None = None
    answer_relevance: float | None = None


@dataclass(frozen=True)
class TriageResult:
    question_id: str
    diagnosis: Diagnosis
    findings: tuple[Diagnosis, ...]
    reasons: tuple[str, ...]


def _known(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def diagnose(row: TriageInput, thresholds: TriageThresholds | None = None) -> TriageResult:
    """Diagnose one question (rules and precedence in the module docstring)."""
    t = thresholds or TriageThresholds()
    findings: list[Diagnosis] = []
    reasons: list[str] = []
    evaluable = False

    recall, precision = row.context_recall, row.context_precision
    faithful, relevant = row.faithfulness, row.answer_relevance
    recall_good = recall >= t.context_recall if recall is not None and _known(recall) else None
    precision_good = precision >= t.context_precision if precision is not None and _known(precision) else None
    faithful_good = faithful >= t.faithfulness if faithful is not None and _known(faithful) else None
    relevant_good = relevant >= t.answer_relevance if relevant is not None and _known(relevant) else None

    if recall_good is not None:
        evaluable = True
        if not recall_good:
            findings.append(Diagnosis.RETRIEVAL)
            reasons.append(f"context recall {recall:.2f} < {t.context_recall}")
    if recall_good is not None and precision_good is not None:
        evaluable = True
        if recall_good and not precision_good:
            findings.append(Diagnosis.RERANKING)
            reasons.append(f"context precision {precision:.2f} < {t.context_precision} with recall {recall:.2f}")
    # "Good context" needs the evidence to have arrived; precision, when known, must not be the problem either,
    # else the reranking finding above already explains a distracted generator.
    context_good = recall_good is True and precision_good is not False
    if faithful_good is not None and recall_good is not None:
        evaluable = True
        if context_good and not faithful_good:
            findings.append(Diagnosis.GENERATOR)
            reasons.append(f"faithfulness {faithful:.2f} < {t.faithfulness} with good context")
    if faithful_good is not None and relevant_good is not None:
        evaluable = True
        if faithful_good and not relevant_good:
            findings.append(Diagnosis.INSTRUCTION)
            reasons.append(f"answer relevance {relevant:.2f} < {t.answer_relevance} though faithful")

    if findings:
        diagnosis = findings[0]
    elif evaluable:
        diagnosis = Diagnosis.OK
    else:
        diagnosis = Diagnosis.UNKNOWN
    return TriageResult(row.question_id, diagnosis, tuple(findings), tuple(reasons))


def diagnose_all(rows: Iterable[TriageInput], thresholds: TriageThresholds | None = None) -> list[TriageResult]:
    return [diagnose(row, thresholds) for row in rows]


def count_diagnoses(results: Iterable[TriageResult]) -> dict[Diagnosis, int]:
    """Primary diagnoses counted, every diagnosis present (zeros included) so reports have stable columns."""
    counts = Counter(result.diagnosis for result in results)
    return {diagnosis: counts.get(diagnosis, 0) for diagnosis in Diagnosis}
