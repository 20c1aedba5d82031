"""Offline evaluation: trec_eval-equal retrieval metrics, answer checks, refusals, triage, a K sweep and a CI gate.

Imported by the ``ragmon eval`` / ``ragmon gate`` commands and by users' CI, never by ``import ragmon``. Needs
numpy (the ``agent`` extra). Names load lazily, so ``ragmon.evaluation.cli`` can build its parser without numpy.

Modules, one job each:

- `trec_files` — read TREC / headed-TSV qrels and runs;
- `retrieval` — P@K, R@K, F1@K, nDCG@K, hit@K, MRR with trec_eval's conventions (documented there);
- `paragraphs` — paragraph-level judging of chunk runs (labels that survive re-chunking);
- `answers` — exact match, token F1, fact checks, embedding similarity;
- `refusal` — correct and wrong refusals;
- `triage` — which surface failed, per question;
- `sweep` — Recall@K against answer quality, and the knee;
- `gate_runs`, `bootstrap`, `gate`, `gate_report` — the regression gate's input format, intervals, rules, reports;
- `dataset` — the JSONL format of labelled questions and its loader;
- `trajectory` — agent trajectories from tool spans: tool precision/recall, argument accuracy, steps, budget stops;
- `app_entry`, `run_tracing`, `row_metrics`, `eval_run`, `demo_entry` — ``ragmon eval run``: the app protocol,
  span tagging and collection, per-row scoring, the driver, the demo app as an entry point;
- `backeval_source`, `backeval_cost`, `backeval_journal`, `backeval` — ``ragmon backeval``: kept traces from the
  store or the agent, the cost estimate, the resumable run journal, the parallel scorer;
- `progress` — the stderr progress bar;
- `cli` — the command-line entry points.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragmon.evaluation.answers import (
        Fact,
        FactCheckResult,
        check_facts,
        exact_match,
        normalise_answer,
        semantic_similarity,
        token_f1,
    )
    from ragmon.evaluation.dataset import DatasetRow, ExpectedPlan, PlanStep, load_dataset, parse_dataset
    from ragmon.evaluation.errors import EvalInputError
    from ragmon.evaluation.gate import GateConfig, GateResult, compare_runs
    from ragmon.evaluation.gate_runs import ResultRow, read_results
    from ragmon.evaluation.paragraphs import RetrievedChunk, evaluate_chunks, read_chunk_run
    from ragmon.evaluation.refusal import RefusalOutcome, is_refusal, refusal_outcome, summarise_refusals
    from ragmon.evaluation.retrieval import RetrievalReport, evaluate, evaluate_ranked
    from ragmon.evaluation.sweep import SweepPoint, SweepResult, k_sweep
    from ragmon.evaluation.trajectory import ToolCall, TrajectoryScore, score_plan, score_trajectory, tool_calls
    from ragmon.evaluation.trec_files import read_qrels, read_run
    from ragmon.evaluation.triage import Diagnosis, TriageInput, TriageResult, TriageThresholds, diagnose, diagnose_all

_EXPORTS: dict[str, str] = {
    "Fact": "answers",
    "FactCheckResult": "answers",
    "check_facts": "answers",
    "exact_match": "answers",
    "normalise_answer": "answers",
    "semantic_similarity": "answers",
    "token_f1": "answers",
    "DatasetRow": "dataset",
    "ExpectedPlan": "dataset",
    "PlanStep": "dataset",
    "load_dataset": "dataset",
    "parse_dataset": "dataset",
    "EvalInputError": "errors",
    "GateConfig": "gate",
    "GateResult": "gate",
    "compare_runs": "gate",
    "ResultRow": "gate_runs",
    "read_results": "gate_runs",
    "RetrievedChunk": "paragraphs",
    "evaluate_chunks": "paragraphs",
    "read_chunk_run": "paragraphs",
    "RefusalOutcome": "refusal",
    "is_refusal": "refusal",
    "refusal_outcome": "refusal",
    "summarise_refusals": "refusal",
    "RetrievalReport": "retrieval",
    "evaluate": "retrieval",
    "evaluate_ranked": "retrieval",
    "SweepPoint": "sweep",
    "SweepResult": "sweep",
    "k_sweep": "sweep",
    "read_qrels": "trec_files",
    "read_run": "trec_files",
    "ToolCall": "trajectory",
    "TrajectoryScore": "trajectory",
    "score_plan": "trajectory",
    "score_trajectory": "trajectory",
    "tool_calls": "trajectory",
    "Diagnosis": "triage",
    "TriageInput": "triage",
    "TriageResult": "triage",
    "TriageThresholds": "triage",
    "diagnose": "triage",
    "diagnose_all": "triage",
}

__all__ = [
    "DatasetRow",
    "Diagnosis",
    "EvalInputError",
    "ExpectedPlan",
    "Fact",
    "FactCheckResult",
    "GateConfig",
    "GateResult",
    "PlanStep",
    "RefusalOutcome",
    "ResultRow",
    "RetrievalReport",
    "RetrievedChunk",
    "SweepPoint",
    "SweepResult",
    "ToolCall",
    "TrajectoryScore",
    "TriageInput",
    "TriageResult",
    "TriageThresholds",
    "check_facts",
    "compare_runs",
    "diagnose",
    "diagnose_all",
    "evaluate",
    "evaluate_chunks",
    "evaluate_ranked",
    "exact_match",
    "is_refusal",
    "k_sweep",
    "load_dataset",
    "normalise_answer",
    "parse_dataset",
    "read_chunk_run",
    "read_qrels",
    "read_results",
    "read_run",
    "refusal_outcome",
    "score_plan",
    "score_trajectory",
    "semantic_similarity",
    "summarise_refusals",
    "token_f1",
    "tool_calls",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ragmon.evaluation' has no attribute {name!r}")
    return getattr(importlib.import_module(f"ragmon.evaluation.{module}"), name)
