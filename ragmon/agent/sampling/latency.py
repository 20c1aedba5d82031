"""Rolling p95 latency per (feature, stage), for the relative slow policy.

A ring of the most recent durations per key; the p95 is recomputed every `refresh_every` samples, not per span
(sorting 512 floats costs ~20 µs; per span that would be the sampler's biggest cost). Keys are capped, so a
flood of distinct feature names cannot grow memory without bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class _Ring:
    values: list[float] = field(default_factory=list)
    next_index: int = 0
    since_refresh: int = 0
    p95: float | None = None


class LatencyTracker:
    def __init__(
        self, window: int = 512, min_samples: int = 50, refresh_every: int = 32, max_keys: int = 10_000
    ) -> None:
        self._window = window
        self._min_samples = min_samples
        self._refresh_every = refresh_every
        self._max_keys = max_keys
        self._rings: dict[tuple[str, str], _Ring] = {}
        self.keys_refused = 0

    def observe(self, feature: str, stage: str, duration_ms: float) -> float | None:
        """Record a duration; return duration / p95 as known *before* it, or None while warming up."""
        key = (feature, stage)
        ring = self._rings.get(key)
        if ring is None:
            if len(self._rings) >= self._max_keys:
                self.keys_refused += 1
                return None
            ring = self._rings[key] = _Ring()
        ratio = None if ring.p95 is None or ring.p95 <= 0 else duration_ms / ring.p95
        if len(ring.values) < self._window:
            ring.values.append(duration_ms)
        else:
            ring.values[ring.next_index] = duration_ms
            ring.next_index = (ring.next_index + 1) % self._window
        ring.since_refresh += 1
        if len(ring.values) >= self._min_samples and (ring.p95 is None or ring.since_refresh >= self._refresh_every):
            ordered = sorted(ring.values)
            ring.p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
            ring.since_refresh = 0
        return ratio

    def p95(self, feature: str, stage: str) -> float | None:
        ring = self._rings.get((feature, stage))
        return None if ring is None else ring.p95
