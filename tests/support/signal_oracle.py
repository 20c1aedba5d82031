"""`SignalOracle`: what each drift signal means, restated in numpy over plain Python records, so the tests can
check that the store's SQL (`ragmon.drift.store_source`) computes it. Test code: ragmon reads signals from
the store only.

Records are per span (`Observation`; stage "" is the request's root span), per judged trace (`JudgedScore`) and per
end user's verdict on a stored trace (`FeedbackVerdict`: each voter's latest, its trace's feature).

| signal | series value per window | count | sample values |
|---|---|---|---|
| latency_p95_ms | 0.95-quantile of span duration_ms | spans | span duration_ms |
| error_rate | errors / spans | spans | — |
| cost_per_request_usd | sum(cost_usd) / cost_known | cost_known | — |
| tokens_per_request | (input_tokens + output_tokens) / spans | spans | — |
| faithfulness, relevance | Σ(score/p) / Σ(1/p) over judged traces, p = inclusion probability | Kish n: (Σw)²/Σw² | — |
| top1_score | mean rank-1 retrieval score | spans with one | the scores |
| similarity_gap | mean gap between rank-1 and rank-2 scores | spans with one | the gaps |
| norm_deviation | mean |‖v‖ - 1| of the span's vectors | spans with one | the deviations |
| sla_share | share of requests with duration_ms ≤ sla_ms | requests | — |
| negative_feedback | share of users' latest thumbs and ratings that are negative, by arrival | verdicts | — |

A signal the oracle does not know is a KeyError: a signal added to `SIGNALS` fails tests/drift/test_store_source.py
until its meaning is written here too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ragmon.drift.detectors.base import FloatArray
from ragmon.drift.signals import SIGNALS, Sample, SampleQuery, ScopeKey, SeriesQuery, WindowPoint

_EXAMPLES = 3  # example trace ids per window / sample
_JUDGED = ("faithfulness", "relevance")
_KNOWN = frozenset(
    {
        "latency_p95_ms",
        "error_rate",
        "cost_per_request_usd",
        "tokens_per_request",
        *_JUDGED,
        "top1_score",
        "similarity_gap",
        "norm_deviation",
        "sla_share",
        "negative_feedback",
    }
)


def _known(signal: str) -> None:
    if signal not in _KNOWN:
        raise KeyError(f"the oracle does not know the signal {signal!r}: write down what it means here")


@dataclass(frozen=True, slots=True)
class Observation:
    """One span's numbers."""

    time_s: float
    trace_id: str
    tenant: str = "default"
    feature: str = ""
    stage: str = ""
    duration_ms: float = 0.0
    error: bool = False
    cost_usd: float | None = None
    tokens: int = 0
    top1_score: float | None = None
    similarity_gap: float | None = None
    norm_deviation: float | None = None


@dataclass(frozen=True, slots=True)
class JudgedScore:
    """One judge verdict on a kept trace; `value` None when the judge failed (never counted as a score)."""

    time_s: float
    trace_id: str
    metric: str
    value: float | None
    inclusion_probability: float = 1.0
    tenant: str = "default"
    feature: str = ""


@dataclass(frozen=True, slots=True)
class FeedbackVerdict:
    """One end user's latest thumbs or rating on a stored trace, as it arrived (`time_s`)."""

    time_s: float
    trace_id: str
    negative: bool
    tenant: str = "default"
    feature: str = ""


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


class _Columns:
    def __init__(self, rows: Sequence[Observation], scores: Sequence[JudgedScore]) -> None:
        self.time = np.array([r.time_s for r in rows], dtype=np.float64)
        self.trace = np.array([r.trace_id for r in rows], dtype=object)
        self.scope = [ScopeKey(r.tenant, r.feature, r.stage) for r in rows]
        self.scope_ids, self.scope_index = self._index(self.scope)
        self.fields: dict[str, FloatArray] = {
            "duration_ms": np.array([r.duration_ms for r in rows], dtype=np.float64),
            "error": np.array([1.0 if r.error else 0.0 for r in rows], dtype=np.float64),
            "cost_usd": np.array([_nan(r.cost_usd) for r in rows], dtype=np.float64),
            "tokens": np.array([r.tokens for r in rows], dtype=np.float64),
            "top1_score": np.array([_nan(r.top1_score) for r in rows], dtype=np.float64),
            "similarity_gap": np.array([_nan(r.similarity_gap) for r in rows], dtype=np.float64),
            "norm_deviation": np.array([_nan(r.norm_deviation) for r in rows], dtype=np.float64),
        }
        self.score_time = np.array([s.time_s for s in scores], dtype=np.float64)
        self.score_trace = np.array([s.trace_id for s in scores], dtype=object)
        self.score_metric = np.array([s.metric for s in scores], dtype=object)
        self.score_value = np.array([_nan(s.value) for s in scores], dtype=np.float64)
        self.score_weight = np.array([1.0 / s.inclusion_probability for s in scores], dtype=np.float64)
        self.score_scope_ids, self.score_scope_index = self._index([ScopeKey(s.tenant, s.feature, "") for s in scores])

    @staticmethod
    def _index(keys: Sequence[ScopeKey]) -> tuple[npt.NDArray[np.int64], dict[ScopeKey, int]]:
        index: dict[ScopeKey, int] = {}
        ids = np.array([index.setdefault(key, len(index)) for key in keys], dtype=np.int64)
        return ids, index


class SignalOracle:
    """Each signal of the records, computed the plain way (see the table in the module docstring)."""

    def __init__(
        self,
        observations: Iterable[Observation] = (),
        scores: Iterable[JudgedScore] = (),
        feedback: Iterable[FeedbackVerdict] = (),
    ) -> None:
        rows, judged = list(observations), list(scores)
        self._feedback = list(feedback)
        for score in judged:
            if not 0 < score.inclusion_probability <= 1:
                raise ValueError(f"inclusion probability must be in (0, 1], got {score.inclusion_probability}")
        self._columns = _Columns(rows, judged)

    def _cols(self) -> _Columns:
        return self._columns

    def scopes(self, signal: str, start_s: float, end_s: float) -> Sequence[ScopeKey]:
        _known(signal)
        if signal == "negative_feedback":
            return sorted({ScopeKey(v.tenant, v.feature, "") for v in self._feedback if start_s <= v.time_s < end_s})
        cols = self._cols()
        if signal in _JUDGED:
            mask = (cols.score_time >= start_s) & (cols.score_time < end_s) & (cols.score_metric == signal)
            mask &= np.isfinite(cols.score_value)
            return sorted(_keys(cols.score_scope_index, cols.score_scope_ids[mask]))
        mask = (cols.time >= start_s) & (cols.time < end_s) & self._defined(cols, signal)
        keys = _keys(cols.scope_index, cols.scope_ids[mask])
        if SIGNALS[signal].trace_level:
            keys = {key for key in keys if key.stage == ""}
        return sorted(keys)

    def series(self, query: SeriesQuery) -> Sequence[WindowPoint]:
        _known(query.signal)
        if query.signal == "negative_feedback":
            return self._feedback_series(query)
        cols = self._cols()
        if query.signal in _JUDGED:
            return self._judged_series(cols, query)
        scope_id = cols.scope_index.get(query.scope)
        if scope_id is None:
            return []
        mask = (cols.scope_ids == scope_id) & (cols.time >= query.start_s) & (cols.time < query.end_s)
        mask &= self._defined(cols, query.signal)
        window = np.floor((cols.time[mask] - query.start_s) / query.step_s).astype(np.int64)
        traces = cols.trace[mask]
        picked = {name: values[mask] for name, values in cols.fields.items()}
        points = []
        for w in np.unique(window):
            in_window = window == w
            points.append(
                self._point(
                    query,
                    query.start_s + float(w) * query.step_s,
                    {k: v[in_window] for k, v in picked.items()},
                    traces[in_window],
                )
            )
        return points

    def sample(self, query: SampleQuery) -> Sample:
        _known(query.signal)
        cols = self._cols()
        scope_id = cols.scope_index.get(query.scope)
        field = _sample_field(query.signal)
        if scope_id is None or field is None:
            return Sample.empty()
        values = cols.fields[field]
        mask = (cols.scope_ids == scope_id) & (cols.time >= query.start_s) & (cols.time < query.end_s)
        mask &= np.isfinite(values)
        picked, traces = values[mask], cols.trace[mask]
        if picked.size > query.max_values:
            # Deterministic subsample: the same query gives the same evidence.
            keep = np.random.default_rng(0).choice(picked.size, size=query.max_values, replace=False)
            picked, traces = picked[keep], traces[keep]
        worst_first = np.argsort(-picked if SIGNALS[query.signal].bad_direction == "up" else picked, kind="stable")
        return Sample(picked, tuple(str(t) for t in traces[worst_first[:_EXAMPLES]]))

    # -- helpers -------------------------------------------------------------------------------------------------
    @staticmethod
    def _defined(cols: _Columns, signal: str) -> npt.NDArray[np.bool_]:
        field = _sample_field(signal)
        if field is None or signal == "latency_p95_ms":
            return np.ones(cols.time.size, dtype=bool)  # every span counts (an unknown cost is still a request)
        return np.isfinite(cols.fields[field])

    @staticmethod
    def _point(
        query: SeriesQuery, start_s: float, f: dict[str, FloatArray], traces: npt.NDArray[np.object_]
    ) -> WindowPoint:
        n = f["duration_ms"].size
        extra: dict[str, float] = {}
        order: FloatArray  # higher = worse, for picking example traces
        if query.signal == "latency_p95_ms":
            value, count, order = float(np.quantile(f["duration_ms"], 0.95)), float(n), f["duration_ms"]
        elif query.signal == "error_rate":
            value, count, order = float(f["error"].mean()), float(n), f["error"]
        elif query.signal == "cost_per_request_usd":
            known = np.isfinite(f["cost_usd"])
            count = float(known.sum())
            value = float(f["cost_usd"][known].sum() / count) if count else math.nan
            order = np.where(known, f["cost_usd"], -np.inf)
        elif query.signal == "tokens_per_request":
            value, count, order = float(f["tokens"].mean()), float(n), f["tokens"]
        elif query.signal == "sla_share":
            if query.sla_ms is None:
                raise ValueError("sla_share needs sla_ms")
            within = float(np.sum(f["duration_ms"] <= query.sla_ms))
            value, count, order = within / n, float(n), f["duration_ms"]
            extra = {"input_qps": n / query.step_s, "effective_qps": within / query.step_s, "sla_ms": query.sla_ms}
        else:
            column = f[query.signal]
            value, count = float(column.mean()), float(n)
            order = column if SIGNALS[query.signal].bad_direction == "up" else -column
        worst = np.argsort(-order, kind="stable")[:_EXAMPLES]
        if query.signal == "error_rate":
            worst = worst[f["error"][worst] > 0]
        return WindowPoint(start_s, value, count, extra, tuple(str(t) for t in traces[worst]))

    def _feedback_series(self, query: SeriesQuery) -> Sequence[WindowPoint]:
        windows: dict[int, list[FeedbackVerdict]] = {}
        for v in self._feedback:
            if ScopeKey(v.tenant, v.feature, "") == query.scope and query.start_s <= v.time_s < query.end_s:
                windows.setdefault(math.floor((v.time_s - query.start_s) / query.step_s), []).append(v)
        points = []
        for w, verdicts in sorted(windows.items()):
            negative = [v for v in verdicts if v.negative]
            examples = sorted({v.trace_id for v in negative})[:_EXAMPLES]  # any of them: each is as bad
            points.append(
                WindowPoint(
                    query.start_s + w * query.step_s,
                    len(negative) / len(verdicts),
                    float(len(verdicts)),
                    {},
                    tuple(examples),
                )
            )
        return points

    @staticmethod
    def _judged_series(cols: _Columns, query: SeriesQuery) -> Sequence[WindowPoint]:
        scope_id = cols.score_scope_index.get(query.scope)
        if scope_id is None:
            return []
        mask = (cols.score_scope_ids == scope_id) & (cols.score_metric == query.signal)
        mask &= (cols.score_time >= query.start_s) & (cols.score_time < query.end_s) & np.isfinite(cols.score_value)
        window = np.floor((cols.score_time[mask] - query.start_s) / query.step_s).astype(np.int64)
        values, weights, traces = cols.score_value[mask], cols.score_weight[mask], cols.score_trace[mask]
        points = []
        for w in np.unique(window):
            sel = window == w
            v, wt = values[sel], weights[sel]
            # Each kept trace stands for 1/p traces; Kish's effective n says how much evidence that really is.
            mean = float(np.sum(v * wt) / np.sum(wt))
            effective_n = float(np.sum(wt) ** 2 / np.sum(wt * wt))
            worst = np.argsort(v, kind="stable")[:_EXAMPLES]
            points.append(
                WindowPoint(
                    query.start_s + float(w) * query.step_s,
                    mean,
                    effective_n,
                    {"judged_traces": float(sel.sum()), "weight_sum": float(np.sum(wt))},
                    tuple(str(t) for t in traces[sel][worst]),
                )
            )
        return points


def _sample_field(signal: str) -> str | None:
    if signal == "latency_p95_ms":
        return "duration_ms"
    if signal in ("top1_score", "similarity_gap", "norm_deviation"):
        return signal
    return None


def _keys(index: dict[ScopeKey, int], ids: npt.NDArray[np.int64]) -> set[ScopeKey]:
    present = set(np.unique(ids).tolist())
    return {key for key, i in index.items() if i in present}
