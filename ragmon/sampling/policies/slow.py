"""Keep slow traces: the whole request against its feature's recent p95 or an absolute SLA; stages on request.

Why the request and not each stage by default: a trace with five stages has one above its stage's p95 about
1 − 0.95⁵ ≈ 23 % of the time, so "any stage above its p95" keeps a quarter of all traffic; the request above its
feature's p95 keeps about 5 % by construction. And why a floor: without one, a failed search of 1.6 ms against a
p95 of 0.2 ms is "slow", and a service answering in 20–50 ms calls a third of its traffic slow. A request (or a
stage, with a stage rule) is slow relative to its p95 when it is longer than `relative_to_p95` × p95 *and* longer
than the p95 by at least `min_excess_ms`. The p95 is the one measured before the trace arrived, per feature, so
"slow" adapts: a 2 s request is normal for one feature and slow for another.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ragmon.sampling.decision import KEEP, SKIP, Verdict
from ragmon.sampling.trace import TraceSummary


def exceeds_p95(duration_ms: float, p95_ms: float | None, factor: float, min_excess_ms: float) -> bool:
    """`duration_ms` is above `factor` × p95 and above the p95 by at least `min_excess_ms` (False: p95 unknown)."""
    return p95_ms is not None and duration_ms > factor * p95_ms and duration_ms - p95_ms >= min_excess_ms


@dataclass(frozen=True)
class SlowPolicy:
    name: str = "slow"
    trace_threshold_ms: float | None = None  # an SLA for the whole request, in ms
    relative_to_p95: float | None = None  # the request against its feature's recent p95 (1.0: above the p95)
    min_excess_ms: float = 100.0  # the floor of both relative tests
    stage_threshold_ms: dict[str, float] = field(default_factory=dict)  # opt-in: absolute per stage
    stage_relative_to_p95: float | None = None  # opt-in: each stage's longest span against its (feature, stage) p95

    def evaluate(self, trace: TraceSummary) -> Verdict:
        duration_ms = trace.root_duration_ms
        if duration_ms is not None:
            if self.trace_threshold_ms is not None and duration_ms > self.trace_threshold_ms:
                return KEEP
            if self.relative_to_p95 is not None and exceeds_p95(
                duration_ms, trace.request_p95_ms, self.relative_to_p95, self.min_excess_ms
            ):
                return KEEP
        for stage, threshold_ms in self.stage_threshold_ms.items():
            if trace.stage_max_ms.get(stage, 0.0) > threshold_ms:
                return KEEP
        if self.stage_relative_to_p95 is not None:
            for stage, longest_ms in trace.stage_max_ms.items():
                if exceeds_p95(
                    longest_ms, trace.stage_p95_ms.get(stage), self.stage_relative_to_p95, self.min_excess_ms
                ):
                    return KEEP
        return SKIP
