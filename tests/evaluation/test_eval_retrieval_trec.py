"""Retrieval metrics equal trec_eval's (pytrec-eval-terrier) to 1e-9: on Cranfield's golden file and random runs."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ragmon.evaluation.retrieval import evaluate
from ragmon.evaluation.trec_files import read_qrels, read_run

TOLERANCE = 1e-9
GOLDEN_KEYS = {"P_5": "P@5", "recall_10": "R@10", "recip_rank": "MRR", "ndcg_cut_10": "nDCG@10"}


def test_cranfield_equals_golden_per_query_and_mean(cranfield: Path, golden: dict[str, Any]) -> None:
    report = evaluate(read_qrels(cranfield / "qrels.tsv"), read_run(cranfield / "run_bm25_top100.tsv"), (5, 10))
    assert set(report.per_query) == set(golden["per_query"])
    for qid, expected in golden["per_query"].items():
        for theirs, ours in GOLDEN_KEYS.items():
            assert report.per_query[qid][ours] == pytest.approx(expected[theirs], abs=TOLERANCE), (qid, ours)
    for theirs, ours in GOLDEN_KEYS.items():
        assert report.mean[ours] == pytest.approx(golden["mean"][theirs], abs=TOLERANCE)


pytrec_eval = pytest.importorskip("pytrec_eval")
KS = (1, 3, 5, 10, 20)
MEASURES = {f"{name}.{','.join(map(str, KS))}" for name in ("P", "recall", "ndcg_cut", "success")} | {"recip_rank"}


def _compare(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], level: int) -> int:
    theirs = pytrec_eval.RelevanceEvaluator(qrels, MEASURES, relevance_level=level).evaluate(run)
    ours = evaluate(qrels, run, KS, relevance_level=level)
    assert set(ours.per_query) == set(theirs)
    for qid, values in theirs.items():
        mine = ours.per_query[qid]
        for k in KS:
            for name, key in (("P", "P"), ("recall", "R"), ("ndcg_cut", "nDCG"), ("success", "hit")):
                assert mine[f"{key}@{k}"] == pytest.approx(values[f"{name}_{k}"], abs=TOLERANCE), (qid, key, k)
            precision, recall = values[f"P_{k}"], values[f"recall_{k}"]
            f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
            assert mine[f"F1@{k}"] == pytest.approx(f1, abs=TOLERANCE)
        assert mine["MRR"] == pytest.approx(values["recip_rank"], abs=TOLERANCE)
    if theirs:
        for key, name in (("P@5", "P_5"), ("nDCG@10", "ndcg_cut_10"), ("MRR", "recip_rank")):
            expected = math.fsum(v[name] for v in theirs.values()) / len(theirs)
            assert ours.mean[key] == pytest.approx(expected, abs=TOLERANCE)
    return len(theirs)


@pytest.mark.parametrize("seed", range(40))
def test_random_runs_equal_pytrec_eval(seed: int, make_random_case: Callable[[int], Any]) -> None:
    qrels, run = make_random_case(seed)
    assert _compare(qrels, run, level=1) >= 0
    _compare(qrels, run, level=2)


def test_random_cases_cover_the_awkward_shapes(make_random_case: Callable[[int], Any]) -> None:
    # Guard the generator: the equality test above is only as good as the cases it sees.
    seen = {"tie": False, "empty": False, "run_only": False, "qrels_only": False, "no_relevant": False}
    for seed in range(40):
        qrels, run = make_random_case(seed)
        seen["run_only"] |= any(q not in qrels for q in run)
        seen["qrels_only"] |= any(q not in run for q in qrels)
        seen["empty"] |= any(not docs for q, docs in run.items() if q in qrels)
        seen["tie"] |= any(len(set(d.values())) < len(d) for d in run.values())
        seen["no_relevant"] |= any(q in run and not any(g >= 1 for g in j.values()) for q, j in qrels.items())
    assert all(seen.values()), seen


def test_trec_files_read_like_pytrec_eval(tmp_path: Path, make_random_case: Callable[[int], Any]) -> None:
    qrels, run = make_random_case(3)
    qrels_path, run_path = tmp_path / "q.qrels", tmp_path / "r.run"
    qrels_path.write_text("".join(f"{q} 0 {d} {g}\n" for q, j in qrels.items() for d, g in j.items()))
    run_path.write_text(
        "".join(f"{q} Q0 {d} {i + 1} {s!r} tag\n" for q, docs in run.items() for i, (d, s) in enumerate(docs.items()))
    )
    with qrels_path.open() as handle:
        assert read_qrels(qrels_path) == pytrec_eval.parse_qrel(handle)
    with run_path.open() as handle:
        theirs = {q: docs for q, docs in pytrec_eval.parse_run(handle).items()}
    assert read_run(run_path) == {q: docs for q, docs in run.items() if docs}
    assert read_run(run_path) == theirs


def test_complete_flag_scores_missing_queries_zero_like_trec_eval_c() -> None:
    qrels = {"1": {"a": 1}, "2": {"b": 1}}
    run = {"1": {"a": 1.0}}
    assert list(evaluate(qrels, run).per_query) == ["1"]
    report = evaluate(qrels, run, complete=True)
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"P.5", "recip_rank"}).evaluate({"1": {"a": 1.0}, "2": {}})
    assert report.per_query["2"]["P@5"] == theirs["2"]["P_5"] == 0.0
    assert report.mean["MRR"] == pytest.approx(0.5)
    assert report.unretrieved_queries == ("2",)
