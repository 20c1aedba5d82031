"""A lexical reranker for the demo: BM25 over the candidates, blended with the retriever's score.

The hashing embedder scores topical similarity; BM25 rewards the exact rare terms of the question (a port
number, an attribute name). Blending the two reorders the retriever's list the way a cross-encoder would,
cheaply and deterministically. Instrumented with ragmon's rerank stage.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import ragmon
from ragmon.demo.passages import Passage
from ragmon.demo.retriever import Hit, StageHook, _no_hook
from ragmon.demo.text import terms


@dataclass(frozen=True, slots=True)
class TermStats:
    """Document frequencies over a corpus, for IDF weights (shared by the reranker and the generator)."""

    document_count: int
    document_frequency: dict[str, int]
    mean_length: float

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> TermStats:
        df: Counter[str] = Counter()
        count = 0
        total = 0
        for text in texts:
            words = terms(text)
            df.update(set(words))
            count += 1
            total += len(words)
        return cls(count, dict(df), total / count if count else 0.0)

    def idf(self, term: str) -> float:
        """BM25's IDF, floored at a small positive value so very common terms still count a little."""
        n = self.document_frequency.get(term, 0)
        return max(0.05, math.log(1.0 + (self.document_count - n + 0.5) / (n + 0.5)))


class OverlapReranker:
    model = "ragmon-overlap-reranker"
    provider = "ragmon"

    def __init__(
        self, corpus: Sequence[Passage], *, lexical_weight: float = 0.7, k1: float = 1.2, b: float = 0.75
    ) -> None:
        self.stats = TermStats.from_texts(p.text for p in corpus)
        self.lexical_weight = lexical_weight
        self.k1 = k1
        self.b = b

    def bm25(self, question: str, passage_text: str) -> float:
        query = set(terms(question))
        words = terms(passage_text)
        tf = Counter(words)
        length_norm = 1.0 - self.b + self.b * len(words) / max(self.stats.mean_length, 1.0)
        score = 0.0
        for term in query:
            f = tf.get(term, 0)
            if f:
                score += self.stats.idf(term) * f * (self.k1 + 1.0) / (f + self.k1 * length_norm)
        return score

    def score(self, question: str, hits: Sequence[Hit]) -> list[Hit]:
        """All `hits` rescored and sorted, best first. Both signals are scaled by their maximum over the list,
        so the blend does not depend on the retriever's score range (which the norm bug inflates)."""
        if not hits:
            return []
        lexical = [self.bm25(question, h.passage.text) for h in hits]
        max_lexical = max(lexical) or 1.0
        max_dense = max(abs(h.score) for h in hits) or 1.0
        w = self.lexical_weight
        rescored = [
            Hit(h.passage, round(w * lex / max_lexical + (1.0 - w) * h.score / max_dense, 6))
            for h, lex in zip(hits, lexical, strict=True)
        ]
        # Stable sort: equal scores keep the retriever's order.
        return sorted(rescored, key=lambda h: -h.score)

    def rerank(self, question: str, hits: Sequence[Hit], top_k: int = 4, *, hook: StageHook = _no_hook) -> list[Hit]:
        with ragmon.rerank(self.model, provider=self.provider, top_k=top_k, query=question) as span:
            hook("rerank")
            ranked = self.score(question, hits)[:top_k]
            span.record(
                input_ids=[h.passage.id for h in hits],
                documents=[ragmon.Document(h.passage.id, h.score, h.passage.text) for h in ranked],
                search_units=1,
            )
        return ranked
