"""Keep traces whose retrieval looked unhealthy: a weak rank-1 score, a crowded index (small similarity gap), or
query embeddings off unit length (the normalisation-mismatch bug that ranks garbage without any error)."""

from __future__ import annotations

from dataclasses import dataclass

from ragmon.sampling.decision import KEEP, SKIP, Verdict
from ragmon.sampling.trace import TraceSummary


@dataclass(frozen=True)
class RetrievalHealthPolicy:
    name: str = "retrieval_health"
    min_top1_score: float | None = None
    min_similarity_gap: float | None = None
    max_norm_deviation: float | None = 0.05

    def evaluate(self, trace: TraceSummary) -> Verdict:
        if _below(trace.min_top1_score, self.min_top1_score) or _below(
            trace.min_similarity_gap, self.min_similarity_gap
        ):
            return KEEP
        deviation = trace.max_norm_deviation
        if self.max_norm_deviation is not None and deviation is not None and deviation > self.max_norm_deviation:
            return KEEP
        return SKIP


def _below(value: float | None, threshold: float | None) -> bool:
    return threshold is not None and value is not None and value < threshold
