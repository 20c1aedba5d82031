"""Retrieval quality of the demo pipeline on the labelled questions: hit rate, recall and MRR at k.

`python -m ragmon.demo.evaluate` prints the figures for the retriever alone and after reranking, which is how
the thresholds in tests/test_demo_app.py were measured. Graded labels count as relevant at any grade.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ragmon.demo.embedder import make_embedder
from ragmon.demo.passages import Question, load_corpus, load_questions
from ragmon.demo.reranker import OverlapReranker
from ragmon.demo.retriever import Retriever

Ranker = Callable[[str], Sequence[str]]  # question -> passage ids, best first


@dataclass(frozen=True, slots=True)
class RetrievalScores:
    k: int
    hit_rate: float  # questions with at least one relevant passage in the top k
    recall: float  # mean fraction of a question's relevant passages in the top k
    mrr: float  # mean reciprocal rank of the first relevant passage (0 when none in the top k)
    questions: int


def evaluate(rank: Ranker, questions: Sequence[Question], k: int) -> RetrievalScores:
    hits = recall = mrr = 0.0
    for question in questions:
        ids = list(rank(question.question))[:k]
        relevant = set(question.relevant)
        found = [i for i in ids if i in relevant]
        hits += bool(found)
        recall += len(found) / len(relevant)
        mrr += next((1.0 / (n + 1) for n, i in enumerate(ids) if i in relevant), 0.0)
    n = len(questions)
    return RetrievalScores(k, hits / n, recall / n, mrr / n, n)


def main() -> int:

    prefer = sys.argv[1] if len(sys.argv) > 1 else "hashing"
    corpus, questions = load_corpus(), load_questions()
    retriever = Retriever(corpus, make_embedder(prefer))
    reranker = OverlapReranker(corpus)

    def dense(q: str) -> list[str]:
        return [h.passage.id for h in retriever.rank(retriever.embed_query(q), 10)]

    def reranked(q: str) -> list[str]:
        return [h.passage.id for h in reranker.score(q, retriever.rank(retriever.embed_query(q), 10))]

    print(f"{len(corpus)} passages, {len(questions)} questions, embedder {retriever.embedder.model}")
    for name, ranker in (("retriever", dense), ("reranked", reranked)):
        for k in (1, 3, 5, 10):
            s = evaluate(ranker, questions, k)
            print(f"{name:9}  @{k:<2}  hit {s.hit_rate:.3f}  recall {s.recall:.3f}  mrr {s.mrr:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
