"""Sampling policies: one module per built-in policy, each one class that is both its `[agent.sampling]` entry and
its rule, stated once over a `TraceView` (`Rule.fires`), so the per-trace and the columnar path evaluate the same
definition. A policy of one's own needs only `name` and `evaluate(trace) -> Verdict` (`Policy`); it is evaluated
per trace. An `action` of "drop" makes any policy a never-rule: when it fires, the trace is dropped.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, ConfigDict

from ragmon.sampling.decision import Verdict
from ragmon.sampling.trace import TraceSummary
from ragmon.sampling.view import Fired, TraceView


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    def evaluate(self, trace: TraceSummary) -> Verdict: ...


def drops(policy: object) -> bool:
    """Whether `policy` is a never-rule (its firing drops the trace) rather than a reason to keep."""
    return getattr(policy, "action", "keep") == "drop"


class Rule(ABC):
    """A policy whose rule is one function of a `TraceView`: whether it fires for one trace, or for each row of a
    batch. The composite policy evaluates it per trace on a `TraceRow`, and the columnar path, which takes only
    rules, on a `BatchRows`; tests/agent/test_sampler_batch.py drives every registered policy type through both.
    `name` and `action` as for any policy."""

    if TYPE_CHECKING:  # each rule's own field; declared here for the type checker, not as a field of this base
        name: str

    @abstractmethod
    def fires(self, traces: TraceView) -> Fired:
        """Whether the rule fires (keeps, or for a drop rule drops) for the trace, or for each row. Written with what
        means the same on a float and on an array — `>`, `<`, `!=`, `&`, `|` — never `and`, `or` or `if` on a value
        read from `traces`; a rule that fires on no trace whatever it holds may return False."""

    @property
    def probability(self) -> float:
        """The chance the rule keeps a trace like this one when it fires (1.0: always); 1/probability weighs it.
        Read once, when the composite policy is built."""
        return 1.0

    @property
    def reads_request_p95(self) -> bool:
        """Whether `fires` reads `request_p95_ms` (else the sampler neither measures nor looks it up)."""
        return False

    @property
    def reads_stage_p95(self) -> bool:
        """Whether `fires` reads `stage_p95_ms` (else the sampler does not look it up)."""
        return False


AnyPolicy = Rule | Policy  # what the composite policy takes: rules, and policies of one's own


class ConfiguredRule(BaseModel, Rule):
    """A built-in policy: its settings, validated at start-up (unknown keys are refused), and its rule."""

    model_config = ConfigDict(extra="forbid", frozen=True)
