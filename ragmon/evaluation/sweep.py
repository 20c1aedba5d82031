"""The K sweep: how many chunks to put in the prompt, from Recall@K against answer quality.

Run the evaluation once per K (default K ∈ {3, 5, 8, 10, 15}) and give each K's mean Recall@K and mean answer
quality (any higher-is-better score: token F1, fact recall, a judge's correctness). The **knee** is the smallest K
where recall has saturated but quality has not yet fallen:

- recall is *saturated* at K when ``recall(K) ≥ max recall − recall_tolerance`` — more chunks add little evidence;
- quality has *fallen* at K when ``quality(K) < max(quality(K') for K' ≤ K) − quality_tolerance`` — the extra
  chunks now distract the generator (or cost more than they bring).

When the smallest saturated K has already fallen there is no knee (``knee is None``): quality drops before recall
is complete, and ``best_quality_k`` is the better guide.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_SWEEP_KS: tuple[int, ...] = (3, 5, 8, 10, 15)


@dataclass(frozen=True)
class SweepPoint:
    k: int
    recall: float
    quality: float
    recall_saturated: bool
    quality_fallen: bool


@dataclass(frozen=True)
class SweepResult:
    points: tuple[SweepPoint, ...]
    knee: int | None
    best_quality_k: int
    reason: str


def _mean(value: float | Sequence[float]) -> float:
    if isinstance(value, int | float):
        return float(value)
    values = [float(v) for v in value if not math.isnan(float(v))]
    if not values:
        raise ValueError("a sweep point needs at least one defined value")
    return math.fsum(values) / len(values)


def k_sweep(
    recall_at_k: Mapping[int, float | Sequence[float]],
    quality_at_k: Mapping[int, float | Sequence[float]],
    *,
    recall_tolerance: float = 0.02,
    quality_tolerance: float = 0.01,
) -> SweepResult:
    """Find the knee (definition in the module docstring); per-question lists are averaged, NaNs left out."""
    ks = sorted(recall_at_k)
    if not ks or sorted(quality_at_k) != ks:
        raise ValueError(f"recall and quality need the same, non-empty set of K; got {ks} and {sorted(quality_at_k)}")
    recall = {k: _mean(recall_at_k[k]) for k in ks}
    quality = {k: _mean(quality_at_k[k]) for k in ks}
    top_recall = max(recall.values())
    points: list[SweepPoint] = []
    best_so_far = -math.inf
    for k in ks:
        best_so_far = max(best_so_far, quality[k])
        points.append(
            SweepPoint(
                k=k,
                recall=recall[k],
                quality=quality[k],
                recall_saturated=recall[k] >= top_recall - recall_tolerance,
                quality_fallen=quality[k] < best_so_far - quality_tolerance,
            )
        )
    best_quality_k = max(ks, key=lambda k: (quality[k], -k))  # the smallest K among equals: cheaper prompts
    first_saturated = next(p for p in points if p.recall_saturated)
    if first_saturated.quality_fallen:
        return SweepResult(
            tuple(points),
            None,
            best_quality_k,
            f"quality falls (K={first_saturated.k}) before recall saturates; best quality at K={best_quality_k}",
        )
    return SweepResult(
        tuple(points),
        first_saturated.k,
        best_quality_k,
        f"recall saturated at K={first_saturated.k} ({first_saturated.recall:.3f} of max {top_recall:.3f})"
        f" with quality {first_saturated.quality:.3f} not yet fallen",
    )
