"""Keep traces whose retrieval looked unhealthy: a weak rank-1 score, a crowded index (small similarity gap), or
query embeddings off unit length (the normalisation-mismatch bug that ranks garbage without any error)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ragmon.sampling.policies import ConfiguredRule
from ragmon.sampling.view import Fired, TraceView


class RetrievalHealthPolicy(ConfiguredRule):
    type: Literal["retrieval_health"] = "retrieval_health"
    name: str = "retrieval_health"
    min_top1_score: float | None = None
    min_similarity_gap: float | None = None
    max_norm_deviation: float | None = Field(default=0.05, ge=0)

    def fires(self, traces: TraceView) -> Fired:
        fired: Fired = False
        if self.min_top1_score is not None:
            fired = fired | (traces.min_top1_score < self.min_top1_score)
        if self.min_similarity_gap is not None:
            fired = fired | (traces.min_similarity_gap < self.min_similarity_gap)
        if self.max_norm_deviation is not None:
            fired = fired | (traces.max_norm_deviation > self.max_norm_deviation)
        return fired
