"""The tail sampler: merges per-trace fragments, decides as soon as a trace is complete, remembers decisions.

- A trace is complete when its root span has arrived, plus `decision_grace_s` for late children — not after a
  fixed wait. A trace whose root never arrives is decided `decision_timeout_s` after its first fragment.
- Late fragments of a decided trace follow the decision (bounded decision cache); for a kept trace they are
  reported again so its payload is refreshed with the late spans.
- Memory is bounded by traces held and by the captured bytes they keep waiting in the store: when either cap is
  hit, the oldest trace is decided early with what is known, and the eviction is counted by reason.
- "Slow relative to p95" compares the whole request with its feature's recent p95, which the sampler measures
  from the roots it decides (`request_latency.py`); an opt-in stage rule compares each stage's longest span with
  the recent p95 of its (feature, stage), which the agent reads from the store's per-minute rollups (`p95_lookup`).
  Both are production figures: an eval run's requests are judged against them but do not move them (a dataset
  replayed at full speed, or a slow candidate model, says nothing about what is slow for users).
- Every decision is counted by its first reason (`kept:error`, `kept:slow`, …; policies in configured order), so the
  kept share by reason adds up to the kept share.
- Time comes from an injected clock, so tests drive it by hand.
- A stored batch's fragments arrive as one table (`ingest_table`); traces that arrive whole wait and are decided as
  rows of that table, all at once (`batch.py`); the rest take the per-trace path. Both paths evaluate each policy's
  one rule (`policies.Rule`), so they decide alike; a policy of one's own sends every trace the per-trace way.
"""

from __future__ import annotations

import math
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ragmon.sampling.batch import BatchRows, FragmentColumns
from ragmon.sampling.budget import KeepBudget
from ragmon.sampling.composite import CompositePolicy
from ragmon.sampling.config import SamplerConfig, build_policies
from ragmon.sampling.decision import Decision
from ragmon.sampling.request_latency import RequestLatency
from ragmon.sampling.trace import TraceFragment, TraceSummary

P95Lookup = Callable[[str, str], "float | None"]  # (feature, stage) -> recent p95 in ms


_DECIDED = {decision: f"decided:{decision.value}" for decision in Decision}


# A decided trace as the decision cache keeps it: decision, reasons, probability, first ingest sequence.
_Remembered = tuple[Decision, tuple[str, ...], float, int]


def _no_p95(feature: str, stage: str) -> float | None:
    return None


@dataclass(slots=True)  # not frozen: a frozen dataclass is slower to build, one per trace
class DecidedTrace:
    tenant: str
    trace_id: str
    decision: Decision
    reasons: tuple[str, ...]
    probability: float  # chance a trace like this one is kept; 1/probability is its weight
    decided_by: str  # complete | timeout | evicted:max_traces | evicted:max_bytes | shutdown | late
    decided_at_s: float
    # The batch the trace was first seen in: all its spans were stored at or after this ingest sequence, which
    # lets the payload copy read recent parts only instead of every stored span (ragmon.sinks.sampler_sql). 0: unknown.
    first_ingest_seq: int = 0
    feature: str = ""
    eval_run: str = ""  # '' = production traffic; else the `ragmon eval run` it belongs to
    root_span_id: str = ""  # '' when the root never arrived (or for a late fragment's repeat of a decision)


# Counter keys of an eval run's decisions start with this: `ragmon eval run` traffic is decided like production's
# but counted apart, so the kept share /metrics and the demo show is production's (as the report's is).
EVAL_PREFIX = "eval:"


def kept_key(reasons: tuple[str, ...], eval_run: str = "") -> str:
    """The counter key of a kept trace: its first reason, so kept shares by reason add up to the kept share."""
    return (EVAL_PREFIX if eval_run else "") + "kept:" + (reasons[0] if reasons else "")


def decision_counts(counts: Mapping[str, int], *, evaluation: bool = False) -> Counter[str]:
    """One traffic's decision counts (`kept:<reason>`, `decided:<decision>`), without the eval prefix: production's,
    or with `evaluation` the eval runs'."""
    prefix = EVAL_PREFIX if evaluation else ""
    return Counter(
        {
            key[len(prefix) :]: n
            for key, n in counts.items()
            if key.startswith(prefix + "kept:") or key.startswith(prefix + "decided:")
        }
    )


@dataclass(slots=True, eq=False)
class _WaitingBatch:
    """The rows of one stored batch whose traces arrived whole (root included) and wait out the grace period."""

    columns: FragmentColumns
    waiting: np.ndarray  # bool per row: still waiting here
    count: int
    bytes_held: int
    first_seen_s: float
    ready_at_s: float

    def first_rows(self, n: int) -> np.ndarray:
        return np.flatnonzero(self.waiting)[:n]


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
        self.policy = CompositePolicy(build_policies(self.config), budget, frozenset(self.config.budget.exempt))
        self.p95_lookup = p95_lookup
        # Only rules that read p95 figures need them: skip measuring and looking them up otherwise.
        self._uses_request_p95 = self.policy.reads_request_p95
        self._uses_p95 = self.policy.reads_stage_p95
        self.request_latency = RequestLatency(self.config.request_p95_window, self.config.request_p95_min_requests)
        self._clock = clock
        self._pending: OrderedDict[str, TraceSummary] = OrderedDict()  # first-seen order: oldest first
        self._ready: deque[tuple[float, str]] = deque()  # (decide at, trace id), in time order
        self._decided: OrderedDict[str, _Remembered] = OrderedDict()
        # the columnar path: waiting batches in arrival order, and where each of their traces is
        self._batches: deque[_WaitingBatch] = deque()
        self._in_batch: dict[str, tuple[_WaitingBatch, int]] = {}
        self.bytes_held = 0
        self.counts: Counter[str] = Counter()

    @property
    def traces_held(self) -> int:
        return len(self._pending) + len(self._in_batch)

    def low_water_seq(self) -> int | None:
        """The smallest ingest sequence a pending trace was first seen in: replay from here after a crash."""
        seqs = [t.first_ingest_seq for t in self._pending.values()]
        seqs += [b.columns.first_ingest_seq for b in self._batches if b.count]
        return min(seqs, default=None)

    def ingest(self, fragments: Iterable[TraceFragment]) -> list[DecidedTrace]:
        """Merge fragments in; return traces decided meanwhile (evictions, late fragments of kept traces)."""
        now = self._clock()
        out: list[DecidedTrace] = []
        fragments_seen = spans_seen = 0
        for fragment in fragments:
            fragments_seen += 1
            spans_seen += fragment.span_count
            self._add(fragment, now, out)
            self._enforce_caps(now, out)
        self.counts["fragments"] += fragments_seen
        self.counts["spans"] += spans_seen
        return out

    def ingest_table(self, table: pa.Table, first_ingest_seq: int) -> list[DecidedTrace]:
        """`ingest` for one stored batch's fragments as a table (`ragmon.sinks.sampler_sql.trace_fragments_sql`). A
        trace
        that arrives whole and new waits as a row of the table; any other takes the per-trace path."""
        if not table.num_rows:
            return []
        if not self.policy.columnar:
            return self.ingest(TraceFragment.from_columns(table.to_pydict(), first_ingest_seq))
        now = self._clock()
        out: list[DecidedTrace] = []
        columns = FragmentColumns(table, first_ingest_seq)
        waiting = np.zeros(columns.size, dtype=bool)
        block = _WaitingBatch(columns, waiting, 0, 0, now, now + self.config.decision_grace_s)
        in_batch, pending, decided = self._in_batch, self._pending, self._decided
        root_seen, trace_ids = columns.root_seen.tolist(), columns.trace_id
        for row in range(columns.size):  # in row order, like `ingest`: a trace id twice in one batch merges
            trace_id = trace_ids[row]
            if root_seen[row] and trace_id not in in_batch and trace_id not in pending and trace_id not in decided:
                waiting[row] = True
                in_batch[trace_id] = (block, row)
            else:
                self._add(columns.fragment(row), now, out)
        block.count = int(waiting.sum())
        if block.count:
            block.bytes_held = int(columns.content_bytes[waiting].sum())
            self.bytes_held += block.bytes_held
            self._batches.append(block)
        self._enforce_caps(now, out)
        self.counts["fragments"] += columns.size
        self.counts["spans"] += int(columns.span_count.sum())
        return out

    def _add(self, fragment: TraceFragment, now: float, out: list[DecidedTrace]) -> None:
        trace_id = fragment.trace_id
        decided = self._decided.get(trace_id)
        if decided is not None:
            out.extend(self._late(fragment, decided, now))
            return
        if trace_id in self._in_batch:
            self._take_out_of_batch(trace_id)
        trace = self._pending.get(trace_id)
        if trace is None:
            trace = self._pending[trace_id] = TraceSummary.start(fragment, now)
        else:
            trace.merge(fragment)
        self.bytes_held += fragment.content_bytes
        if trace.root_seen and trace.complete_at_s is None:
            trace.complete_at_s = now + self.config.decision_grace_s
            self._ready.append((trace.complete_at_s, trace_id))

    def _take_out_of_batch(self, trace_id: str) -> None:
        """A waiting row gets another fragment: it becomes a per-trace summary, due when its batch was."""
        block, row = self._in_batch.pop(trace_id)
        block.waiting[row] = False
        block.count -= 1
        summary = TraceSummary.start(block.columns.fragment(row), block.first_seen_s)
        block.bytes_held -= summary.bytes_held  # still held, now by the summary
        summary.complete_at_s = block.ready_at_s
        self._pending[trace_id] = summary
        self._ready.append((block.ready_at_s, trace_id))

    def _enforce_caps(self, now: float, out: list[DecidedTrace]) -> None:
        """Decide the oldest traces early while more traces or captured bytes are held than allowed."""
        while self.traces_held > self.config.max_traces:
            self._evict_oldest("evicted:max_traces", self.traces_held - self.config.max_traces, now, out)
        while self.bytes_held > self.config.max_bytes and self.traces_held:
            self._evict_oldest("evicted:max_bytes", None, now, out)

    def _evict_oldest(self, reason: str, traces: int | None, now: float, out: list[DecidedTrace]) -> None:
        """Decide up to `traces` of the oldest held traces (None: as many as bring the bytes under the cap)."""
        while self._batches and not self._batches[0].count:
            self._batches.popleft()
        oldest_pending = next(iter(self._pending.values()), None)
        block = self._batches[0] if self._batches else None
        if block is None or (oldest_pending is not None and oldest_pending.first_seen_s < block.first_seen_s):
            assert oldest_pending is not None
            del self._pending[oldest_pending.trace_id]
            self.counts[reason] += 1
            out.append(self._decide(oldest_pending, reason, now))
            return
        if traces is None:  # the fewest rows whose bytes bring the total under the cap
            rows = block.first_rows(block.count)
            excess = self.bytes_held - self.config.max_bytes
            cumulative = np.cumsum(block.columns.content_bytes[rows])
            rows = rows[: int(np.searchsorted(cumulative, excess)) + 1]
        else:
            rows = block.first_rows(traces)
        self.counts[reason] += len(rows)
        self._decide_rows(block, rows, reason, now, out)

    def tick(self) -> list[DecidedTrace]:
        """Decide every trace that is complete (root + grace) or timed out by now."""
        now = self._clock()
        out: list[DecidedTrace] = []
        ready, batches = self._ready, self._batches
        while True:  # per-trace and columnar traces in the order they became due
            trace_due = ready[0][0] if ready and ready[0][0] <= now else None
            batch_due = batches[0].ready_at_s if batches and batches[0].ready_at_s <= now else None
            if trace_due is None and batch_due is None:
                break
            if batch_due is None or (trace_due is not None and trace_due <= batch_due):
                _, trace_id = ready.popleft()
                trace = self._pending.pop(trace_id, None)
                if trace is not None:  # else already decided (evicted)
                    out.append(self._decide(trace, "complete", now))
            else:
                block = batches.popleft()
                self._decide_rows(block, block.first_rows(block.count), "complete", now, out)
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
        while self._batches:
            block = self._batches.popleft()
            self._decide_rows(block, block.first_rows(block.count), "shutdown", now, out)
        return out

    def _decide(self, trace: TraceSummary, decided_by: str, now: float) -> DecidedTrace:
        self.bytes_held -= trace.bytes_held
        if self._uses_p95:
            lookup, feature, stage_p95 = self.p95_lookup, trace.feature, trace.stage_p95_ms
            for stage in trace.stage_max_ms:
                p95 = lookup(feature, stage)
                if p95 is not None:
                    stage_p95[stage] = p95
        if self._uses_request_p95 and trace.root_duration_ms is not None:
            trace.request_p95_ms = self.request_latency.p95(trace.tenant, trace.feature)  # before this request
            if not trace.eval_run:
                self.request_latency.add_one(trace.tenant, trace.feature, trace.root_duration_ms)
        outcome = self.policy.decide(trace, now)
        traffic = EVAL_PREFIX if trace.eval_run else ""
        self.counts[traffic + _DECIDED[outcome.decision]] += 1
        if outcome.decision is Decision.KEEP:
            self.counts[kept_key(outcome.reasons, trace.eval_run)] += 1
        self.counts["decided_by:" + decided_by] += 1
        first_seq = trace.first_ingest_seq
        self._remember(trace.trace_id, (outcome.decision, outcome.reasons, outcome.probability, first_seq))
        return DecidedTrace(
            trace.tenant,
            trace.trace_id,
            outcome.decision,
            outcome.reasons,
            outcome.probability,
            decided_by,
            now,
            first_seq,
            trace.feature,
            trace.eval_run,
            trace.root_span_id,
        )

    def _decide_rows(
        self, block: _WaitingBatch, rows: np.ndarray, decided_by: str, now: float, out: list[DecidedTrace]
    ) -> None:
        """Decide waiting `rows` of `block` at once (the composite over arrays; see batch.py)."""
        if not len(rows):
            return
        columns = block.columns
        request_p95 = self._request_p95_of(columns, rows) if self._uses_request_p95 else None
        stage_p95 = self.p95_lookup if self._uses_p95 else None
        outcome = self.policy.decide_rows(BatchRows(columns, rows, stage_p95, request_p95), now)
        block.waiting[rows] = False
        block.count -= len(rows)
        released = int(columns.content_bytes[rows].sum())
        block.bytes_held -= released
        self.bytes_held -= released
        trace_ids, tenants, in_batch, remember = columns.trace_id, columns.tenant, self._in_batch, self._remember
        features, eval_runs, root_span_ids = columns.text("feature"), columns.eval_run, columns.root_span_id
        first_seq = columns.first_ingest_seq
        for i, row in enumerate(rows.tolist()):
            trace_id = trace_ids[row]
            del in_batch[trace_id]
            decision, reasons, probability = outcome.decision[i], outcome.reasons[i], outcome.probability[i]
            remember(trace_id, (decision, reasons, probability, first_seq))
            out.append(
                DecidedTrace(
                    tenants[row],
                    trace_id,
                    decision,
                    reasons,
                    probability,
                    decided_by,
                    now,
                    first_seq,
                    features[row],
                    eval_runs[row],
                    root_span_ids[row],
                )
            )
        runs = [eval_runs[row] for row in rows.tolist()]
        self.counts.update(
            (EVAL_PREFIX if run else "") + _DECIDED[d] for run, d in zip(runs, outcome.decision, strict=True)
        )
        self.counts.update(
            kept_key(r, run)
            for run, d, r in zip(runs, outcome.decision, outcome.reasons, strict=True)
            if d is Decision.KEEP
        )
        self.counts["decided_by:" + decided_by] += len(rows)

    def _request_p95_of(self, columns: FragmentColumns, rows: np.ndarray) -> np.ndarray:
        """Each row's feature's request p95 before that row (NaN: not known yet), the rows' request durations
        joining their features' windows in row order, as deciding them one by one would. An eval run's row joins
        no window: it reads the p95 its feature's window has at that point of the order, and the rows after it go on
        from there, as they would one by one."""
        keys, codes = columns.tenant_features()
        row_codes = codes[rows]
        durations = columns.root_duration_ms[rows]
        evaluation = np.array([bool(columns.eval_run[row]) for row in rows.tolist()], dtype=bool)
        p95 = np.full(len(rows), math.nan)
        order = np.argsort(row_codes, kind="stable")
        groups, starts = np.unique(row_codes[order], return_index=True)
        latency = self.request_latency
        for code, chunk in zip(groups.tolist(), np.split(order, starts[1:]), strict=True):
            tenant, feature = keys[code]
            start = 0
            for at in np.flatnonzero(evaluation[chunk]).tolist():  # production runs between the eval rows
                p95[chunk[start:at]] = latency.p95_then_add(tenant, feature, durations[chunk[start:at]])
                if durations[chunk[at]] == durations[chunk[at]]:  # a root: judged, as `_decide` would
                    known = latency.p95(tenant, feature)
                    p95[chunk[at]] = math.nan if known is None else known
                start = at + 1
            p95[chunk[start:]] = latency.p95_then_add(tenant, feature, durations[chunk[start:]])
        return p95

    def _remember(self, trace_id: str, decision: _Remembered) -> None:
        if self.config.decision_cache_size == 0:
            return
        self._decided[trace_id] = decision
        if len(self._decided) > self.config.decision_cache_size:
            self._decided.popitem(last=False)
            self.counts["decision_cache_evicted"] += 1

    def _late(self, fragment: TraceFragment, decided: _Remembered, now: float) -> list[DecidedTrace]:
        decision, reasons, probability, first_seq = decided
        if decision is not Decision.KEEP:
            self.counts["late_spans_discarded"] += fragment.span_count
            return []
        self.counts["late_spans_kept"] += fragment.span_count
        # the first sequence of the whole trace, not of this fragment: the copy re-reads all of its spans
        return [
            DecidedTrace(
                fragment.tenant,
                fragment.trace_id,
                decision,
                reasons,
                probability,
                "late",
                now,
                first_seq,
                fragment.feature,
                fragment.eval_run,
                fragment.root_span_id,  # a root that arrived after the decision (a timeout's)
            )
        ]
