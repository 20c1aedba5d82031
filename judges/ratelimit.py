"""A requests-per-minute token bucket for asyncio: `await bucket.acquire()` before each call.

Waiters are served in arrival order (one lock), so a burst cannot starve an early caller. The clock and the
sleep are injected so tests can drive time by hand.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class TokenBucket:
    def __init__(
        self,
        per_minute: float,
        *,
        burst: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if per_minute <= 0:
            raise ValueError("per_minute must be > 0")
        self.rate_per_s = per_minute / 60.0
        # A burst of one second's worth (at least 1) keeps short-term rate close to the limit, which is what
        # providers enforce; a whole minute's burst would trip their per-second smoothing.
        self.capacity = burst if burst is not None else max(1.0, self.rate_per_s)
        self._tokens = self.capacity
        self._clock = clock
        self._sleep = sleep
        self._updated = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._updated) * self.rate_per_s)
        self._updated = now

    async def acquire(self) -> None:
        async with self._lock:
            self._refill()
            while self._tokens < 1.0:
                await self._sleep((1.0 - self._tokens) / self.rate_per_s)
                self._refill()
            self._tokens -= 1.0
