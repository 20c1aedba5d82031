"""A baseline share of all traces, consistent by trace id: every agent (and every re-run) keeps the same traces.

The test uses the rightmost 56 bits of the trace id (`view.random_bits`), which W3C trace-context level 2 ("random"
flag) and OpenTelemetry's consistent-probability sampling treat as uniformly random.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Literal

from pydantic import Field

from ragmon.sampling.policies import ConfiguredRule
from ragmon.sampling.view import RANDOM_BITS, Fired, TraceView, random_bits


class ProbabilisticPolicy(ConfiguredRule):
    type: Literal["baseline"] = "baseline"
    name: str = "baseline"
    rate: float = Field(ge=0, le=1)

    @cached_property  # computed once (not a setting: absent from dumps and comparisons)
    def _limit(self) -> int:
        return limit(self.rate)

    @property
    def probability(self) -> float:
        return self.rate

    def fires(self, traces: TraceView) -> Fired:
        if self.rate <= 0.0:
            return False
        kept: Fired = traces.random_bits < self._limit
        return kept


def limit(rate: float) -> int:
    """The random bits a baseline at `rate` keeps are those below this: for an integer r, r < rate·2^56 is
    r < ceil(rate·2^56), an exact integer comparison on arrays too (no float rounding)."""
    return min(math.ceil(rate * (1 << RANDOM_BITS)), 1 << RANDOM_BITS)


def keeps(trace_id: str, rate: float) -> bool:
    """Whether a baseline at `rate` keeps the trace `trace_id`."""
    return rate > 0.0 and random_bits(trace_id) < limit(rate)
