"""Recent request latency per (tenant, feature): what "slow" means for a whole request of that feature.

The sampler sees every trace's root span, so it measures the p95 itself, over each feature's last `window`
requests, rather than asking the store: the minute rollup has no per-request figure (a third-party app's root may
be a chain, a server span or the LLM call itself) and trails the spans by seconds. A p95 is only given once a
feature has `min_requests` requests: below that it is a guess, and a guess would call ordinary requests slow.

The p95 is recomputed after every `window // 20` new requests (cached between): within one twentieth of the window
it cannot move past the next-slower sample, and a lookup per trace stays a dictionary read.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt


@dataclass(slots=True)
class _Window:
    durations: npt.NDArray[np.float64]
    filled: int = 0  # how many slots hold a duration (grows to the window, then stays)
    next_slot: int = 0
    since_p95: int = 0  # requests added since the cached p95 was computed
    p95: float | None = field(default=None)


class RequestLatency:
    def __init__(self, window: int = 2000, min_requests: int = 50, max_features: int = 10_000) -> None:
        if not 1 <= min_requests <= window:
            raise ValueError(f"min_requests must be between 1 and the window ({window}), got {min_requests}")
        self.window = window
        self.min_requests = min_requests
        self.max_features = max_features
        self._refresh_every = max(1, window // 20)
        self._windows: OrderedDict[tuple[str, str], _Window] = OrderedDict()  # least recently added first

    def p95(self, tenant: str, feature: str) -> float | None:
        """The p95 of the feature's recent requests in ms; None until it has `min_requests` of them."""
        window = self._windows.get((tenant, feature))
        if window is None or window.filled < self.min_requests:
            return None
        if window.p95 is None or window.since_p95 >= self._refresh_every:
            window.p95 = float(np.percentile(window.durations[: window.filled], 95))
            window.since_p95 = 0
        return window.p95

    def p95_then_add(self, tenant: str, feature: str, durations_ms: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """For each duration in order, the p95 before it (NaN: unknown), then the duration recorded: what `p95` and
        `add` one request at a time give — so a batch of traces is judged as the same traces one by one would be —
        in runs over which the answer cannot change (until the minimum is reached, or the next refresh)."""
        out = np.full(len(durations_ms), math.nan)
        present = np.flatnonzero(~np.isnan(durations_ms))  # a trace without a root is neither judged nor recorded
        start = 0
        while start < len(present):
            p95 = self.p95(tenant, feature)
            window = self._windows.get((tenant, feature))
            filled, since = (window.filled, window.since_p95) if window is not None else (0, 0)
            run = self.min_requests - filled if p95 is None else self._refresh_every - since
            chunk = present[start : start + run]
            if p95 is not None:
                out[chunk] = p95
            self.add(tenant, feature, durations_ms[chunk])
            start += len(chunk)
        return out

    def add_one(self, tenant: str, feature: str, duration_ms: float) -> None:
        """`add` for one request (the per-trace path: without the array handling, a third of the cost)."""
        window = self._windows.get((tenant, feature))
        if window is None or duration_ms != duration_ms:  # new feature, or NaN: the general path
            self.add(tenant, feature, [duration_ms])
            return
        self._windows.move_to_end((tenant, feature))
        window.durations[window.next_slot] = duration_ms
        window.next_slot = (window.next_slot + 1) % self.window
        window.filled = min(self.window, window.filled + 1)
        window.since_p95 += 1

    def add(self, tenant: str, feature: str, durations_ms: npt.ArrayLike) -> None:
        """Record request durations (ms) of one feature, oldest first; NaN (no root seen) is skipped."""
        values = np.asarray(durations_ms, dtype=np.float64).ravel()
        values = values[~np.isnan(values)][-self.window :]
        if not len(values):
            return
        key = (tenant, feature)
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window(np.empty(self.window))
            if len(self._windows) > self.max_features:  # a feature per request id would grow without bound
                self._windows.popitem(last=False)
        else:
            self._windows.move_to_end(key)
        slots = (window.next_slot + np.arange(len(values))) % self.window
        window.durations[slots] = values
        window.next_slot = int((window.next_slot + len(values)) % self.window)
        window.filled = min(self.window, window.filled + len(values))
        window.since_p95 += len(values)
