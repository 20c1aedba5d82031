"""Per-row metrics of an evaluation run: one dataset row, the app's answer and the trace's spans in, a results row
(`ragmon.evaluation.gate_runs` format) out.

Metric names in the results file (null when not measurable for the row — never a silent 0):

- retrieval, against the row's ``relevant`` paragraphs (trec_eval conventions, `ragmon.evaluation.retrieval`):
  ``search.P@k``, ``search.R@k``, ``search.F1@k``, ``search.nDCG@k``, ``search.hit@k``, ``search.MRR`` over the
  documents of the trace's search spans (in start order, concatenated: an agent that searched twice put both
  lists in front of the model; a repeated document counts once), and the same under ``rerank.`` for the last
  rerank span's output (what reached the prompt). Null without such a span, or when the row has no relevant
  paragraph (unjudged, as trec_eval skips it).
- answers: ``exact_match`` and ``token_f1`` (with a reference answer), ``fact_recall`` (with facts),
  ``must_not_violations`` (with must-not phrases);
- refusal: ``refusal_correct`` (1 when an unanswerable row was refused or an answerable one answered); the
  outcome is written beside the metrics as ``refusal`` ("correct_refusal", "wrong_refusal", …);
- trajectory (rows with an ``expected_plan``): ``tool_precision``, ``tool_recall``, ``tool_f1``,
  ``argument_accuracy``, ``steps``, ``budget_stop``.

Checks (the row's verdict is all of them): ``facts`` (every fact stated, no must-not phrase), ``refusal``,
``trajectory`` (plan matched), and ``app_error`` false. A row whose app call raised fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragmon import attributes as attr
from ragmon.evaluation.answers import Fact, check_facts, exact_match, token_f1
from ragmon.evaluation.dataset import DatasetRow
from ragmon.evaluation.refusal import is_refusal, refusal_outcome
from ragmon.evaluation.retrieval import DEFAULT_KS, evaluate_ranked
from ragmon.evaluation.trajectory import SpanRecord, budget_stopped, score_trajectory, tool_calls

# Metrics where a rise is the regression; `ragmon gate` treats them so without being told.
LOWER_IS_BETTER: frozenset[str] = frozenset({"steps", "budget_stop", "must_not_violations"})


@dataclass(frozen=True)
class AppResult:
    """What the app returned for a row (see `ragmon.evaluation.app_entry`); ``error`` set when it raised."""

    answer: str = ""
    refused: bool | None = None  # None: decide with `is_refusal`
    trace_id: str | None = None
    error: str | None = None


@dataclass
class RowResult:
    row_id: str
    question_id: str
    metrics: dict[str, float | None] = field(default_factory=dict)
    checks: dict[str, bool] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(self.checks.values())

    def to_json(self) -> dict[str, Any]:
        """One line of the results file (extra keys — answer, trace ids — are ignored by the gate)."""
        return {
            "row_id": self.row_id,
            "question_id": self.question_id,
            "metrics": self.metrics,
            "checks": self.checks,
            "passed": self.passed,
            **self.details,
        }


def ranked_documents(spans: Iterable[SpanRecord], stage: str) -> list[str] | None:
    """Document ids in rank order from ``gen_ai.retrieval.documents`` (search: all spans concatenated in start
    order; rerank: the last span). None when the trace has no span of that stage."""
    chosen = sorted((s for s in spans if s.stage == stage), key=lambda s: s.start_ns)
    if not chosen:
        return None
    if stage == "rerank":
        chosen = chosen[-1:]
    ids: list[str] = []
    for span in chosen:
        ids.extend(_document_ids(span.attributes))
    return ids


def _document_ids(attributes: Mapping[str, Any]) -> list[str]:
    raw = attributes.get(attr.GEN_AI_RETRIEVAL_DOCUMENTS)
    if raw is not None:
        try:
            documents = json.loads(str(raw))
            return [str(d["id"]) for d in documents if isinstance(d, Mapping) and "id" in d]
        except (ValueError, TypeError):
            pass
    listed = attributes.get(attr.RAGMON_DOCUMENT_IDS)
    return [str(i) for i in listed] if isinstance(listed, list | tuple) else []


def retrieval_metrics(row: DatasetRow, spans: Sequence[SpanRecord], ks: Sequence[int]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for stage in ("search", "rerank"):
        ranked = ranked_documents(spans, stage)
        report = None
        if ranked is not None and any(grade >= 1 for grade in row.relevant.values()):
            report = evaluate_ranked({row.id: row.qrels}, {row.id: ranked}, ks)
        names = [f"{family}@{k}" for family in ("P", "R", "F1", "nDCG", "hit") for k in ks] + ["MRR"]
        values = report.per_query.get(row.id) if report is not None else None
        for name in names:
            out[f"{stage}.{name}"] = None if values is None else values[name]
    return out


def score_row(
    row: DatasetRow, result: AppResult, spans: Sequence[SpanRecord], *, ks: Sequence[int] = DEFAULT_KS
) -> RowResult:
    """Every metric and check of one row (names in the module docstring)."""
    out = RowResult(row_id=row.id, question_id=row.id)
    out.details["trace_ids"] = sorted({s.trace_id for s in spans if s.trace_id} | ({result.trace_id} - {None}))
    if result.error is not None:
        out.details["error"] = result.error
        out.checks["app_error"] = False
        return out
    out.checks["app_error"] = True
    answer = result.answer
    out.details["answer"] = answer
    out.metrics.update(retrieval_metrics(row, spans, ks))
    if row.reference_answer:
        out.metrics["exact_match"] = exact_match(answer, row.reference_answer)
        out.metrics["token_f1"] = token_f1(answer, row.reference_answer)
    refused = result.refused if result.refused is not None else is_refusal(answer)
    outcome = refusal_outcome(answerable=row.answerable, refused=refused)
    out.metrics["refusal_correct"] = float(outcome.correct)
    out.details["refusal"] = outcome.value
    out.checks["refusal"] = outcome.correct
    if row.facts or row.must_not:
        facts = [Fact(alternatives=f.alternatives, name=f.name) for f in row.facts]
        check = check_facts(answer, facts, row.must_not)
        if row.facts:
            out.metrics["fact_recall"] = check.fact_recall
        if row.must_not:
            out.metrics["must_not_violations"] = float(len(check.forbidden_found))
        out.checks["facts"] = check.passed
        if not check.passed:
            out.details["facts_missing"] = list(check.missing)
            out.details["forbidden_found"] = list(check.forbidden_found)
    if row.expected_plan is not None:
        trajectory = score_trajectory(row.expected_plan, tool_calls(spans), budget_stop=budget_stopped(spans))
        out.metrics.update(trajectory.metrics())
        out.checks["trajectory"] = trajectory.plan_matched
        out.details["plan"] = trajectory.plan_label
        if not trajectory.plan_matched:
            out.details["missing_tools"] = list(trajectory.missing_tools)
            out.details["unexpected_tools"] = list(trajectory.unexpected_tools)
    elif budget_stopped(spans):
        out.metrics["budget_stop"] = 1.0
    return out
