"""`StoreSignalSource`: the `SignalSource` over the store, computing what `InMemorySignalSource` computes (the table
in `signals.py`) from the tables the agent fills.

Where each signal comes from:
- latency p95, error rate, cost and tokens per request: the per-minute rollup `spans_1m` (every span, merged
  DDSketch states for the p95: within 0.5% of an order statistic next to the exact one, see `ragmon.sinks.schema`).
  Windows are whole minutes, so a series query must be minute-aligned (the evaluator's always are).
- rank-1 score, similarity gap, norm deviation, the SLA share, every per-request sample and the example trace
  ids: raw `spans` (one scope is one range of its sort key, tenant-feature-stage-time), duplicates collapsed with
  `LIMIT 1 BY` as the sampler does.
- faithfulness, relevance: online judge scores (`scores`, run_name '') weighted by 1 / the trace's inclusion
  probability, which the sampler recorded on the kept trace's payload (`payloads.inclusion_probability`). A score
  whose payload has expired (payloads live 14 days, scores 180) counts with probability 1. A trace judged more
  than once (a new judge version) counts once, with its latest verdict. Scores are windowed by `scored_at`, when
  the verdict became known, not by the trace's start: the evaluator judges each window once, a couple of minutes
  after it closes, so windowing by trace time would silently drop every verdict the judge worker delivered later.

Production traffic only, unless built with another `ragmon.sinks.traffic.Traffic`: an eval run's spans, minutes and
scores (by the score's own eval run, schema v9) are neither a baseline nor an alert — a dataset replayed against the
app, or a candidate model tried on it, must not fire a drift alert, nor move the baseline production is compared with.

Stage "" (the request as a whole) is the root span, stored with stage 'request'. Float32 columns (scores, gaps,
norms) come back as the float32 values stored.

The SQL is `ragmon.sinks.drift_sql`'s (every value a bound parameter); this module picks the query for a signal,
turns the drift types into its values and its rows into `WindowPoint`s and `Sample`s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ragmon.drift.signals import SIGNALS, Sample, SampleQuery, ScopeKey, SeriesQuery, WindowPoint
from ragmon.sinks.drift_sql import SAMPLE_COLUMNS, DriftSql, Query, Scope
from ragmon.sinks.schema import Topology
from ragmon.sinks.traffic import PRODUCTION, Traffic

_EXAMPLES = 3  # example trace ids per window / sample, as InMemorySignalSource
_JUDGED = ("faithfulness", "relevance")
_ROLLUP_SIGNALS = ("latency_p95_ms", "error_rate", "cost_per_request_usd", "tokens_per_request")
_ROOT_STAGE = "request"


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
        if signal in _JUDGED:
            query = self._sql.judged_scopes(signal, start_ns=_ns(start_s), end_ns=_ns(end_s))
        elif signal in _ROLLUP_SIGNALS or signal == "sla_share":
            query = self._sql.rollup_scopes(start_s=math.floor(start_s / 60) * 60, end_s=math.ceil(end_s / 60) * 60)
        else:
            query = self._sql.span_scopes(signal, start_ns=_ns(start_s), end_ns=_ns(end_s))
        keys = {
            ScopeKey(str(r["tenant"]), str(r["feature"]), _signal_stage(str(r["stage"]))) for r in self._read(query)
        }
        if spec.trace_level:
            keys = {key for key in keys if key.stage == ""}
        return sorted(keys)

    def series(self, query: SeriesQuery) -> Sequence[WindowPoint]:
        if query.signal in _JUDGED:
            return self._judged_series(query)
        if query.signal in _ROLLUP_SIGNALS:
            points = self._rollup_series(query)
        elif query.signal == "sla_share":
            points = self._sla_series(query)
        else:
            points = self._span_mean_series(query)
        if not query.examples or not points:
            return points
        examples = self._window_examples(query)
        return [
            WindowPoint(p.start_s, p.value, p.count, p.extra, examples.get(p.start_s, ())) if examples else p
            for p in points
        ]

    def sample(self, query: SampleQuery) -> Sample:
        if query.signal not in SAMPLE_COLUMNS:
            return Sample.empty()
        rows = self._read(
            self._sql.sample(
                query.signal,
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

    # -- series from the rollup ----------------------------------------------------------------------------------
    def _rollup_series(self, query: SeriesQuery) -> list[WindowPoint]:
        rows = self._read(
            self._sql.rollup_series(
                _stored_scope(query.scope),
                start_s=_whole_minutes(query.start_s, "a series start"),
                end_s=_whole_minutes(query.end_s, "a series end"),
                step_s=_whole_minutes(query.step_s, "a series step"),
            )
        )
        points = []
        for row in rows:
            start_s = query.start_s + int(row["window"]) * query.step_s
            spans = float(row["spans"])
            if query.signal == "latency_p95_ms":
                value, count = float(row["p95_ms"]), spans
            elif query.signal == "error_rate":
                value, count = float(row["errors"]) / spans, spans
            elif query.signal == "cost_per_request_usd":
                count = float(row["cost_known"])
                value = float(row["cost_usd"]) / count if count else math.nan  # no known cost is unknown, not 0
            else:
                value, count = float(row["tokens"]) / spans, spans
            points.append(WindowPoint(start_s, value, count))
        return points

    # -- series from raw spans -----------------------------------------------------------------------------------
    def _sla_series(self, query: SeriesQuery) -> list[WindowPoint]:
        if query.sla_ms is None:
            raise ValueError("sla_share needs sla_ms")
        step_s, sla_ms = query.step_s, float(query.sla_ms)
        rows = self._read(self._sql.sla_series(_stored_scope(query.scope), **self._span_window(query), sla_ms=sla_ms))
        return [
            WindowPoint(
                query.start_s + int(r["window"]) * step_s,
                float(r["within"]) / float(r["n"]),
                float(r["n"]),
                {"input_qps": float(r["n"]) / step_s, "effective_qps": float(r["within"]) / step_s, "sla_ms": sla_ms},
            )
            for r in rows
        ]

    def _span_mean_series(self, query: SeriesQuery) -> list[WindowPoint]:
        rows = self._read(
            self._sql.span_mean_series(query.signal, _stored_scope(query.scope), **self._span_window(query))
        )
        return [
            WindowPoint(query.start_s + int(r["window"]) * query.step_s, float(r["value"]), float(r["n"])) for r in rows
        ]

    def _window_examples(self, query: SeriesQuery) -> dict[float, tuple[str, ...]]:
        """The worst few traces per window (slowest, failed, most expensive, lowest-scoring), from raw spans."""
        rows = self._read(
            self._sql.window_examples(
                query.signal,
                _stored_scope(query.scope),
                **self._span_window(query),
                examples=_EXAMPLES,
                higher_is_worse=_higher_is_worse(query.signal),
            )
        )
        return {query.start_s + int(r["window"]) * query.step_s: tuple(str(t) for t in r["trace_ids"]) for r in rows}

    # -- judged quality --------------------------------------------------------------------------------------------
    def _judged_series(self, query: SeriesQuery) -> list[WindowPoint]:
        rows = self._read(
            self._sql.judged_scores(
                query.signal,
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
                    float(np.sum(wt) ** 2 / np.sum(wt * wt)),  # Kish's effective n, as InMemorySignalSource
                    {"judged_traces": float(sel.sum()), "weight_sum": float(np.sum(wt))},
                    tuple(str(t) for t in traces[sel][worst]) if query.examples else (),
                )
            )
        return points

    # -- helpers -------------------------------------------------------------------------------------------------
    def _read(self, query: Query) -> list[dict[str, Any]]:
        sql, params = query
        return self.store.read(sql, params)

    @staticmethod
    def _span_window(query: SeriesQuery) -> dict[str, int]:
        """A series' range and step over raw spans, in nanoseconds."""
        return {"start_ns": _ns(query.start_s), "end_ns": _ns(query.end_s), "step_ns": _ns(query.step_s)}
