"""The sampler's columnar path: one stored batch's trace fragments as arrays, and every policy over them at once.

Most traces arrive whole in one stored batch, root included. Such a trace needs no per-trace Python object while it
waits out its grace period: it stays a row of its batch's `FragmentColumns`, and when the grace has passed the
composite policy is evaluated over all waiting rows of the batch with numpy (`decide_rows`). A trace that does not fit
that pattern (no root yet, already pending, already decided, or a later fragment arrives while it waits) becomes a
`TraceFragment` / `TraceSummary` and takes the per-trace path, with the same rules. The two paths give the same
decisions, reasons, probabilities and policy counts (tests/agent/test_sampler_batch.py drives both with one stream).

Per trace this costs a fraction of the per-trace path's CPU (`python benchmarks/sampler.py`; docs/results.md); the
sampling thread had been a large share of the agent's CPU under `benchmarks/ingest.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ragmon.sampling.composite import CompositePolicy, uniform
from ragmon.sampling.decision import Decision
from ragmon.sampling.policies.attribute_rule import AttributeRulePolicy
from ragmon.sampling.policies.error import ErrorPolicy
from ragmon.sampling.policies.probabilistic import ProbabilisticPolicy, keeps
from ragmon.sampling.policies.retrieval_health import RetrievalHealthPolicy
from ragmon.sampling.policies.slow import SlowPolicy
from ragmon.sampling.trace import TraceFragment

Floats = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
Rows = npt.NDArray[np.intp]
P95Lookup = Callable[[str, str], "float | None"]

_KEY_SEPARATOR = "\x1f"  # between tenant and feature in a joined key: a control character neither contains

_BATCH_POLICIES = (ErrorPolicy, SlowPolicy, RetrievalHealthPolicy, AttributeRulePolicy, ProbabilisticPolicy)


def supports(policy: CompositePolicy) -> bool:
    """Whether every policy of the composite has a columnar form (custom policies take the per-trace path)."""
    return all(type(p) in _BATCH_POLICIES for p, _ in (*policy.drop_rules, *policy.keep_policies))


def _floats(column: pa.ChunkedArray | pa.Array) -> Floats:
    """A numeric column as float64, NULL as NaN (every comparison with NaN is false, like the per-trace tests)."""
    return np.asarray(pc.fill_null(pc.cast(column, pa.float64()), math.nan), dtype=np.float64)


def _ints(column: pa.ChunkedArray | pa.Array) -> npt.NDArray[np.int64]:
    return np.asarray(pc.fill_null(pc.cast(column, pa.int64()), 0), dtype=np.int64)


class FragmentColumns:
    """One stored batch's trace fragments (`ragmon.sinks.sampler_sql.trace_fragments_sql`), as arrays."""

    def __init__(self, table: pa.Table, first_ingest_seq: int) -> None:
        self.size = table.num_rows
        self.first_ingest_seq = first_ingest_seq
        self._tenant = table.column("tenant")
        self.tenant: list[str] = self._tenant.to_pylist()
        self.trace_id: list[str] = table.column("trace_id").to_pylist()
        self._feature = pc.fill_null(table.column("feature"), "")
        self._user = pc.fill_null(table.column("user"), "")
        # '' = production; a table without the column (fragments written by hand) is all production
        names = table.column_names
        self.eval_run: list[str] = (
            pc.fill_null(table.column("eval_run"), "").to_pylist() if "eval_run" in names else [""] * self.size
        )
        self.root_span_id: list[str] = (
            pc.fill_null(table.column("root_span_id"), "").to_pylist() if "root_span_id" in names else [""] * self.size
        )
        self.span_count = _ints(table.column("span_count"))
        self.error_count = _ints(table.column("error_count"))
        self.root_seen = _ints(table.column("root_seen")) != 0
        self.root_duration_ms = _floats(table.column("root_duration_ms"))
        self.min_top1_score = _floats(table.column("min_top1_score"))
        self.min_similarity_gap = _floats(table.column("min_similarity_gap"))
        self.max_norm_deviation = _floats(table.column("max_norm_deviation"))
        self.content_bytes = _ints(table.column("content_bytes"))
        self.stage_max_ms = _stage_columns(table.column("stage_max_ms"), self.size)
        self._features: tuple[list[str], npt.NDArray[np.int64]] | None = None
        self._tenant_features: tuple[list[tuple[str, str]], npt.NDArray[np.int64]] | None = None
        self._text: dict[str, list[str]] = {}

    def text(self, field: str) -> list[str]:
        """feature, user or tenant of every row (converted on first use: most policies never read them)."""
        if field == "tenant":
            return self.tenant
        if field not in self._text:
            self._text[field] = (self._feature if field == "feature" else self._user).to_pylist()
        return self._text[field]

    def features(self) -> tuple[list[str], npt.NDArray[np.int64]]:
        """The distinct features and each row's index into them."""
        if self._features is None:
            encoded = pc.dictionary_encode(self._feature).combine_chunks()
            self._features = encoded.dictionary.to_pylist(), np.asarray(encoded.indices, dtype=np.int64)
        return self._features

    def tenant_features(self) -> tuple[list[tuple[str, str]], npt.NDArray[np.int64]]:
        """The distinct (tenant, feature) pairs and each row's index into them."""
        if self._tenant_features is None:
            joined = pc.binary_join_element_wise(self._tenant, self._feature, _KEY_SEPARATOR)
            encoded = pc.dictionary_encode(joined).combine_chunks()
            pairs = [tuple(key.split(_KEY_SEPARATOR, 1)) for key in encoded.dictionary.to_pylist()]
            self._tenant_features = (
                [(tenant, feature) for tenant, feature in pairs],
                np.asarray(encoded.indices, dtype=np.int64),
            )
        return self._tenant_features

    def fragment(self, row: int) -> TraceFragment:
        """Row `row` as a per-trace fragment (for traces that leave the columnar path)."""
        stages = {stage: float(v[row]) for stage, v in self.stage_max_ms.items() if not math.isnan(v[row])}
        return TraceFragment(
            self.tenant[row],
            self.trace_id[row],
            self.text("feature")[row],
            self.text("user")[row],
            int(self.span_count[row]),
            int(self.error_count[row]),
            bool(self.root_seen[row]),
            _optional(self.root_duration_ms[row]),
            stages,
            _optional(self.min_top1_score[row]),
            _optional(self.min_similarity_gap[row]),
            _optional(self.max_norm_deviation[row]),
            int(self.content_bytes[row]),
            self.first_ingest_seq,
            self.eval_run[row],
            self.root_span_id[row],
        )


def _optional(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _stage_columns(column: pa.ChunkedArray, size: int) -> dict[str, Floats]:
    """Map(stage → max ms) per row as one float array per stage present (NaN where the row lacks it)."""
    maps = column.combine_chunks()
    if size == 0 or len(maps.keys) == 0:
        return {}
    offsets = np.asarray(maps.offsets, dtype=np.int64)
    owner = np.repeat(np.arange(size), np.diff(offsets))  # the row of every entry
    keys = pc.dictionary_encode(maps.keys.slice(offsets[0], offsets[-1] - offsets[0]))
    items = _floats(maps.items.slice(offsets[0], offsets[-1] - offsets[0]))
    codes = np.asarray(keys.indices, dtype=np.int64)
    out = {}
    for code, stage in enumerate(keys.dictionary.to_pylist()):
        values = np.full(size, math.nan)
        picked = codes == code
        np.fmax.at(values, owner[picked], items[picked])  # a map has each key once; fmax also ignores NaN
        out[stage] = values
    return out


@dataclass(slots=True)
class BatchOutcome:
    """The composite's verdict on each of `rows`: `decision[i]`, `reasons[i]` and `probability[i]` belong to
    `rows[i]`, as `CompositePolicy.decide` would give them."""

    rows: Rows
    decision: list[Decision]
    reasons: list[tuple[str, ...]]
    probability: list[float]


def decide_rows(
    policy: CompositePolicy,
    columns: FragmentColumns,
    rows: Rows,
    now_s: float,
    p95_lookup: P95Lookup | None,
    request_p95: Floats | None = None,
) -> BatchOutcome:
    """The composite policy (`CompositePolicy.decide`) over `rows` of `columns`, counting verdicts as it does.
    `request_p95[i]`: the request p95 of row `rows[i]`'s feature (NaN: unknown; None: no policy reads it)."""
    p95s = _P95s(p95_lookup, request_p95)
    counts = policy.counts
    n = len(rows)
    undecided = np.ones(n, dtype=bool)
    decision: list[Decision] = [Decision.SKIP] * n
    reasons: list[tuple[str, ...]] = [()] * n
    probability = [0.0] * n
    for rule, keys in policy.drop_rules:  # in order; a dropped trace is not shown to later rules
        fired = _fires(rule, columns, rows, p95s) & undecided
        evaluated = int(undecided.sum())
        dropped = int(fired.sum())
        counts[keys[Decision.DROP]] += dropped
        counts[keys[Decision.SKIP]] += evaluated - dropped
        for i in np.flatnonzero(fired):
            decision[i], reasons[i] = Decision.DROP, (rule.name,)
        undecided &= ~fired
    counts[("composite", "drop")] += n - int(undecided.sum())
    fired_bits = np.zeros(n, dtype=np.int64)
    evaluated = int(undecided.sum())
    for bit, (keep_policy, keys) in enumerate(policy.keep_policies):
        fired = _fires(keep_policy, columns, rows, p95s) & undecided
        kept = int(fired.sum())
        counts[keys[Decision.KEEP]] += kept
        counts[keys[Decision.SKIP]] += evaluated - kept
        fired_bits |= fired.astype(np.int64) << bit
    by_bits = _reasons_by_bits(policy, fired_bits)
    budget = policy.budget
    kept_rows = 0
    skipped = evaluated - int(np.count_nonzero(fired_bits))
    for i in np.flatnonzero(fired_bits):  # row order: the budget spends in the order traces are decided
        names, p = by_bits[int(fired_bits[i])]
        if budget is not None:
            size = int(columns.content_bytes[rows[i]])
            if any(name in policy.exempt for name in names):
                budget.try_spend(size, now_s, force=True)
            else:
                admission = budget.admission_probability(size, now_s)
                if not (uniform(columns.trace_id[rows[i]]) < admission and budget.try_spend(size, now_s)):
                    counts[("budget", "skip")] += 1
                    skipped += 1
                    reasons[i] = ("budget",)
                    continue
                p *= admission
        decision[i], reasons[i], probability[i] = Decision.KEEP, names, p
        kept_rows += 1
    counts[("composite", "skip")] += skipped
    counts[("composite", "keep")] += kept_rows
    return BatchOutcome(rows, decision, reasons, probability)


def _reasons_by_bits(
    policy: CompositePolicy, fired_bits: npt.NDArray[np.int64]
) -> dict[int, tuple[tuple[str, ...], float]]:
    """(reasons, probability before the budget) of each combination of fired keep policies that occurs."""
    out = {}
    for bits in np.unique(fired_bits):
        fired = [p for bit, (p, _) in enumerate(policy.keep_policies) if int(bits) >> bit & 1]
        if fired:
            probability = max(p.rate if isinstance(p, ProbabilisticPolicy) else 1.0 for p in fired)
            out[int(bits)] = (tuple(p.name for p in fired), probability)
    return out


@dataclass(slots=True, frozen=True)
class _P95s:
    stage: P95Lookup | None
    request: Floats | None


def _fires(policy: object, columns: FragmentColumns, rows: Rows, p95s: _P95s) -> Mask:
    """Whether `policy` keeps (or, for a drop rule, drops) each row: its per-trace `evaluate`, over arrays."""
    if isinstance(policy, ErrorPolicy):
        errors: Mask = columns.error_count[rows] != 0
        return errors
    if isinstance(policy, SlowPolicy):
        return _slow(policy, columns, rows, p95s)
    if isinstance(policy, RetrievalHealthPolicy):
        fired = np.zeros(len(rows), dtype=bool)
        if policy.min_top1_score is not None:
            fired |= columns.min_top1_score[rows] < policy.min_top1_score
        if policy.min_similarity_gap is not None:
            fired |= columns.min_similarity_gap[rows] < policy.min_similarity_gap
        if policy.max_norm_deviation is not None:
            fired |= columns.max_norm_deviation[rows] > policy.max_norm_deviation
        return fired
    if isinstance(policy, AttributeRulePolicy):
        values, texts = policy.values, columns.text(policy.field)
        return np.fromiter((texts[r] in values for r in rows), dtype=bool, count=len(rows))
    if isinstance(policy, ProbabilisticPolicy):
        return _baseline(policy.rate, columns.trace_id, rows)
    raise TypeError(f"no columnar form for sampling policy {type(policy).__name__}")


def _slow(policy: SlowPolicy, columns: FragmentColumns, rows: Rows, p95s: _P95s) -> Mask:
    """`SlowPolicy.evaluate` over arrays: NaN (no root, no p95) fails every comparison, as None does there."""
    fired = np.zeros(len(rows), dtype=bool)
    duration = columns.root_duration_ms[rows]
    if policy.trace_threshold_ms is not None:
        fired |= duration > policy.trace_threshold_ms
    if policy.relative_to_p95 is not None and p95s.request is not None:
        fired |= _exceeds(duration, p95s.request, policy.relative_to_p95, policy.min_excess_ms)
    for stage, threshold_ms in policy.stage_threshold_ms.items():
        if stage in columns.stage_max_ms:
            fired |= np.nan_to_num(columns.stage_max_ms[stage][rows], nan=0.0) > threshold_ms
        elif threshold_ms < 0.0:  # the per-trace test reads an absent stage as 0 ms
            fired[:] = True
    if policy.stage_relative_to_p95 is not None and p95s.stage is not None:
        features, index = columns.features()
        for stage, maxima in columns.stage_max_ms.items():
            p95 = np.array([_nan_if_none(p95s.stage(feature, stage)) for feature in features], dtype=np.float64)
            fired |= _exceeds(maxima[rows], p95[index[rows]], policy.stage_relative_to_p95, policy.min_excess_ms)
    return fired


def _exceeds(duration: Floats, p95: Floats, factor: float, min_excess_ms: float) -> Mask:
    """`slow.exceeds_p95` over arrays."""
    with np.errstate(invalid="ignore"):
        above: Mask = (duration > factor * p95) & (duration - p95 >= min_excess_ms)
    return above


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value


def _baseline(rate: float, trace_ids: Sequence[str], rows: Rows) -> Mask:
    """`probabilistic.keeps` over many trace ids: the low 56 bits (14 hex digits) below rate × 2^56."""
    if rate <= 0.0:
        return np.zeros(len(rows), dtype=bool)
    picked = [trace_ids[r] for r in rows]
    if any(len(t) != 32 for t in picked):  # not the stored form: the per-trace test, which also rejects non-hex
        return np.fromiter((keeps(t, rate) for t in picked), dtype=bool, count=len(picked))
    digits = np.frombuffer("".join(picked).encode("ascii", "replace"), dtype=np.uint8).reshape(-1, 32)[:, 18:]
    lower = digits | 0x20  # 'A'-'F' → 'a'-'f'; digits unchanged
    value = np.where(digits <= ord("9"), digits.astype(np.int64) - ord("0"), lower.astype(np.int64) - ord("a") + 10)
    valid = ((digits >= ord("0")) & (digits <= ord("9"))) | ((lower >= ord("a")) & (lower <= ord("f")))
    randomness = np.zeros(len(picked), dtype=np.uint64)
    for k in range(14):
        randomness = (randomness << np.uint64(4)) | value[:, k].astype(np.uint64)
    # r < rate·2^56 for an integer r is r < ceil(rate·2^56): an exact integer comparison (no float rounding)
    limit = np.uint64(min(math.ceil(rate * (1 << 56)), 1 << 56))
    return valid.all(axis=1) & (randomness < limit)
