"""A token bucket per key: `rate_per_s` requests a second on average, bursts of up to `burst`.

Used by the feedback endpoint (one bucket per presented key), so one page hammering the endpoint is told to wait
(429 + Retry-After) while every other key goes on. Buckets are held for the keys configured (a fixed set), not for
whatever a client presents, so the map cannot grow without bound.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["RateLimiter"]


class RateLimiter:
    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst >= 1")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def take(self, key: str) -> float | None:
        """Take one token for `key`: None when allowed, else the seconds until one is free."""
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate_per_s)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return None
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate_per_s
