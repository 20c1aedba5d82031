"""The composite policy: drop rules first, then every keep policy in order, then the budget.

Drop rules (never-rules) win over any keep. All keep policies are evaluated, so a kept trace records every
reason it was kept — "error" and "slow" together say more than either. A policy that raises is counted as
ERROR for that trace and treated as not firing; it never stops the others.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ragmon.diagnostics import warn_limited
from ragmon.sampling.budget import KeepBudget
from ragmon.sampling.decision import Decision, Verdict
from ragmon.sampling.policies import Policy
from ragmon.sampling.trace import TraceSummary


@dataclass(slots=True)  # not frozen: a frozen dataclass is slower to build, one per trace
class Outcome:
    decision: Decision
    reasons: tuple[str, ...]
    probability: float  # chance a trace like this one is kept; 1/probability is its weight


class CompositePolicy:
    def __init__(
        self,
        policies: Sequence[Policy],
        budget: KeepBudget | None = None,
        budget_exempt: frozenset[str] = frozenset({"error"}),
    ) -> None:
        names = [p.name for p in policies]
        if len(set(names)) != len(names):
            raise ValueError(f"sampling policy names must be unique, got {names}")
        self.drop_rules = [(p, _keys(p.name)) for p in policies if getattr(p, "action", "keep") == "drop"]
        self.keep_policies = [(p, _keys(p.name)) for p in policies if getattr(p, "action", "keep") != "drop"]
        self.budget = budget
        self.exempt = budget_exempt
        self.counts: Counter[tuple[str, str]] = Counter()  # (policy, decision value) -> traces

    def decide(self, trace: TraceSummary, now_s: float) -> Outcome:
        for rule, keys in self.drop_rules:
            if self._evaluate(rule, keys, trace).decision is Decision.DROP:
                self.counts[("composite", _VALUE[Decision.DROP])] += 1
                return Outcome(Decision.DROP, (rule.name,), 0.0)
        fired: list[tuple[str, float]] = []
        for policy, keys in self.keep_policies:
            verdict = self._evaluate(policy, keys, trace)
            if verdict.decision is Decision.KEEP:
                fired.append((policy.name, verdict.probability))
        if not fired:
            self.counts[("composite", _VALUE[Decision.SKIP])] += 1
            return Outcome(Decision.SKIP, (), 0.0)
        reasons = tuple(name for name, _ in fired)
        probability = max(p for _, p in fired)
        if self.budget is not None:
            if any(name in self.exempt for name in reasons):
                self.budget.try_spend(trace.bytes_held, now_s, force=True)
            else:
                admission = self.budget.admission_probability(trace.bytes_held, now_s)
                if not (uniform(trace.trace_id) < admission and self.budget.try_spend(trace.bytes_held, now_s)):
                    self.counts[("budget", _VALUE[Decision.SKIP])] += 1
                    self.counts[("composite", _VALUE[Decision.SKIP])] += 1
                    return Outcome(Decision.SKIP, ("budget",), 0.0)
                probability *= admission
        self.counts[("composite", _VALUE[Decision.KEEP])] += 1
        return Outcome(Decision.KEEP, reasons, probability)

    def _evaluate(self, policy: Policy, keys: dict[Decision, tuple[str, str]], trace: TraceSummary) -> Verdict:
        try:
            verdict = policy.evaluate(trace)
        except Exception as exc:
            warn_limited(f"policy:{policy.name}", "sampling policy %s failed: %r", policy.name, exc)
            self.counts[keys[Decision.ERROR]] += 1
            return Verdict(Decision.ERROR, 0.0)
        self.counts[keys[verdict.decision]] += 1
        return verdict


def _keys(name: str) -> dict[Decision, tuple[str, str]]:
    """The counter key of each verdict of one policy, built once rather than per trace."""
    return {decision: (name, str(decision.value)) for decision in Decision}


_VALUE = {decision: str(decision.value) for decision in Decision}


def uniform(trace_id: str) -> float:
    """A number in [0, 1) from the high trace-id bits (the baseline uses the low 56): independent, reproducible."""
    try:
        return int(trace_id[:13], 16) / float(1 << 52)
    except ValueError:
        return 0.0
