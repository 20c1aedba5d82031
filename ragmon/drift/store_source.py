"""`StoreSignalSource`: the `SignalSource` over the store — the one place signals are computed, each from the kind
of read its `signals.SIGNALS` entry names (`reads.py` says what each kind computes), on the tables the agent fills.

Where each kind comes from:
- `RollupQuantile`, `RollupRatio` (latency p95, error rate, cost and tokens per request): the per-minute rollup
  `spans_1m` (every span, merged DDSketch states for a quantile: within 0.5% of an order statistic next to the
  exact one, see `ragmon.sinks.schema`). Windows are whole minutes, so a series query must be minute-aligned (the
  evaluator's always are).
- `SpanMean`, `ShareWithinSla` (rank-1 score, similarity gap, norm deviation, the SLA share), every per-request
  sample and the example trace ids: raw `spans` (one scope is one range of its sort key, tenant-feature-stage-time),
  duplicates collapsed with `LIMIT 1 BY` as the sampler does.
- `JudgedMean` (faithfulness, relevance): online judge scores (`scores`, run_name '') weighted by 1 / the trace's
  inclusion probability, which the sampler recorded on the kept trace's payload (`payloads.inclusion_probability`).
  A score whose payload has expired (payloads live 14 days, scores 180) counts with probability 1. A trace judged
  more than once (a new judge version) counts once, with its latest verdict. Scores are windowed by `scored_at`,
  when the verdict became known, not by the trace's start: the evaluator judges each window once, a couple of
  minutes after it closes, so windowing by trace time would silently drop every verdict the judge worker delivered
  later.
- `NegativeFeedbackShare` (negative_feedback): end users' thumbs and ratings (`feedback`, each voter's latest),
  joined to their traces when read (`ragmon.sinks.feedback_sql`), windowed by arrival.

Production traffic only, unless built with another `ragmon.sinks.traffic.Traffic`: an eval run's spans, minutes and
scores (by the score's own eval run, schema v9) are neither a baseline nor an alert — a dataset replayed against the
app, or a candidate model tried on it, must not fire a drift alert, nor move the baseline production is compared with.

Stage "" (the request as a whole) is the root span, stored with stage 'request'. Float32 columns (scores, gaps,
norms) come back as the float32 values stored.

The SQL is `ragmon.sinks.drift_sql`'s (every value a bound parameter, every column checked against the schema);
this module picks the query for a signal's read, turns the drift types into its values and its rows into
`WindowPoint`s and `Sample`s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypedDict

import numpy as np

from ragmon.drift.reads import (
    JudgedMean,
    NegativeFeedbackShare,
    RollupQuantile,
    RollupRatio,
    ShareWithinSla,
    SignalRead,
    SpanMean,
)
from ragmon.drift.signals import SIGNALS, Sample, SampleQuery, ScopeKey, SeriesQuery, WindowPoint
from ragmon.sinks.drift_sql import DriftSql, Query, Scope
from ragmon.sinks.schema import Topology
from ragmon.sinks.traffic import PRODUCTION, Traffic

_EXAMPLES = 3  # example trace ids per window / sample
_ROOT_STAGE = "request"
_SLOWEST: tuple[str, ...] = ("duration_ms",)  # how the reads over durations rank their examples


class _SpanWindow(TypedDict):
    """A series' range and step over raw spans, in nanoseconds: the keyword arguments of those reads."""

    start_ns: int
    end_ns: int
    step_ns: int


class StoreReader(Protocol):
    """What the source needs from `sinks.Store`: trusted read-only SQL, and where the tables are."""

    topology: Topology

    def read(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]: ...


def _stored_scope(scope: ScopeKey) -> Scope:
    return Scope(scope.tenant, scope.feature, _ROOT_STAGE if scope.stage == "" else scope.stage)


def _signal_stage(stage: str) -> str:
    return "" if stage == _ROOT_STAGE else stage


def _higher_is_worse(signal: str) -> bool:
    return SIGNALS[signal].bad_direction == "up"


def _whole_minutes(seconds: float, what: str) -> int:
    if seconds % 60:
        raise ValueError(f"{what} must be whole minutes for the per-minute rollup, got {seconds} s")
    return int(seconds)


def _point(row: Mapping[str, Any], query: SeriesQuery) -> WindowPoint:
    """A series row as its point: the figures besides window, value and count are its extras."""
    extra = {name: float(figure) for name, figure in row.items() if name not in ("window", "value", "count")}
    return WindowPoint(
        query.start_s + int(row["window"]) * query.step_s, float(row["value"]), float(row["count"]), extra
    )


def _ns(seconds: float) -> int:
    # Round to the microsecond first: a float second count like 1767571260.0000002 is a float artefact, not a time.
    return round(seconds * 1e6) * 1000


class StoreSignalSource:
    """A `SignalSource` reading the store's tables (see the module docstring). Thread-safe as the store is."""

    def __init__(self, store: StoreReader, traffic: Traffic = PRODUCTION) -> None:
        self.store = store
        self.traffic = traffic
        self._sql = DriftSql(store.topology, traffic)

    # -- SignalSource --------------------------------------------------------------------------------------------
    def scopes(self, signal: str, start_s: float, end_s: float) -> Sequence[ScopeKey]:
        spec = SIGNALS[signal]  # KeyError for an unknown signal: a programming error
        read = spec.read
        if isinstance(read, JudgedMean):
            query = self._sql.judged_scopes(read.metric, start_ns=_ns(start_s), end_ns=_ns(end_s))
        elif isinstance(read, NegativeFeedbackShare):
            query = self._sql.negative_feedback_scopes(start_ns=_ns(start_s), end_ns=_ns(end_s))
        elif isinstance(read, SpanMean):
            query = self._sql.span_scopes(read.column, start_ns=_ns(start_s), end_ns=_ns(end_s))
        else:  # every span counts: the rollup's scopes
            query = self._sql.rollup_scopes(start_s=math.floor(start_s / 60) * 60, end_s=math.ceil(end_s / 60) * 60)
        keys = {
            ScopeKey(str(r["tenant"]), str(r["feature"]), _signal_stage(str(r["stage"]))) for r in self._read(query)
        }
        if spec.trace_level:
            keys = {key for key in keys if key.stage == ""}
        return sorted(keys)

    def series(self, query: SeriesQuery) -> Sequence[WindowPoint]:
        read = SIGNALS[query.signal].read
        if isinstance(read, JudgedMean):
            return self._judged_series(read, query)
        if isinstance(read, NegativeFeedbackShare):
            return self._negative_feedback_series(query)
        points = [_point(row, query) for row in self._read(self._series_sql(read, query))]
        if not query.examples or not points:
            return points
        examples = self._window_examples(read, query)
        return [
            WindowPoint(p.start_s, p.value, p.count, p.extra, examples.get(p.start_s, ())) if examples else p
            for p in points
        ]

    def sample(self, query: SampleQuery) -> Sample:
        column = SIGNALS[query.signal].read.sample_column
        if column is None:
            return Sample.empty()
        rows = self._read(
            self._sql.sample(
                column,
                _stored_scope(query.scope),
                start_ns=_ns(query.start_s),
                end_ns=_ns(query.end_s),
                max_values=int(query.max_values),
            )
        )
        if not rows:
            return Sample.empty()
        values = np.array([float(r["value"]) for r in rows], dtype=np.float64)
        traces = [str(r["trace_id"]) for r in rows]
        worst_first = np.argsort(-values if _higher_is_worse(query.signal) else values, kind="stable")
        return Sample(values, tuple(traces[i] for i in worst_first[:_EXAMPLES]))

    # -- series of the rollup and of raw spans -------------------------------------------------------------------
    def _series_sql(self, read: SignalRead, query: SeriesQuery) -> Query:
        """The query whose rows are a series' points: window, value, count and any further figures."""
        scope = _stored_scope(query.scope)
        if isinstance(read, RollupQuantile | RollupRatio):
            minutes = {
                "start_s": _whole_minutes(query.start_s, "a series start"),
                "end_s": _whole_minutes(query.end_s, "a series end"),
                "step_s": _whole_minutes(query.step_s, "a series step"),
            }
            if isinstance(read, RollupQuantile):
                return self._sql.rollup_quantile_series(read.level, scope, **minutes)
            return self._sql.rollup_ratio_series(read.numerator, read.per, scope, **minutes)
        if isinstance(read, SpanMean):
            return self._sql.span_mean_series(read.column, scope, **self._span_window(query))
        if isinstance(read, ShareWithinSla):
            if query.sla_ms is None:
                raise ValueError(f"{query.signal} needs sla_ms")
            return self._sql.sla_series(
                scope, **self._span_window(query), step_s=float(query.step_s), sla_ms=float(query.sla_ms)
            )
        raise TypeError(f"no series SQL for {read!r}")

    def _window_examples(self, read: SignalRead, query: SeriesQuery) -> dict[float, tuple[str, ...]]:
        """The worst few traces per window (slowest, failed, most expensive, lowest-scoring), from raw spans."""
        scope, window, n = _stored_scope(query.scope), self._span_window(query), _EXAMPLES
        if isinstance(read, RollupRatio) and read.examples == "failed":
            sql = self._sql.failed_examples(scope, **window, examples=n)
        elif isinstance(read, RollupRatio):
            sql = self._sql.worst_examples(read.examples, scope, **window, examples=n)
        elif isinstance(read, SpanMean):
            lowest = not _higher_is_worse(query.signal)
            sql = self._sql.worst_examples(
                (read.column,), scope, **window, examples=n, lowest=lowest, finite=read.column
            )
        else:  # the reads over durations: the slowest
            sql = self._sql.worst_examples(_SLOWEST, scope, **window, examples=n)
        rows = self._read(sql)
        return {query.start_s + int(r["window"]) * query.step_s: tuple(str(t) for t in r["trace_ids"]) for r in rows}

    # -- judged quality --------------------------------------------------------------------------------------------
    def _judged_series(self, read: JudgedMean, query: SeriesQuery) -> list[WindowPoint]:
        rows = self._read(
            self._sql.judged_scores(
                read.metric,
                tenant=query.scope.tenant,
                feature=query.scope.feature,
                start_ns=_ns(query.start_s),
                end_ns=_ns(query.end_s),
            )
        )
        if not rows:
            return []
        times = np.array([int(r["scored_ms"]) / 1000.0 for r in rows], dtype=np.float64)
        values = np.array([float(r["value"]) for r in rows], dtype=np.float64)
        probability = np.array(
            [1.0 if r["probability"] is None else float(r["probability"]) for r in rows], dtype=np.float64
        )
        valid = (probability > 0) & (probability <= 1)  # a corrupt probability would make an infinite weight
        traces = np.array([str(r["trace_id"]) for r in rows], dtype=object)[valid]
        times, values, weights = times[valid], values[valid], 1.0 / probability[valid]
        window = np.floor((times - query.start_s) / query.step_s).astype(np.int64)
        points = []
        for w in np.unique(window):
            sel = window == w
            v, wt = values[sel], weights[sel]
            worst = np.argsort(v, kind="stable")[:_EXAMPLES]
            points.append(
                WindowPoint(
                    query.start_s + float(w) * query.step_s,
                    float(np.sum(v * wt) / np.sum(wt)),
                    float(np.sum(wt) ** 2 / np.sum(wt * wt)),  # Kish's effective n
                    {"judged_traces": float(sel.sum()), "weight_sum": float(np.sum(wt))},
                    tuple(str(t) for t in traces[sel][worst]) if query.examples else (),
                )
            )
        return points

    # -- end users' feedback ---------------------------------------------------------------------------------------
    def _negative_feedback_series(self, query: SeriesQuery) -> list[WindowPoint]:
        sql = self._sql.negative_feedback_series(
            tenant=query.scope.tenant,
            feature=query.scope.feature,
            **self._span_window(query),
            examples=_EXAMPLES if query.examples else 0,
        )
        return [
            WindowPoint(
                query.start_s + int(r["window"]) * query.step_s,
                float(r["value"]),
                float(r["count"]),
                {},
                tuple(str(t) for t in r["trace_ids"]),
            )
            for r in self._read(sql)
        ]

    # -- helpers -------------------------------------------------------------------------------------------------
    def _read(self, query: Query) -> list[dict[str, Any]]:
        sql, params = query
        return self.store.read(sql, params)

    @staticmethod
    def _span_window(query: SeriesQuery) -> _SpanWindow:
        """A series' range and step over raw spans, in nanoseconds."""
        return _SpanWindow(start_ns=_ns(query.start_s), end_ns=_ns(query.end_s), step_ns=_ns(query.step_s))
