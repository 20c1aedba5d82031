"""A budget on kept traces per second and kept bytes per second.

Two layers, so the inclusion probability stays honest:
1. Admission: when discretionary keeps arrive faster than the budget, each is admitted with probability
   q = budget rate / offered rate (measured over a sliding window), decided consistently from trace-id bits the
   baseline does not use. A trace kept this way carries probability p × q, so its weight is exact.
2. A token bucket as the hard cap (burst `burst_s` seconds of budget); refusals there are counted.

Policies named as exempt (errors by default) are always kept but still spend tokens, so a storm of errors leaves
no room for baseline traffic.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

_MAX_WINDOW_ENTRIES = 100_000


@dataclass
class _Bucket:
    rate_per_s: float
    capacity: float
    tokens: float = field(init=False)
    updated_s: float | None = None

    def __post_init__(self) -> None:
        self.tokens = self.capacity

    def refill(self, now_s: float) -> None:
        if self.updated_s is not None:
            self.tokens = min(self.capacity, self.tokens + (now_s - self.updated_s) * self.rate_per_s)
        self.updated_s = now_s


class KeepBudget:
    def __init__(
        self,
        traces_per_s: float | None = None,
        bytes_per_s: float | None = None,
        burst_s: float = 5.0,
        window_s: float = 10.0,
    ) -> None:
        self._traces_per_s = traces_per_s
        self._bytes_per_s = bytes_per_s
        self._traces = _Bucket(traces_per_s, traces_per_s * burst_s) if traces_per_s else None
        self._bytes = _Bucket(bytes_per_s, bytes_per_s * burst_s) if bytes_per_s else None
        self._window_s = window_s
        self._offered: deque[tuple[float, int]] = deque(maxlen=_MAX_WINDOW_ENTRIES)
        self._offered_bytes = 0

    def admission_probability(self, size_bytes: int, now_s: float) -> float:
        """Record one discretionary candidate; the probability with which candidates are admitted right now."""
        offered = self._offered
        if len(offered) == offered.maxlen:
            self._offered_bytes -= offered[0][1]
        offered.append((now_s, size_bytes))
        self._offered_bytes += size_bytes
        while offered and offered[0][0] < now_s - self._window_s:
            self._offered_bytes -= offered.popleft()[1]
        span_s = max(1.0, min(self._window_s, now_s - offered[0][0]))
        q = 1.0
        if self._traces_per_s:
            q = min(q, self._traces_per_s * span_s / len(offered))
        if self._bytes_per_s and self._offered_bytes:
            q = min(q, self._bytes_per_s * span_s / self._offered_bytes)
        return q

    def try_spend(self, size_bytes: int, now_s: float, force: bool = False) -> bool:
        """Spend one trace and `size_bytes`; False (nothing spent) when the bucket is empty, unless forced."""
        pairs = [(b, 1.0 if b is self._traces else float(size_bytes)) for b in (self._traces, self._bytes) if b]
        for bucket, _ in pairs:
            bucket.refill(now_s)
        if not force and any(bucket.tokens < cost for bucket, cost in pairs):
            return False
        for bucket, cost in pairs:
            bucket.tokens -= cost  # a forced spend may go negative: later traffic pays it back
        return True
