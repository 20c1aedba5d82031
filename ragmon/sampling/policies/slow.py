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

from typing import Literal

from pydantic import Field, model_validator

from ragmon.sampling.policies import ConfiguredRule
from ragmon.sampling.view import Fired, Number, TraceView


def exceeds_p95(duration_ms: Number, p95_ms: Number, factor: float, min_excess_ms: float) -> Fired:
    """`duration_ms` is above `factor` × p95 and above the p95 by at least `min_excess_ms` (False: p95 unknown)."""
    above: Fired = (duration_ms > factor * p95_ms) & (duration_ms - p95_ms >= min_excess_ms)
    return above


class SlowPolicy(ConfiguredRule):
    """The request against an SLA (`trace_threshold_ms`) or its feature's recent p95 (`relative_to_p95`, with the
    floor `min_excess_ms`); stage rules only when asked for."""

    type: Literal["slow"] = "slow"
    name: str = "slow"
    trace_threshold_ms: float | None = Field(default=None, gt=0)  # an SLA for the whole request, in ms
    # the request against its feature's recent p95 (1.0: above the p95)
    relative_to_p95: float | None = Field(default=None, gt=0)
    min_excess_ms: float = Field(default=100.0, ge=0)  # the floor of both relative tests
    stage_threshold_ms: dict[str, float] = Field(default_factory=dict)  # opt-in: absolute per stage
    # opt-in: each stage's longest span against its (feature, stage) p95
    stage_relative_to_p95: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _stage_rules_have_a_floor(self) -> SlowPolicy:
        # a 0.4 ms search span is 2x a 0.2 ms p95: per stage, a ratio alone calls noise slow
        if self.stage_relative_to_p95 is not None and self.min_excess_ms <= 0:
            raise ValueError("stage_relative_to_p95 needs a floor: set min_excess_ms above 0 (e.g. 100)")
        return self

    @property
    def reads_request_p95(self) -> bool:
        return self.relative_to_p95 is not None

    @property
    def reads_stage_p95(self) -> bool:
        return self.stage_relative_to_p95 is not None

    def fires(self, traces: TraceView) -> Fired:
        fired: Fired = False
        duration_ms = traces.root_duration_ms
        if self.trace_threshold_ms is not None:
            fired = fired | (duration_ms > self.trace_threshold_ms)
        if self.relative_to_p95 is not None:
            fired = fired | exceeds_p95(duration_ms, traces.request_p95_ms, self.relative_to_p95, self.min_excess_ms)
        for stage, threshold_ms in self.stage_threshold_ms.items():
            fired = fired | (traces.stage_max_ms(stage, absent=0.0) > threshold_ms)  # a stage it lacks took 0 ms
        if self.stage_relative_to_p95 is not None:
            for stage in traces.stages:
                longest_ms, p95_ms = traces.stage_max_ms(stage), traces.stage_p95_ms(stage)
                fired = fired | exceeds_p95(longest_ms, p95_ms, self.stage_relative_to_p95, self.min_excess_ms)
        return fired
