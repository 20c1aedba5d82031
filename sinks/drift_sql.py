"""The reads of the drift checks: which scopes have a signal, a signal's series per window, a per-request sample,
the worst traces of each window, judged scores with their traces' inclusion probabilities, and how much
production history the store holds. `ragmon.drift.store_source` runs them and turns the rows into signal
points (where each signal comes from, and why, is told there).

Each function returns the SQL and its parameters. Every value (tenant, feature, stage, metric, eval run, times,
limits) is a bound `{name:Type}` parameter; the only words chosen in Python are columns and expressions picked
from the fixed tables below by a signal's name, so an unknown signal is a KeyError, never text in the SQL.

Times are `[start, end)`: the rollup's in whole seconds on minute boundaries (`start_s`, `end_s`, `step_s`), raw
spans' and scores' in nanoseconds (`start_ns`, `end_ns`, `step_ns`), so a range is a constant the primary key and
the partitions can prune with. A scope's stage is the stored one ('request' for the root span).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragmon.sinks.schema import DURATION_LEVELS, DURATION_STATE, ROLLUP_TABLE, Ddl, Topology
from ragmon.sinks.traffic import PRODUCTION, Traffic

Query = tuple[str, dict[str, Any]]

# signal -> its column in `spans`, for the signals read from raw spans
SPAN_COLUMNS = {"top1_score": "top1_score", "similarity_gap": "similarity_gap", "norm_deviation": "norm_deviation"}
# signal -> the `spans` column its per-request sample is drawn from (the signals that have one)
SAMPLE_COLUMNS = {"latency_p95_ms": "duration_ms", **SPAN_COLUMNS}

_P95_INDEX = DURATION_LEVELS.index(0.95) + 1  # ClickHouse arrays are 1-based
_MERGE_DURATION = DURATION_STATE.replace("(", "Merge(", 1)
_SCOPE = "tenant = {tenant:String} AND feature = {feature:String} AND stage = {stage:String}"
_EXAMPLE_COLUMNS = (
    "tenant, trace_id, span_id, start_time, status, duration_ms, cost_usd, input_tokens, output_tokens,"
    " top1_score, similarity_gap, norm_deviation"
)
_SPAN_WINDOW = "intDiv(toUnixTimestamp64Nano(start_time) - {start_ns:Int64}, {step_ns:Int64})"


@dataclass(frozen=True, slots=True)
class Scope:
    """One (tenant, feature, stage) as stored: the root span's stage is 'request'."""

    tenant: str
    feature: str
    stage: str

    def params(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "feature": self.feature, "stage": self.stage}


def _time_range(column: str) -> str:
    """[start_ns, end_ns) on a DateTime64 column, as constants the primary key and partitions can prune with."""
    return (
        f"{column} >= fromUnixTimestamp64Nano({{start_ns:Int64}})"
        f" AND {column} < fromUnixTimestamp64Nano({{end_ns:Int64}})"
    )


def _badness(signal: str, higher_is_worse: bool) -> str:
    """A SQL expression over a `spans` row: higher = worse, for picking a window's example traces."""
    if signal in ("latency_p95_ms", "sla_share"):
        return "duration_ms"
    if signal == "cost_per_request_usd":
        return "ifNull(cost_usd, -inf)"
    if signal == "tokens_per_request":
        return "toFloat64(input_tokens) + output_tokens"
    column = SPAN_COLUMNS[signal]
    return column if higher_is_worse else f"-{column}"


class DriftSql:
    """The drift reads of one store (its tables' names) and one traffic (production unless asked): every spans and
    rollup read is of that traffic, and so is every score (by its own eval run, `ragmon.sinks.traffic`)."""

    def __init__(self, topology: Topology, traffic: Traffic = PRODUCTION) -> None:
        ddl = Ddl(topology)
        self.traffic = traffic
        self._spans = ddl.table("spans")
        self._rollup = ddl.table(ROLLUP_TABLE)
        self._scores = ddl.table("scores")
        self._payloads = ddl.table("payloads")

    # -- scopes ----------------------------------------------------------------------------------------------
    def judged_scopes(self, metric: str, *, start_ns: int, end_ns: int) -> Query:
        """(tenant, feature, '' AS stage) with an online score of `metric` in the range."""
        params: dict[str, Any] = {"start_ns": start_ns, "end_ns": end_ns, "metric": metric}
        sql = (
            f"SELECT DISTINCT tenant, feature, '' AS stage FROM {self._scores}"
            " WHERE metric = {metric:String} AND run_name = '' AND value IS NOT NULL AND isFinite(value)"
            f" AND {_time_range('scored_at')} AND {self.traffic.scores_condition(params, self._payloads)}"
        )
        return sql, params

    def rollup_scopes(self, *, start_s: int, end_s: int) -> Query:
        """(tenant, feature, stage) with rollup minutes in the range."""
        params: dict[str, Any] = {"start_s": start_s, "end_s": end_s}
        sql = (
            f"SELECT DISTINCT tenant, feature, stage FROM {self._rollup}"
            " WHERE minute >= toDateTime({start_s:Int64}) AND minute < toDateTime({end_s:Int64})"
            f" AND {self.traffic.condition(params)}"
        )
        return sql, params

    def span_scopes(self, signal: str, *, start_ns: int, end_ns: int) -> Query:
        """(tenant, feature, stage) with spans in the range that carry `signal`'s column."""
        params: dict[str, Any] = {"start_ns": start_ns, "end_ns": end_ns}
        sql = (
            f"SELECT DISTINCT tenant, feature, stage FROM {self._spans}"
            f" WHERE {_time_range('start_time')} AND {SPAN_COLUMNS[signal]} IS NOT NULL"
            f" AND {self.traffic.condition(params)}"
        )
        return sql, params

    def _scope_spans(self, params: dict[str, Any], columns: str, *, finite: str | None = None) -> str:
        """`columns` of the scope's spans in [start_ns, end_ns), one row per span (a re-sent span's duplicate not
        yet merged away counts once), only those whose `finite` column is set and finite when given."""
        having = f" AND {finite} IS NOT NULL AND isFinite({finite})" if finite else ""
        return (
            f"SELECT {columns} FROM {self._spans}"
            f" WHERE {self._scope(params)} AND {_time_range('start_time')}{having}"
            " LIMIT 1 BY tenant, trace_id, span_id"
        )

    # -- per-request sample ----------------------------------------------------------------------------------
    def sample(self, signal: str, scope: Scope, *, start_ns: int, end_ns: int, max_values: int) -> Query:
        """(value, trace_id) of `signal` per span; beyond `max_values`, a uniform subsample chosen by a hash of
        the span, so the same query gives the same evidence."""
        column = SAMPLE_COLUMNS[signal]
        params = {**scope.params(), "start_ns": start_ns, "end_ns": end_ns, "max_values": max_values}
        sql = (
            f"SELECT toFloat64({column}) AS value, trace_id"
            f" FROM ({self._scope_spans(params, f'{column}, trace_id, span_id', finite=column)})"
            " ORDER BY cityHash64(trace_id, span_id) LIMIT {max_values:UInt64}"
        )
        return sql, params

    # -- series ----------------------------------------------------------------------------------------------
    def rollup_series(self, scope: Scope, *, start_s: int, end_s: int, step_s: int) -> Query:
        """Per window (its index from `start_s`): spans, errors, the merged p95, tokens, cost and cost_known."""
        params = {**scope.params(), "start_s": start_s, "end_s": end_s, "step_s": step_s}
        sql = (
            "SELECT intDiv(toUnixTimestamp(minute) - {start_s:Int64}, {step_s:Int64}) AS window,"
            " sum(spans) AS spans, sum(errors) AS errors,"
            f" {_MERGE_DURATION}(duration_q)[{_P95_INDEX}] AS p95_ms,"
            " sum(input_tokens) + sum(output_tokens) AS tokens, sum(cost_usd) AS cost_usd,"
            " sum(cost_known) AS cost_known"
            f" FROM {self._rollup}"
            f" WHERE {self._scope(params)}"
            " AND minute >= toDateTime({start_s:Int64}) AND minute < toDateTime({end_s:Int64})"
            " GROUP BY window HAVING spans > 0 ORDER BY window"
        )
        return sql, params

    def sla_series(self, scope: Scope, *, start_ns: int, end_ns: int, step_ns: int, sla_ms: float) -> Query:
        """Per window: spans (n) and those within `sla_ms` (within), duplicates collapsed."""
        params = {**scope.params(), "start_ns": start_ns, "end_ns": end_ns, "step_ns": step_ns, "sla_ms": sla_ms}
        sql = (
            f"SELECT {_SPAN_WINDOW} AS window, count() AS n, countIf(duration_ms <= {{sla_ms:Float64}}) AS within"
            f" FROM ({self._scope_spans(params, 'start_time, duration_ms')})"
            " GROUP BY window ORDER BY window"
        )
        return sql, params

    def span_mean_series(self, signal: str, scope: Scope, *, start_ns: int, end_ns: int, step_ns: int) -> Query:
        """Per window: the mean of `signal`'s column (value) over the spans that have it (n)."""
        column = SPAN_COLUMNS[signal]
        params = {**scope.params(), "start_ns": start_ns, "end_ns": end_ns, "step_ns": step_ns}
        sql = (
            f"SELECT {_SPAN_WINDOW} AS window, avg(toFloat64({column})) AS value, count() AS n"
            f" FROM ({self._scope_spans(params, f'start_time, {column}', finite=column)})"
            " GROUP BY window ORDER BY window"
        )
        return sql, params

    def window_examples(
        self,
        signal: str,
        scope: Scope,
        *,
        start_ns: int,
        end_ns: int,
        step_ns: int,
        examples: int,
        higher_is_worse: bool,
    ) -> Query:
        """Per window: the `examples` worst trace ids (trace_ids) — failed ones for the error rate, else by the
        signal's badness (`higher_is_worse` says which way a raw spans column's signal is trouble)."""
        params = {**scope.params(), "start_ns": start_ns, "end_ns": end_ns, "step_ns": step_ns, "examples": examples}
        where = f"{self._scope(params)} AND {_time_range('start_time')}"
        if signal == "error_rate":
            picked = "groupArrayIf({examples:UInt64})(trace_id, status = 'error')"
        else:
            badness = _badness(signal, higher_is_worse)
            picked = f"arrayMap(x -> x.2, groupArraySorted({{examples:UInt64}})((-({badness}), trace_id)))"
        column = SPAN_COLUMNS.get(signal)
        if column is not None:
            where += f" AND {column} IS NOT NULL AND isFinite({column})"
        sql = (
            f"SELECT {_SPAN_WINDOW} AS window, {picked} AS trace_ids FROM ("
            f" SELECT {_EXAMPLE_COLUMNS} FROM {self._spans} WHERE {where} LIMIT 1 BY tenant, trace_id, span_id)"
            " GROUP BY window"
        )
        return sql, params

    # -- judged quality --------------------------------------------------------------------------------------
    def judged_scores(self, metric: str, *, tenant: str, feature: str, start_ns: int, end_ns: int) -> Query:
        """(trace_id, scored_ms, value, probability) per judged trace of the scope, windowed by `scored_at`: its
        latest online verdict of `metric`, and its payload's inclusion probability (NULL once the payload
        expired)."""
        params = {"tenant": tenant, "feature": feature, "metric": metric, "start_ns": start_ns, "end_ns": end_ns}
        judged = (
            f"SELECT trace_id, scored_at, value FROM {self._scores}"
            " WHERE tenant = {tenant:String} AND feature = {feature:String} AND metric = {metric:String}"
            f" AND run_name = '' AND value IS NOT NULL AND isFinite(value) AND {_time_range('scored_at')}"
            f" AND {self.traffic.scores_condition(params, self._payloads)}"
        )
        sql = (
            "SELECT s.trace_id AS trace_id, toUnixTimestamp64Milli(s.scored_at) AS scored_ms, s.value AS value,"
            " p.inclusion_probability AS probability"
            f" FROM ({judged} ORDER BY scored_at DESC LIMIT 1 BY trace_id) AS s"
            " LEFT JOIN ("
            f"  SELECT trace_id, inclusion_probability FROM {self._payloads}"
            # only the judged traces' payloads: the table holds two weeks of kept traces
            f"   WHERE tenant = {{tenant:String}} AND trace_id IN (SELECT trace_id FROM ({judged}))"
            "   ORDER BY inserted_at DESC LIMIT 1 BY trace_id"
            " ) AS p ON p.trace_id = s.trace_id"
            " SETTINGS join_use_nulls = 1"
        )
        return sql, params

    def _scope(self, params: dict[str, Any]) -> str:
        """The scope's condition and the traffic's (its parameters added to `params`)."""
        return f"{_SCOPE} AND {self.traffic.condition(params)}"


def production_minutes() -> Query:
    """How many minutes of production traffic the store holds (`minutes`): how much baseline drift rules have.
    Tables unqualified: it is read through the query path, which resolves them in the store's database."""
    params: dict[str, Any] = {}
    return f"SELECT uniqExact(minute) AS minutes FROM {ROLLUP_TABLE} WHERE {PRODUCTION.condition(params)}", params
