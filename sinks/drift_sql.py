"""The reads of the drift checks: which scopes have a signal, a signal's series per window, a per-request sample,
the worst traces of each window, judged scores with their traces' inclusion probabilities, and how much
production history the store holds. `ragmon.drift.store_source` runs them for each signal's kind of read
(`ragmon.drift.reads`) and turns the rows into signal points (where each signal comes from, and why, is told
there).

Each function returns the SQL and its parameters. Every value (tenant, feature, stage, metric, eval run, times,
limits) is a bound `{name:Type}` parameter; the only words written into the text are the tables' own column names,
each looked up in the schema's column list for the table it reads (`SPAN_COLUMNS`, the rollup's summed columns),
so a name that is not one is a KeyError, never text in the SQL.

Times are `[start, end)`: the rollup's in whole seconds on minute boundaries (`start_s`, `end_s`, `step_s`), raw
spans' and scores' in nanoseconds (`start_ns`, `end_ns`, `step_ns`), so a range is a constant the primary key and
the partitions can prune with. A scope's stage is the stored one ('request' for the root span). Series rows are
`window` (the window's index from the range's start), `value` and `count`, and for some reads more figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ragmon.sinks.feedback_sql import negative_share_scopes_sql, negative_share_series_sql
from ragmon.sinks.schema import DURATION_LEVELS, DURATION_STATE, ROLLUP_COLUMNS, ROLLUP_TABLE, Ddl, Topology
from ragmon.sinks.traffic import PRODUCTION, Traffic

from ragmon.model import SPAN_COLUMNS

Query = tuple[str, dict[str, Any]]

_SPAN_COLUMNS = frozenset(name for name, _ in SPAN_COLUMNS)
# the rollup's per-minute sums (spans, errors, tokens, cost, cost_known): what a ratio of the rollup can divide
_ROLLUP_SUMS = frozenset(name for name, ch_type in ROLLUP_COLUMNS if ch_type.startswith("SimpleAggregateFunction(sum,"))
_MERGE_DURATION = DURATION_STATE.replace("(", "Merge(", 1)
_SCOPE = "tenant = {tenant:String} AND feature = {feature:String} AND stage = {stage:String}"
# What a window's example query reads of every span, besides the columns its traces are ranked by.
_EXAMPLE_COLUMNS = ("tenant", "trace_id", "span_id", "start_time", "status")
_SPAN_WINDOW = "intDiv(toUnixTimestamp64Nano(start_time) - {start_ns:Int64}, {step_ns:Int64})"
_ROLLUP_WINDOW = "intDiv(toUnixTimestamp(minute) - {start_s:Int64}, {step_s:Int64})"
_ROLLUP_RANGE = "minute >= toDateTime({start_s:Int64}) AND minute < toDateTime({end_s:Int64})"


def _span_column(name: str) -> str:
    """`name` if it is a column of `spans`; a KeyError otherwise (it is about to be written into SQL text)."""
    if name not in _SPAN_COLUMNS:
        raise KeyError(f"{name!r} is not a column of spans")
    return name


def _rollup_sum(name: str) -> str:
    if name not in _ROLLUP_SUMS:
        raise KeyError(f"{name!r} is not a summed column of {ROLLUP_TABLE}: {', '.join(sorted(_ROLLUP_SUMS))}")
    return name


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


def _finite(column: str) -> str:
    return f"{column} IS NOT NULL AND isFinite({column})"


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
        self._ddl = ddl

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
            f" WHERE {_ROLLUP_RANGE} AND {self.traffic.condition(params)}"
        )
        return sql, params

    def span_scopes(self, column: str, *, start_ns: int, end_ns: int) -> Query:
        """(tenant, feature, stage) with spans in the range that carry `column`."""
        params: dict[str, Any] = {"start_ns": start_ns, "end_ns": end_ns}
        sql = (
            f"SELECT DISTINCT tenant, feature, stage FROM {self._spans}"
            f" WHERE {_time_range('start_time')} AND {_span_column(column)} IS NOT NULL"
            f" AND {self.traffic.condition(params)}"
        )
        return sql, params

    def _scope_spans(self, params: dict[str, Any], columns: str, *, finite: str | None = None) -> str:
        """`columns` of the scope's spans in [start_ns, end_ns), one row per span (a re-sent span's duplicate not
        yet merged away counts once), only those whose `finite` column is set and finite when given."""
        having = f" AND {_finite(finite)}" if finite else ""
        return (
            f"SELECT {columns} FROM {self._spans}"
            f" WHERE {self._scope(params)} AND {_time_range('start_time')}{having}"
            " LIMIT 1 BY tenant, trace_id, span_id"
        )

    # -- per-request sample ----------------------------------------------------------------------------------
    def sample(self, column: str, scope: Scope, *, start_ns: int, end_ns: int, max_values: int) -> Query:
        """(value, trace_id) of `column` per span where it is set and finite; beyond `max_values`, a uniform
        subsample chosen by a hash of the span, so the same query gives the same evidence."""
        column = _span_column(column)
        params = {**scope.params(), "start_ns": start_ns, "end_ns": end_ns, "max_values": max_values}
        sql = (
            f"SELECT toFloat64({column}) AS value, trace_id"
            f" FROM ({self._scope_spans(params, f'{column}, trace_id, span_id', finite=column)})"
            " ORDER BY cityHash64(trace_id, span_id) LIMIT {max_values:UInt64}"
        )
        return sql, params

    # -- series from the rollup ------------------------------------------------------------------------------
    def _rollup_series(self, scope: Scope, figures: str, *, start_s: int, end_s: int, step_s: int) -> Query:
        """`figures` (SQL over the merged minutes, naming `value` and `count`) per window with spans."""
        params = {**scope.params(), "start_s": start_s, "end_s": end_s, "step_s": step_s}
        sql = (
            # `spans` stays the column's name: an alias `spans` would turn the figures' sum(spans) into a nested sum
            f"SELECT {_ROLLUP_WINDOW} AS window, {figures} FROM {self._rollup}"
            f" WHERE {self._scope(params)} AND {_ROLLUP_RANGE}"
            " GROUP BY window HAVING sum(spans) > 0 ORDER BY window"
        )
        return sql, params

    def rollup_quantile_series(self, level: float, scope: Scope, *, start_s: int, end_s: int, step_s: int) -> Query:
        """Per window: the span duration quantile `level` of the merged per-minute sketches (value; one of the
        levels they keep, else a ValueError) and the spans (count)."""
        index = DURATION_LEVELS.index(level) + 1  # ClickHouse arrays are 1-based
        figures = f"{_MERGE_DURATION}(duration_q)[{index}] AS value, sum(spans) AS count"
        return self._rollup_series(scope, figures, start_s=start_s, end_s=end_s, step_s=step_s)

    def rollup_ratio_series(
        self, numerator: Sequence[str], per: str, scope: Scope, *, start_s: int, end_s: int, step_s: int
    ) -> Query:
        """Per window: Σ `numerator` columns / Σ `per` (value; NaN where Σ `per` is 0) and Σ `per` (count)."""
        total = " + ".join(f"sum({_rollup_sum(name)})" for name in numerator)
        count = f"sum({_rollup_sum(per)})"
        figures = f"if(count > 0, ({total}) / count, nan) AS value, {count} AS count"
        return self._rollup_series(scope, figures, start_s=start_s, end_s=end_s, step_s=step_s)

    # -- series from raw spans -------------------------------------------------------------------------------
    def sla_series(
        self, scope: Scope, *, start_ns: int, end_ns: int, step_ns: int, step_s: float, sla_ms: float
    ) -> Query:
        """Per window: the share of spans within `sla_ms` (value), the spans (count), spans per second
        (input_qps), those within the SLA per second (effective_qps) and the SLA (sla_ms); duplicates collapsed."""
        params = {**scope.params(), "start_ns": start_ns, "end_ns": end_ns, "step_ns": step_ns}
        params |= {"step_s": step_s, "sla_ms": sla_ms}
        within = "countIf(duration_ms <= {sla_ms:Float64})"
        sql = (
            f"SELECT {_SPAN_WINDOW} AS window, {within} / count() AS value, count() AS count,"
            f" count() / {{step_s:Float64}} AS input_qps, {within} / {{step_s:Float64}} AS effective_qps,"
            " {sla_ms:Float64} AS sla_ms"
            f" FROM ({self._scope_spans(params, 'start_time, duration_ms')})"
            " GROUP BY window ORDER BY window"
        )
        return sql, params

    def span_mean_series(self, column: str, scope: Scope, *, start_ns: int, end_ns: int, step_ns: int) -> Query:
        """Per window: the mean of `column` (value) over the spans where it is set and finite (count)."""
        column = _span_column(column)
        params = {**scope.params(), "start_ns": start_ns, "end_ns": end_ns, "step_ns": step_ns}
        sql = (
            f"SELECT {_SPAN_WINDOW} AS window, avg(toFloat64({column})) AS value, count() AS count"
            f" FROM ({self._scope_spans(params, f'start_time, {column}', finite=column)})"
            " GROUP BY window ORDER BY window"
        )
        return sql, params

    # -- example traces --------------------------------------------------------------------------------------
    def worst_examples(
        self,
        worst: Sequence[str],
        scope: Scope,
        *,
        start_ns: int,
        end_ns: int,
        step_ns: int,
        examples: int,
        lowest: bool = False,
        finite: str | None = None,
    ) -> Query:
        """Per window: the `examples` trace ids (trace_ids) whose spans have the highest sum of the `worst`
        columns (the lowest with `lowest`; a NULL ranks last), among the spans whose `finite` column is set and
        finite when given."""
        total = " + ".join(f"toFloat64({_span_column(name)})" for name in worst)
        badness = f"ifNull({'-' if lowest else ''}({total}), -inf)"
        picked = f"arrayMap(x -> x.2, groupArraySorted({{examples:UInt64}})((-({badness}), trace_id)))"
        return self._examples(picked, worst, scope, start_ns, end_ns, step_ns, examples, finite=finite)

    def failed_examples(self, scope: Scope, *, start_ns: int, end_ns: int, step_ns: int, examples: int) -> Query:
        """Per window: up to `examples` trace ids (trace_ids) of failed spans."""
        picked = "groupArrayIf({examples:UInt64})(trace_id, status = 'error')"
        return self._examples(picked, (), scope, start_ns, end_ns, step_ns, examples)

    def _examples(
        self,
        picked: str,
        ranked_by: Sequence[str],
        scope: Scope,
        start_ns: int,
        end_ns: int,
        step_ns: int,
        examples: int,
        *,
        finite: str | None = None,
    ) -> Query:
        params = {**scope.params(), "start_ns": start_ns, "end_ns": end_ns, "step_ns": step_ns, "examples": examples}
        where = f"{self._scope(params)} AND {_time_range('start_time')}"
        if finite is not None:
            where += f" AND {_finite(_span_column(finite))}"
        columns = ", ".join(dict.fromkeys([*_EXAMPLE_COLUMNS, *map(_span_column, ranked_by)]))
        sql = (
            f"SELECT {_SPAN_WINDOW} AS window, {picked} AS trace_ids FROM ("
            f" SELECT {columns} FROM {self._spans} WHERE {where} LIMIT 1 BY tenant, trace_id, span_id)"
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

    # -- end users' feedback (`feedback_sql.py`: joined to its trace at read time) ------------------------------
    def negative_feedback_scopes(self, *, start_ns: int, end_ns: int) -> Query:
        """(tenant, feature, '' AS stage) with thumbs or ratings on their traces received in the range."""
        params: dict[str, Any] = {"start_ns": start_ns, "end_ns": end_ns}
        return negative_share_scopes_sql(self._ddl, self.traffic, params), params

    def negative_feedback_series(
        self, *, tenant: str, feature: str, start_ns: int, end_ns: int, step_ns: int, examples: int
    ) -> Query:
        """Per window of arrival: the share of negative verdicts (value), the verdicts (count), examples."""
        params: dict[str, Any] = {
            "tenant": tenant,
            "feature": feature,
            "start_ns": start_ns,
            "end_ns": end_ns,
            "step_ns": step_ns,
        }
        return negative_share_series_sql(self._ddl, self.traffic, params, examples), params

    def _scope(self, params: dict[str, Any]) -> str:
        """The scope's condition and the traffic's (its parameters added to `params`)."""
        return f"{_SCOPE} AND {self.traffic.condition(params)}"


def production_minutes() -> Query:
    """How many minutes of production traffic the store holds (`minutes`): how much baseline drift rules have.
    Tables unqualified: the store's read connections resolve them in its database (`Store.production_minutes`)."""
    params: dict[str, Any] = {}
    return f"SELECT uniqExact(minute) AS minutes FROM {ROLLUP_TABLE} WHERE {PRODUCTION.condition(params)}", params
