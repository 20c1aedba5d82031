"""The tail sampler: merges per-trace fragments, decides as soon as a trace is complete, remembers decisions.

- A trace is complete when its root span has arrived, plus `decision_grace_s` for late children — not after a
  fixed wait. A trace whose root never arrives is decided `decision_timeout_s` after its first fragment.
- Late fragments of a decided trace follow the decision (bounded decision cache); for a kept trace they are
  reported again so its payload is refreshed with the late spans.
- Memory is bounded by traces held and by the captured bytes they keep waiting in the store: when either cap is
  hit, the oldest trace is decided early with what is known, and the eviction is counted by reason.
- "Slow relative to p95" compares each stage's longest span with the recent p95 of its (feature, stage), which
  the agent reads from the store's per-minute rollups over all traffic (`p95_lookup`).
- Time comes from an injected clock, so tests drive it by hand.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ragmon.agent.sampling.budget import KeepBudget
from ragmon.agent.sampling.composite import CompositePolicy
from ragmon.agent.sampling.config import SamplerConfig, build_policies
from ragmon.agent.sampling.decision import Decision
from ragmon.agent.sampling.trace import TraceFragment, TraceSummary

P95Lookup = Callable[[str, str], "float | None"]  # (feature, stage) -> recent p95 in ms


_DECIDED = {decision: f"decided:{decision.value}" for decision in Decision}


def _no_p95(feature: str, stage: str) -> float | None:
    return None


@dataclass(slots=True)  # not frozen: a frozen dataclass costs ~3x to build, one per trace
class DecidedTrace:
    summary: TraceSummary
    decision: Decision
    reasons: tuple[str, ...]
    probability: float  # chance a trace like this one is kept; 1/probability is its weight
    decided_by: str  # complete | timeout | evicted:max_traces | evicted:max_bytes | shutdown | late
    decided_at_s: float

    @property
    def trace_id(self) -> str:
        return self.summary.trace_id

    @property
    def tenant(self) -> str:
        return self.summary.tenant


class Sampler:
    def __init__(
        self,
        config: SamplerConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        p95_lookup: P95Lookup = _no_p95,
    ) -> None:
        self.config = config or SamplerConfig()
        budget = None
        if self.config.budget.traces_per_s or self.config.budget.bytes_per_s:
            budget = KeepBudget(self.config.budget.traces_per_s, self.config.budget.bytes_per_s)
        policies = build_policies(self.config)
        self.policy = CompositePolicy(policies, budget, frozenset(self.config.budget.exempt))
        self.p95_lookup = p95_lookup
        # Only a slow policy relative to the p95 reads p95 ratios: skip the lookups (a few per trace) otherwise.
        self._uses_p95 = any(getattr(p, "relative_to_p95", None) is not None for p in policies)
        self._clock = clock
        self._pending: OrderedDict[str, TraceSummary] = OrderedDict()  # first-seen order: oldest first
        self._ready: deque[tuple[float, str]] = deque()  # (decide at, trace id), in time order
        self._decided: OrderedDict[str, tuple[Decision, tuple[str, ...], float]] = OrderedDict()
        self.bytes_held = 0
        self.counts: Counter[str] = Counter()

    @property
    def traces_held(self) -> int:
        return len(self._pending)

    def low_water_seq(self) -> int | None:
        """The smallest ingest sequence a pending trace was first seen in: replay from here after a crash."""
        return min((t.first_ingest_seq for t in self._pending.values()), default=None)

    def ingest(self, fragments: Iterable[TraceFragment]) -> list[DecidedTrace]:
        """Merge fragments in; return traces decided meanwhile (evictions, late fragments of kept traces)."""
        now = self._clock()
        out: list[DecidedTrace] = []
        grace = self.config.decision_grace_s
        max_traces = self.config.max_traces
        fragments_seen = spans_seen = 0
        for fragment in fragments:
            fragments_seen += 1
            spans_seen += fragment.span_count
            trace_id = fragment.trace_id
            decided = self._decided.get(trace_id)
            if decided is not None:
                out.extend(self._late(fragment, decided, now))
                continue
            trace = self._pending.get(trace_id)
            if trace is None:
                if len(self._pending) >= max_traces:
                    out.append(self._evict_oldest("evicted:max_traces", now))
                trace = self._pending[trace_id] = TraceSummary.start(fragment, now)
            else:
                trace.merge(fragment)
            self.bytes_held += fragment.content_bytes
            if trace.root_seen and trace.complete_at_s is None:
                trace.complete_at_s = now + grace
                self._ready.append((trace.complete_at_s, trace_id))
            while self.bytes_held > self.config.max_bytes and self._pending:
                out.append(self._evict_oldest("evicted:max_bytes", now))
        self.counts["fragments"] += fragments_seen
        self.counts["spans"] += spans_seen
        return out

    def tick(self) -> list[DecidedTrace]:
        """Decide every trace that is complete (root + grace) or timed out by now."""
        now = self._clock()
        out = []
        while self._ready and self._ready[0][0] <= now:
            _, trace_id = self._ready.popleft()
            trace = self._pending.pop(trace_id, None)
            if trace is not None:  # else already decided (evicted)
                out.append(self._decide(trace, "complete", now))
        deadline = now - self.config.decision_timeout_s
        while self._pending:
            oldest = next(iter(self._pending.values()))
            if oldest.first_seen_s > deadline:
                break
            self._pending.popitem(last=False)
            out.append(self._decide(oldest, "timeout", now))
        return out

    def flush(self) -> list[DecidedTrace]:
        """Decide everything held (shutdown)."""
        now = self._clock()
        out = [self._decide(trace, "shutdown", now) for trace in self._pending.values()]
        self._pending.clear()
        self._ready.clear()
        return out

    def _evict_oldest(self, reason: str, now: float) -> DecidedTrace:
        _, trace = self._pending.popitem(last=False)
        self.counts[reason] += 1
        return self._decide(trace, reason, now)

    def _decide(self, trace: TraceSummary, decided_by: str, now: float) -> DecidedTrace:
        self.bytes_held -= trace.bytes_held
        if self._uses_p95:
            lookup, feature, ratios = self.p95_lookup, trace.feature, trace.p95_ratios
            for stage, duration_ms in trace.stage_max_ms.items():
                p95 = lookup(feature, stage)
                if p95 is not None and p95 > 0:
                    ratios[stage] = duration_ms / p95
        outcome = self.policy.decide(trace, now)
        self.counts[_DECIDED[outcome.decision]] += 1
        self.counts["decided_by:" + decided_by] += 1
        self._remember(trace.trace_id, (outcome.decision, outcome.reasons, outcome.probability))
        return DecidedTrace(trace, outcome.decision, outcome.reasons, outcome.probability, decided_by, now)

    def _remember(self, trace_id: str, decision: tuple[Decision, tuple[str, ...], float]) -> None:
        if self.config.decision_cache_size == 0:
            return
        self._decided[trace_id] = decision
        if len(self._decided) > self.config.decision_cache_size:
            self._decided.popitem(last=False)
            self.counts["decision_cache_evicted"] += 1

    def _late(
        self, fragment: TraceFragment, decided: tuple[Decision, tuple[str, ...], float], now: float
    ) -> list[DecidedTrace]:
        decision, reasons, probability = decided
        if decision is not Decision.KEEP:
            self.counts["late_spans_discarded"] += fragment.span_count
            return []
        self.counts["late_spans_kept"] += fragment.span_count
        summary = TraceSummary(fragment.trace_id, fragment.tenant, now)
        summary.merge(fragment)
        return [DecidedTrace(summary, decision, reasons, probability, "late", now)]
