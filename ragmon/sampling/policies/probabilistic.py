"""A baseline share of all traces, consistent by trace id: every agent (and every re-run) keeps the same traces.

The test uses the rightmost 56 bits of the trace id, which W3C trace-context level 2 ("random" flag) and
OpenTelemetry's consistent-probability sampling treat as uniformly random.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragmon.sampling.decision import SKIP, Decision, Verdict
from ragmon.sampling.trace import TraceSummary

_RANDOM_BITS = 56


@dataclass(frozen=True)
class ProbabilisticPolicy:
    rate: float
    name: str = "baseline"

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"baseline rate must be within [0, 1], got {self.rate}")

    def evaluate(self, trace: TraceSummary) -> Verdict:
        if self.rate <= 0.0:
            return SKIP
        return Verdict(Decision.KEEP, self.rate) if keeps(trace.trace_id, self.rate) else SKIP


def keeps(trace_id: str, rate: float) -> bool:
    try:
        randomness = int(trace_id[-14:], 16)  # 14 hex chars = 56 bits
    except ValueError:
        return False
    return randomness < rate * (1 << _RANDOM_BITS)
