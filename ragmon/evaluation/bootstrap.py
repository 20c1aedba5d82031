"""Seeded paired bootstrap confidence intervals for a change in a mean, resampling whole questions.

Rows of one question (repeated samples, turns) are correlated; resampling rows would make the interval too
narrow. So questions are the unit: each resample draws questions with replacement and takes
``sum(differences) / count(rows)`` over the drawn questions — the same estimator as the point delta, which is the
plain mean over paired rows. Percentile intervals; the generator is seeded from (seed, metric name), so a
metric's interval does not depend on which other metrics are in the report.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

# Bound the (resamples × questions) index matrix to about 8M entries per block.
_BLOCK_ENTRIES = 8_000_000


def bootstrap_delta_ci(
    differences: Sequence[float] | npt.NDArray[np.float64],
    clusters: Sequence[str],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    name: str = "",
) -> tuple[float, float]:
    """Percentile interval for mean(differences), resampling clusters; raises on empty input."""
    diffs = np.asarray(differences, dtype=np.float64)
    if diffs.size == 0 or diffs.size != len(clusters):
        raise ValueError("need one cluster label per difference, and at least one difference")
    if not 0.0 < confidence < 1.0 or resamples < 1:
        raise ValueError("confidence must be in (0, 1) and resamples ≥ 1")
    _, cluster_index = np.unique(np.asarray(clusters, dtype=object).astype(str), return_inverse=True)
    sums = np.bincount(cluster_index, weights=diffs)
    counts = np.bincount(cluster_index).astype(np.float64)
    n_clusters = sums.size
    rng = np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])
    estimates = np.empty(resamples, dtype=np.float64)
    block = max(1, _BLOCK_ENTRIES // n_clusters)
    for start in range(0, resamples, block):
        stop = min(resamples, start + block)
        drawn = rng.integers(0, n_clusters, size=(stop - start, n_clusters))
        estimates[start:stop] = sums[drawn].sum(axis=1) / counts[drawn].sum(axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(estimates, [tail, 100.0 - tail])
    return float(low), float(high)
