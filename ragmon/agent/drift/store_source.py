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
scores (found through its payloads) are neither a baseline nor an alert — a dataset replayed against the app, or a
candidate model tried on it, must not fire a drift alert, nor move the baseline production is compared with.

Stage "" (the request as a whole) is the root span, stored with stage 'request'. Float32 columns (scores, gaps,
norms) come back as the float32 values stored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ragmon.agent.drift.signals import SIGNALS, Sample, SampleQuery, ScopeKey, SeriesQuery, WindowPoint
from ragmon.sinks.schema import DURATION_LEVELS, DURATION_STATE, ROLLUP_TABLE, Ddl, Topology
from ragmon.sinks.traffic import PRODUCTION, Traffic

_EXAMPLES = 3  # example trace ids per window / sample, as InMemorySignalSource
_JUDGED = ("faithfulness", "relevance")
_ROLLUP_SIGNALS = ("latency_p95_ms", "error_rate", "cost_per_request_usd", "tokens_per_request")
_SPAN_COLUMNS = {"top1_score": "top1_score", "similarity_gap": "similarity_gap", "norm_deviation": "norm_deviation"}
_ROOT_STAGE = "request"
_P95_INDEX = DURATION_LEVELS.index(0.95) + 1  # ClickHouse arrays are 1-based
_MERGE_DURATION = DURATION_STATE.replace("(", "Merge(", 1)


class StoreReader(Protocol):
    """What the source needs from `sinks.Store`: trusted read-only SQL, and where the tables are."""

    topology: Topology

    def read(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]: ...


def _stored_stage(stage: str) -> str:
    return _ROOT_STAGE if stage == "" else stage


def _signal_stage(stage: str) -> str:
    return "" if stage == _ROOT_STAGE else stage


def _sample_column(signal: str) -> str | None:
    if signal == "latency_p95_ms":
        return "duration_ms"
    return _SPAN_COLUMNS.get(signal)


def _badness(signal: str) -> str:
    """A SQL expression over a `spans` row: higher = worse, for picking example traces (InMemorySignalSource's
    `order`)."""
    if signal in ("latency_p95_ms", "sla_share"):
        return "duration_ms"
    if signal == "cost_per_request_usd":
        return "ifNull(cost_usd, -inf)"
    if signal == "tokens_per_request":
        return "toFloat64(input_tokens) + output_tokens"
    column = _SPAN_COLUMNS[signal]
    return column if SIGNALS[signal].bad_direction == "up" else f"-{column}"


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
        ddl = Ddl(store.topology)
        self._spans = ddl.table("spans")
        self._rollup = ddl.table(ROLLUP_TABLE)
        self._scores = ddl.table("scores")
        self._payloads = ddl.table("payloads")
        # every spans/rollup read is of `traffic`, and so is every score (through its trace's payload)
        self._traffic = traffic.condition()
        self._scope = f"{_SCOPE} AND {self._traffic}"
        self._scored = traffic.scores_condition(self._payloads)

    # -- SignalSource --------------------------------------------------------------------------------------------
    def scopes(self, signal: str, start_s: float, end_s: float) -> Sequence[ScopeKey]:
        spec = SIGNALS[signal]  # KeyError for an unknown signal: a programming error
        params: dict[str, Any] = {"start_ns": _ns(start_s), "end_ns": _ns(end_s)}
        if signal in _JUDGED:
            sql = (
                f"SELECT DISTINCT tenant, feature, '' AS stage FROM {self._scores}"
                " WHERE metric = {metric:String} AND run_name = '' AND value IS NOT NULL AND isFinite(value)"
                f" AND {_time_range('scored_at')} AND {self._scored}"
            )
            params["metric"] = signal
        elif signal in _ROLLUP_SIGNALS or signal == "sla_share":
            params = {"start_s": math.floor(start_s / 60) * 60, "end_s": math.ceil(end_s / 60) * 60}
            sql = (
                f"SELECT DISTINCT tenant, feature, stage FROM {self._rollup}"
                " WHERE minute >= toDateTime({start_s:Int64}) AND minute < toDateTime({end_s:Int64})"
                f" AND {self._traffic}"
            )
        else:
            sql = (
                f"SELECT DISTINCT tenant, feature, stage FROM {self._spans}"
                f" WHERE {_time_range('start_time')} AND {_SPAN_COLUMNS[signal]} IS NOT NULL AND {self._traffic}"
            )
        keys = {
            ScopeKey(str(r["tenant"]), str(r["feature"]), _signal_stage(str(r["stage"])))
            for r in self._read(sql, params)
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
        column = _sample_column(query.signal)
        if column is None:
            return Sample.empty()
        params = {**self._scope_params(query.scope), "start_ns": _ns(query.start_s), "end_ns": _ns(query.end_s)}
        params["max_values"] = int(query.max_values)
        # Beyond max_values, a uniform subsample chosen by a hash of the span: the same query gives the same
        # evidence (InMemorySignalSource draws with a fixed seed for the same reason).
        rows = self._read(
            f"SELECT toFloat64({column}) AS value, trace_id FROM ("
            f" SELECT {column}, trace_id, span_id FROM {self._spans}"
            f" WHERE {self._scope} AND {_time_range('start_time')} AND {column} IS NOT NULL AND isFinite({column})"
            " LIMIT 1 BY tenant, trace_id, span_id)"
            " ORDER BY cityHash64(trace_id, span_id) LIMIT {max_values:UInt64}",
            params,
        )
        if not rows:
            return Sample.empty()
        values = np.array([float(r["value"]) for r in rows], dtype=np.float64)
        traces = [str(r["trace_id"]) for r in rows]
        worst_first = np.argsort(-values if SIGNALS[query.signal].bad_direction == "up" else values, kind="stable")
        return Sample(values, tuple(traces[i] for i in worst_first[:_EXAMPLES]))

    # -- series from the rollup ----------------------------------------------------------------------------------
    def _rollup_series(self, query: SeriesQuery) -> list[WindowPoint]:
        params = self._minute_window_params(query)
        rows = self._read(
            "SELECT intDiv(toUnixTimestamp(minute) - {start_s:Int64}, {step_s:Int64}) AS window,"
            " sum(spans) AS spans, sum(errors) AS errors,"
            f" {_MERGE_DURATION}(duration_q)[{_P95_INDEX}] AS p95_ms,"
            " sum(input_tokens) + sum(output_tokens) AS tokens, sum(cost_usd) AS cost_usd,"
            " sum(cost_known) AS cost_known"
            f" FROM {self._rollup}"
            f" WHERE {self._scope} AND minute >= toDateTime({{start_s:Int64}}) AND minute < toDateTime({{end_s:Int64}})"
            " GROUP BY window HAVING spans > 0 ORDER BY window",
            params,
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
        params = {**self._span_window_params(query), "sla_ms": float(query.sla_ms)}
        rows = self._read(
            f"SELECT {_SPAN_WINDOW} AS window, count() AS n, countIf(duration_ms <= {{sla_ms:Float64}}) AS within"
            f" FROM (SELECT start_time, duration_ms FROM {self._spans}"
            f" WHERE {self._scope} AND {_time_range('start_time')} LIMIT 1 BY tenant, trace_id, span_id)"
            " GROUP BY window ORDER BY window",
            params,
        )
        step_s, sla_ms = query.step_s, float(query.sla_ms)
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
        column = _SPAN_COLUMNS[query.signal]
        rows = self._read(
            f"SELECT {_SPAN_WINDOW} AS window, avg(toFloat64({column})) AS value, count() AS n"
            f" FROM (SELECT start_time, {column} FROM {self._spans}"
            f" WHERE {self._scope} AND {_time_range('start_time')} AND {column} IS NOT NULL AND isFinite({column})"
            " LIMIT 1 BY tenant, trace_id, span_id)"
            " GROUP BY window ORDER BY window",
            self._span_window_params(query),
        )
        return [
            WindowPoint(query.start_s + int(r["window"]) * query.step_s, float(r["value"]), float(r["n"])) for r in rows
        ]

    def _window_examples(self, query: SeriesQuery) -> dict[float, tuple[str, ...]]:
        """The worst few traces per window (slowest, failed, most expensive, lowest-scoring), from raw spans."""
        params = {**self._span_window_params(query), "examples": _EXAMPLES}
        where = f"{self._scope} AND {_time_range('start_time')}"
        if query.signal == "error_rate":
            picked = "groupArrayIf({examples:UInt64})(trace_id, status = 'error')"
        else:
            picked = (
                f"arrayMap(x -> x.2, groupArraySorted({{examples:UInt64}})((-({_badness(query.signal)}), trace_id)))"
            )
        column = _SPAN_COLUMNS.get(query.signal)
        if column is not None:
            where += f" AND {column} IS NOT NULL AND isFinite({column})"
        rows = self._read(
            f"SELECT {_SPAN_WINDOW} AS window, {picked} AS trace_ids FROM ("
            f" SELECT {_EXAMPLE_COLUMNS} FROM {self._spans} WHERE {where} LIMIT 1 BY tenant, trace_id, span_id)"
            " GROUP BY window",
            params,
        )
        return {query.start_s + int(r["window"]) * query.step_s: tuple(str(t) for t in r["trace_ids"]) for r in rows}

    # -- judged quality --------------------------------------------------------------------------------------------
    def _judged_series(self, query: SeriesQuery) -> list[WindowPoint]:
        params = {
            "tenant": query.scope.tenant,
            "feature": query.scope.feature,
            "metric": query.signal,
            "start_ns": _ns(query.start_s),
            "end_ns": _ns(query.end_s),
        }
        judged = (
            f"SELECT trace_id, scored_at, value FROM {self._scores}"
            " WHERE tenant = {tenant:String} AND feature = {feature:String} AND metric = {metric:String}"
            f" AND run_name = '' AND value IS NOT NULL AND isFinite(value) AND {_time_range('scored_at')}"
            f" AND {self._scored}"
        )
        rows = self._read(
            "SELECT s.trace_id AS trace_id, toUnixTimestamp64Milli(s.scored_at) AS scored_ms, s.value AS value,"
            " p.inclusion_probability AS probability"
            f" FROM ({judged} ORDER BY scored_at DESC LIMIT 1 BY trace_id) AS s"
            " LEFT JOIN ("
            f"  SELECT trace_id, inclusion_probability FROM {self._payloads}"
            # only the judged traces' payloads: the table holds two weeks of kept traces
            f"   WHERE tenant = {{tenant:String}} AND trace_id IN (SELECT trace_id FROM ({judged}))"
            "   ORDER BY inserted_at DESC LIMIT 1 BY trace_id"
            " ) AS p ON p.trace_id = s.trace_id"
            " SETTINGS join_use_nulls = 1",
            params,
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
    def _read(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        return self.store.read(sql, params)

    @staticmethod
    def _scope_params(scope: ScopeKey) -> dict[str, Any]:
        return {"tenant": scope.tenant, "feature": scope.feature, "stage": _stored_stage(scope.stage)}

    def _minute_window_params(self, query: SeriesQuery) -> dict[str, Any]:
        return {
            **self._scope_params(query.scope),
            "start_s": _whole_minutes(query.start_s, "a series start"),
            "end_s": _whole_minutes(query.end_s, "a series end"),
            "step_s": _whole_minutes(query.step_s, "a series step"),
        }

    def _span_window_params(self, query: SeriesQuery) -> dict[str, Any]:
        return {
            **self._scope_params(query.scope),
            "start_ns": _ns(query.start_s),
            "end_ns": _ns(query.end_s),
            "step_ns": _ns(query.step_s),
        }


_SCOPE = "tenant = {tenant:String} AND feature = {feature:String} AND stage = {stage:String}"
_EXAMPLE_COLUMNS = (
    "tenant, trace_id, span_id, start_time, status, duration_ms, cost_usd, input_tokens, output_tokens,"
    " top1_score, similarity_gap, norm_deviation"
)
_SPAN_WINDOW = "intDiv(toUnixTimestamp64Nano(start_time) - {start_ns:Int64}, {step_ns:Int64})"


def _time_range(column: str) -> str:
    """[start_ns, end_ns) on a DateTime64 column, as constants the primary key and partitions can prune with."""
    return (
        f"{column} >= fromUnixTimestamp64Nano({{start_ns:Int64}})"
        f" AND {column} < fromUnixTimestamp64Nano({{end_ns:Int64}})"
    )
