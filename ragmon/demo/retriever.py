"""An in-memory cosine index over the demo corpus, instrumented with ragmon's embed and search stages.

`rank()` is the pure part (vectors in, scores out); `retrieve()` wraps it in an embed span (query vector and
token estimate) and a search span (documents, query vector, a sample of index vectors for the norm check).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

import ragmon
from ragmon.demo.embedder import Embedder
from ragmon.demo.passages import Passage
from ragmon.demo.text import terms

DATA_SOURCE = "ragmon-docs"
INDEX_SAMPLE_SIZE = 8  # index vectors sent per search span: enough to catch a badly built index, cheap to check

StageHook = Callable[[str], None]  # called inside each stage span; the fault injector raises or sleeps there


@dataclass(frozen=True, slots=True)
class Hit:
    passage: Passage
    score: float


def _no_hook(stage: str) -> None:
    return None


class Retriever:
    def __init__(self, passages: Sequence[Passage], embedder: Embedder) -> None:
        if not passages:
            raise ValueError("cannot index an empty corpus")
        self.passages = tuple(passages)
        self.embedder = embedder
        # Section titles carry topic words ("Drift detection") that the paragraph may only imply.
        self.index = embedder.embed([f"{p.section}. {p.text}" for p in self.passages])
        # A fixed, evenly spread sample: the same rows every request, so a change in the attribute means the
        # index changed, not the sample.
        step = max(1, len(self.passages) // INDEX_SAMPLE_SIZE)
        self._sample_rows = list(range(0, len(self.passages), step))[:INDEX_SAMPLE_SIZE]

    def embed_query(self, question: str, *, normalisation_bug: bool = False) -> np.ndarray:
        vector = self.embedder.embed([question])[0]
        if normalisation_bug:
            # The classic regression: token vectors summed instead of averaged and never re-normalised, so the
            # query's length grows with the number of words. Ranking by dot product still "works"; scores don't.
            vector = vector * float(max(2, len(terms(question))))
        return vector

    def rank(self, query_vector: np.ndarray, top_k: int) -> list[Hit]:
        """Top-k passages by dot product (cosine for unit vectors), best first; ties broken by corpus order."""
        scores = self.index @ query_vector.astype(np.float32)
        k = min(top_k, len(self.passages))
        order = np.lexsort((np.arange(len(scores)), -scores))[:k]
        return [Hit(self.passages[i], float(scores[i])) for i in order]

    def retrieve(
        self, question: str, top_k: int = 10, *, normalisation_bug: bool = False, hook: StageHook = _no_hook
    ) -> list[Hit]:
        with ragmon.embed(self.embedder.model, provider=self.embedder.provider) as span:
            hook("embed")
            vector = self.embed_query(question, normalisation_bug=normalisation_bug)
            span.record(input_tokens=self.embedder.count_tokens([question]), vectors=vector, count=1)
        with ragmon.search(top_k=top_k, data_source=DATA_SOURCE, query=question) as span:
            hook("search")
            hits = self.rank(vector, top_k)
            span.record(
                documents=[ragmon.Document(h.passage.id, h.score, h.passage.text) for h in hits],
                query_vector=vector,
                index_vectors=self.index[self._sample_rows],
            )
        return hits
