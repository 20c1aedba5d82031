"""The tail sampler: gathers spans per trace, decides as soon as a trace is complete, remembers decisions.

- A trace is complete when its root span has arrived, plus `decision_grace_s` for late children — not after a
  fixed wait. A trace whose root never arrives is decided `decision_timeout_s` after its first span.
- Late spans of a decided trace follow the decision (bounded decision cache); kept ones are emitted as additions.
- Memory is bounded by traces and bytes held: when either cap is hit the oldest trace is decided early with what
  is known, and the eviction is counted by reason. Nothing is dropped silently.
- Time comes from an injected clock, so tests drive it by hand.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from ragmon.agent.sampling.budget import KeepBudget
from ragmon.agent.sampling.composite import CompositePolicy
from ragmon.agent.sampling.config import SamplerConfig, build_policies
from ragmon.agent.sampling.decision import Decision
from ragmon.agent.sampling.latency import LatencyTracker
from ragmon.agent.sampling.trace import SpanContent, TraceSummary
from ragmon.model import SpanBatch


@dataclass(frozen=True, slots=True)
class DecidedTrace:
    summary: TraceSummary  # its `spans` hold the captured content (emptied for traces not kept)
    decision: Decision
    reasons: tuple[str, ...]
    probability: float
    decided_by: str  # complete | timeout | evicted:max_traces | evicted:max_bytes | shutdown | late
    decided_at_s: float

    @property
    def trace_id(self) -> str:
        return self.summary.trace_id


class Sampler:
    def __init__(self, config: SamplerConfig | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config or SamplerConfig()
        budget = None
        if self.config.budget.traces_per_s or self.config.budget.bytes_per_s:
            budget = KeepBudget(self.config.budget.traces_per_s, self.config.budget.bytes_per_s)
        self.policy = CompositePolicy(build_policies(self.config), budget, frozenset(self.config.budget.exempt))
        self.latency = LatencyTracker()
        self._clock = clock
        self._pending: OrderedDict[str, TraceSummary] = OrderedDict()  # first-seen order: oldest first
        self._ready: deque[tuple[float, str]] = deque()  # (decide at, trace id), in time order
        self._decided: OrderedDict[str, tuple[Decision, tuple[str, ...], float]] = OrderedDict()
        self.bytes_held = 0
        self.counts: Counter[str] = Counter()

    @property
    def traces_held(self) -> int:
        return len(self._pending)

    def ingest(self, batch: SpanBatch) -> list[DecidedTrace]:
        """Fold a batch of normalised spans in; return the traces decided meanwhile (evictions, late spans)."""
        now = self._clock()
        out: list[DecidedTrace] = []
        columns = batch.columns()
        content = batch.content
        grace = self.config.decision_grace_s
        for i in range(len(batch)):
            trace_id = columns["trace_id"][i]
            stage = columns["stage"][i]
            feature = columns["feature"][i]
            duration_ms = columns["duration_ms"][i]
            ratio = self.latency.observe(feature, stage, duration_ms)
            span = SpanContent(
                span_id=columns["span_id"][i],
                parent_span_id=columns["parent_span_id"][i],
                stage=stage,
                name=columns["name"][i],
                start_time_ns=columns["start_time"][i],
                duration_ms=duration_ms,
                status=columns["status"][i],
                content=content[i] if i < len(content) else {},
                retrieved_ids=columns["retrieved_ids"][i],
                retrieved_scores=columns["retrieved_scores"][i],
            )
            self.counts["spans"] += 1
            decided = self._decided.get(trace_id)
            if decided is not None:
                out.extend(self._late_span(trace_id, columns["tenant"][i], span, decided, now))
                continue
            trace = self._pending.get(trace_id)
            if trace is None:
                if len(self._pending) >= self.config.max_traces:
                    out.append(self._evict_oldest("evicted:max_traces", now))
                trace = self._pending[trace_id] = TraceSummary(trace_id, columns["tenant"][i], now)
            before = trace.bytes_held
            trace.add_span(span, {k: columns[k][i] for k in _SUMMARY_COLUMNS})
            self.bytes_held += trace.bytes_held - before
            if ratio is not None and ratio > trace.p95_ratios.get(stage, 0.0):
                trace.p95_ratios[stage] = ratio
            if not span.parent_span_id and trace.complete_at_s is None:
                trace.complete_at_s = now + grace
                self._ready.append((trace.complete_at_s, trace_id))
            while self.bytes_held > self.config.max_bytes and self._pending:
                out.append(self._evict_oldest("evicted:max_bytes", now))
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
        outcome = self.policy.decide(trace, now)
        self.counts[f"decided:{outcome.decision.value}"] += 1
        self.counts[f"decided_by:{decided_by}"] += 1
        if outcome.decision is not Decision.KEEP:
            trace.spans.clear()  # the numbers are stored already; the text is not wanted
        self._remember(trace.trace_id, (outcome.decision, outcome.reasons, outcome.probability))
        return DecidedTrace(trace, outcome.decision, outcome.reasons, outcome.probability, decided_by, now)

    def _remember(self, trace_id: str, decision: tuple[Decision, tuple[str, ...], float]) -> None:
        if self.config.decision_cache_size == 0:
            return
        self._decided[trace_id] = decision
        if len(self._decided) > self.config.decision_cache_size:
            self._decided.popitem(last=False)
            self.counts["decision_cache_evicted"] += 1

    def _late_span(
        self,
        trace_id: str,
        tenant: str,
        span: SpanContent,
        decided: tuple[Decision, tuple[str, ...], float],
        now: float,
    ) -> list[DecidedTrace]:
        decision, reasons, probability = decided
        if decision is not Decision.KEEP:
            self.counts["late_spans_discarded"] += 1
            return []
        self.counts["late_spans_kept"] += 1
        summary = TraceSummary(trace_id, tenant, now)
        summary.spans.append(span)
        return [DecidedTrace(summary, decision, reasons, probability, "late", now)]


_SUMMARY_COLUMNS = ("feature", "user", "top1_score", "similarity_gap", "norm_deviation")
