"""Retrieval metrics with trec_eval's semantics: P@K, R@K, F1@K, nDCG@K, hit@K and MRR, per query and mean.

The figures equal pytrec-eval-terrier's (trec_eval 9.x) to 1e-9 — ``P_k``, ``recall_k``, ``ndcg_cut_k``,
``success_k`` and ``recip_rank`` — which the tests check on Cranfield and on random runs. The conventions, each
verified against pytrec_eval:

- **Ordering.** A run's order comes from its scores only: score descending, ties broken by document id
  *descending* (trec_eval's ``comp_sim_docno``: ``strcmp(b, a)``, so byte order — ``"9"`` ranks above ``"10"``).
  Rank columns in files are ignored. Ranked lists without scores (`evaluate_ranked`, chunk runs) keep their order.
- **Which queries.** Only queries present in both the run and the qrels are evaluated and averaged (pytrec_eval's
  behaviour, and trec_eval's without ``-c``); a query whose judgement mapping is empty counts as unjudged.
  ``complete=True`` is trec_eval ``-c``: qrels queries absent from the run count with every metric 0. Run queries
  without qrels are always skipped. A query present in the run with an empty ranking is evaluated (all zeros); a
  TREC file cannot express one, so from files it is "absent".
- **Relevance.** A document is relevant when its grade ≥ ``relevance_level`` (default 1); unjudged documents count
  as grade 0; negative grades are judged non-relevant. P, R, F1, hit and MRR use this threshold. nDCG does not:
  as in trec_eval, every positive grade is gain and every negative grade gains 0.
- **Queries with no relevant document** are evaluated: R@K, nDCG@K, MRR are 0 (not undefined), and they count in
  the mean.
- **nDCG@K** is ``ndcg_cut``: linear gain (the grade), discount ``log2(rank + 1)`` (rank 1 undiscounted); the ideal
  DCG@K ranks *all* judged positive grades of the query — retrieved or not — in descending order, cut at K. So
  grades ``[3, 2, 0, 1]`` (and no other relevant documents) give nDCG@4 = 4.6925 / 4.7619 = 0.985; the same at any
  K ≥ 4. (Exponential gain would give 0.993; trec_eval 8's ``log2(rank)`` discount 0.977.)
- **P@K** divides by K even when fewer than K documents were retrieved; **R@K** divides by the number of relevant
  documents; **F1@K** is their harmonic mean (0 when both are 0); **hit@K** is trec_eval's ``success_k``; **MRR**
  is ``recip_rank``: 1 / rank of the first relevant document, no cut-off, 0 when none.
- **Duplicates.** A run (a mapping) cannot hold a document twice; `ragmon.evaluation.trec_files` rejects duplicate
  lines as trec_eval does. Paragraph-level judging of chunk runs (`ragmon.evaluation.paragraphs`) instead counts a
  paragraph at its first occurrence, by design.

The work is done once per query in Python (sorting, judging) and once for all queries in numpy (cumulative sums
over a queries × max-K matrix), which keeps it near the C++ trec_eval's speed (`python benchmarks/eval.py`;
docs/results.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from ragmon.evaluation.errors import EvalInputError

DEFAULT_KS: tuple[int, ...] = (5, 10)
METRIC_FAMILIES: tuple[str, ...] = ("P", "R", "F1", "nDCG", "hit")

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Mapping[str, float]]

# score descending, then docid descending: one reversed sort on (score, docid).
_SCORE_THEN_DOCID = itemgetter(1, 0)


def metric_names(ks: Sequence[int]) -> list[str]:
    """Report keys in print order: each family for every K, then ``MRR``."""
    return [f"{family}@{k}" for family in METRIC_FAMILIES for k in ks] + ["MRR"]


def normalise_ks(ks: Iterable[int]) -> tuple[int, ...]:
    """Sorted, distinct, positive cut-offs; raises `EvalInputError` otherwise."""
    values = sorted(set(ks))
    if not values or values[0] < 1:
        raise EvalInputError(f"cut-offs must be positive integers, got {sorted(ks)!r}")
    return tuple(values)


def qid_sort_key(qid: str) -> tuple[int, int, str]:
    """Numeric ids in numeric order (1, 2, 10), then the rest alphabetically — how people read a per-query table."""
    return (0, int(qid), qid) if qid.isdigit() else (1, 0, qid)


@dataclass(frozen=True)
class RetrievalReport:
    """Per-query and mean metrics, with the queries left out and why."""

    ks: tuple[int, ...]
    per_query: dict[str, dict[str, float]]
    mean: dict[str, float]
    # In the run but without judgements: never evaluated (trec_eval has nothing to score them against).
    unjudged_queries: tuple[str, ...] = ()
    # Judged but absent from the run: skipped, or scored 0 with complete=True.
    unretrieved_queries: tuple[str, ...] = ()
    relevance_level: int = 1
    notes: tuple[str, ...] = field(default=())

    @property
    def num_queries(self) -> int:
        return len(self.per_query)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` shape: ``{"mean": {...}, "per_query": {qid: {...}}}``."""
        return {"mean": dict(self.mean), "per_query": {qid: dict(m) for qid, m in self.per_query.items()}}


@dataclass(frozen=True)
class RankedJudgements:
    """What each rank of each query earned, flattened over queries (lengths say where each query ends).

    ``gains`` feed nDCG, ``hits`` feed P/F1/hit/MRR, ``new_relevant`` (relevant items first reached at that rank)
    feeds recall. For document runs ``new_relevant == hits``; for chunk runs a chunk may newly reach several
    relevant paragraphs. ``ideal`` holds each query's positive grades, descending, cut at the largest K.
    """

    qids: list[str]
    lengths: npt.NDArray[np.int64]
    gains: npt.NDArray[np.float64]
    hits: npt.NDArray[np.bool_]
    new_relevant: npt.NDArray[np.int64]
    num_relevant: npt.NDArray[np.int64]
    ideal: npt.NDArray[np.float64]
    ideal_lengths: npt.NDArray[np.int64]


def _rows_and_columns(lengths: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    offsets = np.cumsum(lengths) - lengths
    rows = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
    columns = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(offsets, lengths)
    return rows, columns


def _top_matrix(
    values: npt.NDArray[Any], rows: npt.NDArray[np.int64], columns: npt.NDArray[np.int64], shape: tuple[int, int]
) -> npt.NDArray[np.float64]:
    matrix = np.zeros(shape, dtype=np.float64)
    keep = columns < shape[1]
    matrix[rows[keep], columns[keep]] = values[keep]
    return matrix


def _discounted_cumulative(gains: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    # Division (not multiplication by a reciprocal) and a left-to-right running sum, as trec_eval accumulates.
    discounts = np.log2(np.arange(2, gains.shape[1] + 2, dtype=np.float64))
    result: npt.NDArray[np.float64] = np.cumsum(gains / discounts, axis=1)
    return result


def score_judgements(judged: RankedJudgements, ks: Sequence[int]) -> dict[str, npt.NDArray[np.float64]]:
    """Every metric for every query, as one array per metric key (queries in ``judged.qids`` order)."""
    ks = normalise_ks(ks)
    n_queries, k_max = len(judged.qids), ks[-1]
    rows, columns = _rows_and_columns(judged.lengths)

    hit_positions = np.flatnonzero(judged.hits)
    reciprocal_rank = np.zeros(n_queries, dtype=np.float64)
    if hit_positions.size:
        # Flat order is query-major, rank-minor, so the first index per query row is its first relevant rank.
        first_rows, first_at = np.unique(rows[hit_positions], return_index=True)
        reciprocal_rank[first_rows] = 1.0 / (columns[hit_positions][first_at] + 1)

    shape = (n_queries, k_max)
    hits_so_far = np.cumsum(_top_matrix(judged.hits, rows, columns, shape), axis=1)
    relevant_so_far = np.cumsum(_top_matrix(judged.new_relevant, rows, columns, shape), axis=1)
    dcg = _discounted_cumulative(_top_matrix(judged.gains, rows, columns, shape))
    ideal_rows, ideal_columns = _rows_and_columns(judged.ideal_lengths)
    ideal_dcg = _discounted_cumulative(_top_matrix(judged.ideal, ideal_rows, ideal_columns, shape))
    num_relevant = judged.num_relevant.astype(np.float64)
    safe_relevant = np.where(num_relevant > 0, num_relevant, 1.0)

    out: dict[str, npt.NDArray[np.float64]] = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in ks:
            at = k - 1
            precision = hits_so_far[:, at] / k
            recall = np.where(num_relevant > 0, relevant_so_far[:, at] / safe_relevant, 0.0)
            total = precision + recall
            out[f"P@{k}"] = precision
            out[f"R@{k}"] = recall
            out[f"F1@{k}"] = np.where(total > 0, 2.0 * precision * recall / np.where(total > 0, total, 1.0), 0.0)
            ideal_at = ideal_dcg[:, at]
            out[f"nDCG@{k}"] = np.where(ideal_at > 0, dcg[:, at] / np.where(ideal_at > 0, ideal_at, 1.0), 0.0)
            out[f"hit@{k}"] = (hits_so_far[:, at] > 0).astype(np.float64)
    out["MRR"] = reciprocal_rank
    return {name: out[name] for name in metric_names(ks)}


def build_report(
    judged: RankedJudgements,
    ks: Sequence[int],
    *,
    unjudged: Iterable[str] = (),
    unretrieved: Iterable[str] = (),
    relevance_level: int = 1,
) -> RetrievalReport:
    """Score ``judged`` and shape the result as per-query dicts and plain means."""
    ks = normalise_ks(ks)
    columns = score_judgements(judged, ks)
    names = list(columns)
    per_query_values = zip(*(columns[name].tolist() for name in names), strict=True) if judged.qids else iter(())
    per_query = {
        qid: dict(zip(names, values, strict=True)) for qid, values in zip(judged.qids, per_query_values, strict=False)
    }
    mean = {name: float(np.mean(columns[name])) if judged.qids else math.nan for name in names}
    return RetrievalReport(
        ks=ks,
        per_query=per_query,
        mean=mean,
        unjudged_queries=tuple(sorted(unjudged, key=qid_sort_key)),
        unretrieved_queries=tuple(sorted(unretrieved, key=qid_sort_key)),
        relevance_level=relevance_level,
    )


def _check_level(relevance_level: int) -> None:
    # At level ≤ 0 trec_eval would count judged grade-0 documents relevant but not unjudged ones; ragmon treats
    # unjudged as grade 0, so such levels would silently disagree. Refuse them instead.
    if relevance_level < 1:
        raise EvalInputError(f"relevance_level must be ≥ 1, got {relevance_level}")


def select_queries(qrels: Qrels, run_qids: Iterable[str], *, complete: bool) -> tuple[list[str], list[str], list[str]]:
    """(queries to evaluate, run queries without qrels, qrels queries without a run) — see the module docstring."""
    run_set = set(run_qids)
    # A query with an empty judgement mapping is no judged query at all (a qrels file cannot express one).
    unjudged = [qid for qid in run_set if not qrels.get(qid)]
    unretrieved = [qid for qid, judged in qrels.items() if judged and qid not in run_set]
    chosen = [qid for qid in run_set if qrels.get(qid)]
    if complete:
        chosen += unretrieved
    return sorted(chosen, key=qid_sort_key), unjudged, unretrieved


def judge_ideal(
    judgements: Mapping[str, int], relevance_level: int, k_max: int, ideal: list[int], ideal_lengths: list[int]
) -> int:
    """Append the query's ideal gains (positive grades, descending, cut at ``k_max``); return its relevant count."""
    grades = judgements.values()
    positive = sorted((grade for grade in grades if grade > 0), reverse=True)[:k_max]
    ideal.extend(positive)
    ideal_lengths.append(len(positive))
    return sum(1 for grade in grades if grade >= relevance_level)


def evaluate(
    qrels: Qrels,
    run: Run,
    ks: Sequence[int] = DEFAULT_KS,
    *,
    relevance_level: int = 1,
    complete: bool = False,
) -> RetrievalReport:
    """trec_eval over a scored run ``{qid: {docid: score}}`` (the shapes pytrec_eval takes)."""
    _check_level(relevance_level)
    ks = normalise_ks(ks)
    chosen, unjudged, unretrieved = select_queries(qrels, run, complete=complete)
    lengths: list[int] = []
    grades: list[int] = []
    ideal: list[int] = []
    ideal_lengths: list[int] = []
    num_relevant: list[int] = []
    empty: Mapping[str, float] = {}
    for qid in chosen:
        judgements = qrels[qid]
        lookup = judgements.get
        ranked = sorted(run.get(qid, empty).items(), key=_SCORE_THEN_DOCID, reverse=True)
        grades.extend([lookup(docid, 0) for docid, _ in ranked])
        lengths.append(len(ranked))
        num_relevant.append(judge_ideal(judgements, relevance_level, ks[-1], ideal, ideal_lengths))
    return build_report(
        _judged_from_grades(chosen, lengths, grades, num_relevant, ideal, ideal_lengths, relevance_level),
        ks,
        unjudged=unjudged,
        unretrieved=unretrieved,
        relevance_level=relevance_level,
    )


def evaluate_ranked(
    qrels: Qrels,
    ranked: Mapping[str, Sequence[str]],
    ks: Sequence[int] = DEFAULT_KS,
    *,
    relevance_level: int = 1,
    complete: bool = False,
) -> RetrievalReport:
    """Like `evaluate`, for ranked id lists whose order is already decided (a search span's documents).

    A document listed twice counts at its first rank only; later copies are non-relevant filler, as a duplicate
    passage in a prompt adds no evidence.
    """
    _check_level(relevance_level)
    ks = normalise_ks(ks)
    chosen, unjudged, unretrieved = select_queries(qrels, ranked, complete=complete)
    lengths: list[int] = []
    grades: list[int] = []
    ideal: list[int] = []
    ideal_lengths: list[int] = []
    num_relevant: list[int] = []
    for qid in chosen:
        judgements = qrels[qid]
        seen: set[str] = set()
        for docid in ranked.get(qid, ()):
            grades.append(0 if docid in seen else judgements.get(docid, 0))
            seen.add(docid)
        lengths.append(len(ranked.get(qid, ())))
        num_relevant.append(judge_ideal(judgements, relevance_level, ks[-1], ideal, ideal_lengths))
    return build_report(
        _judged_from_grades(chosen, lengths, grades, num_relevant, ideal, ideal_lengths, relevance_level),
        ks,
        unjudged=unjudged,
        unretrieved=unretrieved,
        relevance_level=relevance_level,
    )


def _judged_from_grades(
    qids: list[str],
    lengths: list[int],
    grades: list[int],
    num_relevant: list[int],
    ideal: list[int],
    ideal_lengths: list[int],
    relevance_level: int,
) -> RankedJudgements:
    grade_array = np.asarray(grades, dtype=np.int64)
    hits = grade_array >= relevance_level
    return RankedJudgements(
        qids=qids,
        lengths=np.asarray(lengths, dtype=np.int64),
        gains=np.maximum(grade_array, 0).astype(np.float64),
        hits=hits,
        new_relevant=hits.astype(np.int64),
        num_relevant=np.asarray(num_relevant, dtype=np.int64),
        ideal=np.asarray(ideal, dtype=np.float64),
        ideal_lengths=np.asarray(ideal_lengths, dtype=np.int64),
    )
