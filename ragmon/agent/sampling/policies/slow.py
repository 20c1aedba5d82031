"""Keep slow traces: per-stage and whole-trace thresholds, absolute (ms) and relative to the rolling p95.

The relative test compares each span with the rolling p95 of its (feature, stage) measured *before* the span
arrived (see `LatencyTracker`), so "slow" adapts per feature: a 2 s generate is normal for one feature and
slow for another.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ragmon.agent.sampling.decision import KEEP, SKIP, Verdict
from ragmon.agent.sampling.trace import TraceSummary


@dataclass(frozen=True)
class SlowPolicy:
    name: str = "slow"
    stage_threshold_ms: dict[str, float] = field(default_factory=dict)
    trace_threshold_ms: float | None = None
    relative_to_p95: float | None = None  # e.g. 1.0: above the rolling p95; 2.0: above twice the p95

    def evaluate(self, trace: TraceSummary) -> Verdict:
        if self.trace_threshold_ms is not None and (trace.root_duration_ms or 0.0) > self.trace_threshold_ms:
            return KEEP
        for stage, threshold_ms in self.stage_threshold_ms.items():
            if trace.stage_max_ms.get(stage, 0.0) > threshold_ms:
                return KEEP
        if self.relative_to_p95 is not None and max(trace.p95_ratios.values(), default=0.0) > self.relative_to_p95:
            return KEEP
        return SKIP
