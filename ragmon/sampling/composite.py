"""The composite policy: drop rules first, then every keep policy in order, then the budget.

Drop rules (never-rules) win over any keep. All keep policies are evaluated, so a kept trace records every
reason it was kept — "error" and "slow" together say more than either. A policy that raises is counted as
ERROR for that trace and treated as not firing; it never stops the others.

One trace at a time (`decide`), or the waiting rows of a stored batch at once (`decide_rows`, when every policy is
a `Rule`): the same sequence and the same budget (`_admit`), with the same decisions, reasons, probabilities and
counts (tests/agent/test_sampler_batch.py drives both with one stream).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ragmon.diagnostics import warn_limited
from ragmon.sampling.batch import BatchRows
from ragmon.sampling.budget import KeepBudget
from ragmon.sampling.decision import DROP, SKIP, Decision, Verdict
from ragmon.sampling.policies import AnyPolicy, Policy, Rule, drops
from ragmon.sampling.trace import TraceSummary
from ragmon.sampling.view import Fired, Ints, Mask, TraceRow


@dataclass(slots=True)  # not frozen: a frozen dataclass is slower to build, one per trace
class Outcome:
    decision: Decision
    reasons: tuple[str, ...]
    probability: float  # chance a trace like this one is kept; 1/probability is its weight


@dataclass(slots=True)
class BatchOutcome:
    """The composite's verdict on each row of a `BatchRows`: `decision[i]`, `reasons[i]` and `probability[i]`
    belong to its `rows[i]`, as `CompositePolicy.decide` would give them."""

    decision: list[Decision]
    reasons: list[tuple[str, ...]]
    probability: list[float]


@dataclass(slots=True, frozen=True)
class _Member:
    """One policy of the composite, with what deciding needs of it, looked up once."""

    name: str
    keys: dict[Decision, tuple[str, str]]  # the counter key of each of its verdicts
    rule: Rule | None  # its rule, over one trace or over rows
    own: Policy | None  # or a policy of one's own: evaluated per trace only
    fired: Verdict  # a rule's verdict when it fires: DROP for a drop rule, else KEEP with its probability


def _member(policy: AnyPolicy) -> _Member:
    keys = {decision: (policy.name, str(decision.value)) for decision in Decision}
    if isinstance(policy, Rule):
        fired = DROP if drops(policy) else Verdict(Decision.KEEP, policy.probability)
        return _Member(policy.name, keys, policy, None, fired)
    return _Member(policy.name, keys, None, policy, SKIP)  # `fired` unused: its own `evaluate` answers


class CompositePolicy:
    def __init__(
        self,
        policies: Sequence[AnyPolicy],
        budget: KeepBudget | None = None,
        budget_exempt: frozenset[str] = frozenset({"error"}),
    ) -> None:
        names = [p.name for p in policies]
        if len(set(names)) != len(names):
            raise ValueError(f"sampling policy names must be unique, got {names}")
        self.drop_rules = [_member(p) for p in policies if drops(p)]
        self.keep_policies = [_member(p) for p in policies if not drops(p)]
        self.budget = budget
        self.exempt = budget_exempt
        self.counts: Counter[tuple[str, str]] = Counter()  # (policy, decision value) -> traces
        rules = [p for p in policies if isinstance(p, Rule)]
        # a policy of one's own has no columnar form: then every trace takes the per-trace path
        self.columnar = len(rules) == len(policies)
        self.reads_request_p95 = any(rule.reads_request_p95 for rule in rules)
        self.reads_stage_p95 = any(rule.reads_stage_p95 for rule in rules)

    def decide(self, trace: TraceSummary, now_s: float) -> Outcome:
        row = TraceRow(trace)
        for rule in self.drop_rules:
            if self._evaluate(rule, row).decision is Decision.DROP:
                self.counts[("composite", _VALUE[Decision.DROP])] += 1
                return Outcome(Decision.DROP, (rule.name,), 0.0)
        fired: list[tuple[str, float]] = []
        for policy in self.keep_policies:
            verdict = self._evaluate(policy, row)
            if verdict.decision is Decision.KEEP:
                fired.append((policy.name, verdict.probability))
        if not fired:
            self.counts[("composite", _VALUE[Decision.SKIP])] += 1
            return Outcome(Decision.SKIP, (), 0.0)
        reasons = tuple(name for name, _ in fired)
        probability = self._admit(reasons, max(p for _, p in fired), trace.trace_id, trace.bytes_held, now_s)
        if probability is None:
            self.counts[("composite", _VALUE[Decision.SKIP])] += 1
            return Outcome(Decision.SKIP, ("budget",), 0.0)
        self.counts[("composite", _VALUE[Decision.KEEP])] += 1
        return Outcome(Decision.KEEP, reasons, probability)

    def _evaluate(self, member: _Member, row: TraceRow) -> Verdict:
        """`member`'s verdict on one trace, counted; a policy that raises is counted as ERROR, not firing."""
        try:
            if member.rule is not None:
                verdict = member.fired if member.rule.fires(row) else SKIP
            else:
                assert member.own is not None
                verdict = member.own.evaluate(row.trace)
        except Exception as exc:
            warn_limited(f"policy:{member.name}", "sampling policy %s failed: %r", member.name, exc)
            self.counts[member.keys[Decision.ERROR]] += 1
            return Verdict(Decision.ERROR, 0.0)
        self.counts[member.keys[verdict.decision]] += 1
        return verdict

    def decide_rows(self, rows: BatchRows, now_s: float) -> BatchOutcome:
        """`decide` for every row of `rows` at once, each rule evaluated over arrays (requires `columnar`); the
        budget spends in row order, the order in which `decide` would see them."""
        counts = self.counts
        n = rows.size
        undecided = np.ones(n, dtype=bool)
        decision: list[Decision] = [Decision.SKIP] * n
        reasons: list[tuple[str, ...]] = [()] * n
        probability = [0.0] * n
        for rule in self.drop_rules:  # in order; a dropped trace is not shown to later rules
            fired = _fires(rule, rows) & undecided
            evaluated = int(undecided.sum())
            dropped = int(fired.sum())
            counts[rule.keys[Decision.DROP]] += dropped
            counts[rule.keys[Decision.SKIP]] += evaluated - dropped
            for i in np.flatnonzero(fired):
                decision[i], reasons[i] = Decision.DROP, (rule.name,)
            undecided &= ~fired
        counts[("composite", "drop")] += n - int(undecided.sum())
        fired_bits = np.zeros(n, dtype=np.int64)
        evaluated = int(undecided.sum())
        for bit, policy in enumerate(self.keep_policies):
            fired = _fires(policy, rows) & undecided
            kept = int(fired.sum())
            counts[policy.keys[Decision.KEEP]] += kept
            counts[policy.keys[Decision.SKIP]] += evaluated - kept
            fired_bits |= fired.astype(np.int64) << bit
        by_bits = self._reasons_by_bits(fired_bits)
        sizes = rows.bytes_held if self.budget is not None else None
        kept_rows = 0
        skipped = evaluated - int(np.count_nonzero(fired_bits))
        for i in np.flatnonzero(fired_bits):  # row order: the budget spends in the order traces are decided
            names, p = by_bits[int(fired_bits[i])]
            if sizes is not None:  # a trace's id and size are read only for the budget
                admitted = self._admit(names, p, rows.trace_id(int(i)), int(sizes[i]), now_s)
                if admitted is None:
                    skipped += 1
                    reasons[i] = ("budget",)
                    continue
                p = admitted
            decision[i], reasons[i], probability[i] = Decision.KEEP, names, p
            kept_rows += 1
        counts[("composite", "skip")] += skipped
        counts[("composite", "keep")] += kept_rows
        return BatchOutcome(decision, reasons, probability)

    def _reasons_by_bits(self, fired_bits: Ints) -> dict[int, tuple[tuple[str, ...], float]]:
        """(reasons, probability before the budget) of each combination of fired keep policies that occurs."""
        out = {}
        for bits in np.unique(fired_bits):
            fired = [p for bit, p in enumerate(self.keep_policies) if int(bits) >> bit & 1]
            if fired:
                out[int(bits)] = (tuple(p.name for p in fired), max(p.fired.probability for p in fired))
        return out

    def _admit(
        self, reasons: tuple[str, ...], probability: float, trace_id: str, bytes_held: int, now_s: float
    ) -> float | None:
        """The budget's word on a trace the policies keep: its probability once admitted (exempt reasons spend
        without asking), or None when the budget turns it away (counted)."""
        budget = self.budget
        if budget is None:
            return probability
        if any(name in self.exempt for name in reasons):
            budget.try_spend(bytes_held, now_s, force=True)
            return probability
        admission = budget.admission_probability(bytes_held, now_s)
        if not (uniform(trace_id) < admission and budget.try_spend(bytes_held, now_s)):
            self.counts[("budget", _VALUE[Decision.SKIP])] += 1
            return None
        return probability * admission


def _fires(member: _Member, rows: BatchRows) -> Mask:
    """Whether `member`'s rule fires on each row (a rule that tests nothing of a row returns one bool for all)."""
    if member.rule is None:
        raise TypeError(f"sampling policy {member.name} has no columnar form (it is not a Rule)")
    with np.errstate(invalid="ignore"):  # inf - inf in a p95 test: NaN, which fails it, as on the per-trace path
        fired: Fired = member.rule.fires(rows)
    if isinstance(fired, np.ndarray):
        return fired
    return np.full(rows.size, bool(fired))


_VALUE = {decision: str(decision.value) for decision in Decision}


def uniform(trace_id: str) -> float:
    """A number in [0, 1) from the high trace-id bits (the baseline uses the low 56): independent, reproducible."""
    try:
        return int(trace_id[:13], 16) / float(1 << 52)
    except ValueError:
        return 0.0
