"""Benchmark: ragmon's retrieval metrics against pytrec_eval (trec_eval in C++) on the same synthetic run.

10,000 queries × 100 scored documents (scores rounded to 2 decimals, so ties occur), 30 graded judgements per
query, cut-offs 5 and 10: P, recall, nDCG, success (hit) at each, and recip_rank. Both sides start from the same
in-memory dicts; each timing covers everything needed to produce per-query figures from them (pytrec_eval:
building the evaluator and evaluating; ragmon: `evaluate`, including its per-query dicts and means). The two
alternate, repeat, and report medians, since the two cores are shared. The results are compared too, so a fast
wrong answer cannot pass.

    /work/venv/bin/python benchmarks/eval.py [--queries 10000] [--docs 100] [--repeats 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from typing import Any

from ragmon.evaluation.retrieval import evaluate

_PYTREC_MEASURES = {"P.5,10", "recall.5,10", "ndcg_cut.5,10", "success.5,10", "recip_rank"}
_MAPPING = {"P_5": "P@5", "recall_10": "R@10", "ndcg_cut_10": "nDCG@10", "success_5": "hit@5", "recip_rank": "MRR"}


def synthetic(queries: int, docs: int, seed: int = 0) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    rng = random.Random(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(queries):
        pool = rng.sample(range(20 * docs), docs + 50)
        qid = f"q{q}"
        qrels[qid] = {f"d{d}": rng.choice((0, 0, 1, 2, 3)) for d in pool[:30]}
        run[qid] = {f"d{d}": round(rng.random() * 10, 2) for d in pool[10 : 10 + docs]}
    return qrels, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    try:
        import pytrec_eval  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        print("pytrec_eval is not installed: pip install pytrec-eval-terrier==0.5.11", file=sys.stderr)
        return 2

    qrels, run = synthetic(args.queries, args.docs)
    ours_s: list[float] = []
    theirs_s: list[float] = []
    ours: Any = None
    theirs: Any = None
    for _ in range(args.repeats):
        started = time.perf_counter()
        theirs = pytrec_eval.RelevanceEvaluator(qrels, _PYTREC_MEASURES).evaluate(run)
        theirs_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        ours = evaluate(qrels, run, (5, 10))
        ours_s.append(time.perf_counter() - started)

    worst = max(
        abs(values[name] - ours.per_query[qid][key]) for qid, values in theirs.items() for name, key in _MAPPING.items()
    )
    ours_median, theirs_median = statistics.median(ours_s), statistics.median(theirs_s)
    print(f"{args.queries:,} queries x {args.docs} docs, {args.repeats} repeats, alternating")
    print(f"pytrec_eval  median {theirs_median * 1000:8.1f} ms   runs {[round(t * 1000) for t in theirs_s]}")
    print(f"ragmon       median {ours_median * 1000:8.1f} ms   runs {[round(t * 1000) for t in ours_s]}")
    print(f"ratio ragmon / pytrec_eval = {ours_median / theirs_median:.2f} (goal ≤ 2.00)")
    print(f"largest per-query difference over {len(_MAPPING)} measures: {worst:.2e}")
    return 0 if worst <= 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())
