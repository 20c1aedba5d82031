"""Read-side SQL: the latency/cost report (from the rollups, never raw spans) and the tenant filter.

The report window is whole minutes; every whole clock hour inside it is read from `spans_1h` and only the edge
minutes from `spans_1m`, so a 24-hour report merges ~24 hourly states per key instead of ~1,440 minute states.

Every value of a query reaches the engine as a `{name:Type}` parameter; only fixed clauses are chosen in Python.
The tenant filter is a setting, not a query, and quotes its value (`tenant_filter_settings` says why).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ragmon.sinks.backend import quote_string
from ragmon.sinks.schema import (
    DURATION_LEVELS,
    DURATION_STATE,
    HOUR_ROLLUP_TABLE,
    ROLLUP_TABLE,
    TENANT_TABLES,
    TTFT_STATE,
    Ddl,
    Topology,
)
from ragmon.sinks.traffic import PRODUCTION, Traffic

if TYPE_CHECKING:
    from ragmon.sinks.releases import Where  # releases.py reads this module's `full_hours`

_MERGE_DURATION = DURATION_STATE.replace("(", "Merge(", 1)
_MERGE_TTFT = TTFT_STATE.replace("(", "Merge(", 1)
_MERGE_STATE_DURATION = DURATION_STATE.replace("(", "MergeState(", 1)
_MERGE_STATE_TTFT = TTFT_STATE.replace("(", "MergeState(", 1)


def full_hours(start_s: int, end_s: int) -> tuple[int, int]:
    """[first, last) clock hours whose every minute lies in the window's minutes [minute(start_s), end_s];
    first == last when there is none."""
    start_min = start_s // 60 * 60
    first = -(-start_min // 3600) * 3600
    last = (end_s - 3540) // 3600 * 3600 + 3600  # the hour h is whole when its last minute h + 3540 <= end_s
    return first, max(first, last)


def report_sql(
    topology: Topology,
    start_s: int,
    end_s: int,
    feature: str | None,
    tenant: str | None,
    traffic: Traffic = PRODUCTION,
    where: Where | None = None,
) -> tuple[str, dict[str, Any]]:
    """Per (feature, stage) and per (feature, stage, model) over whole minutes in [start_s, end_s], of `traffic`
    (production unless asked: `ragmon.sinks.traffic`) and of `where`'s release and environment (any when None)."""
    first_hour, end_hour = full_hours(int(start_s), int(end_s))
    params: dict[str, Any] = {"start_s": int(start_s), "end_s": int(end_s), "h0": first_hour, "h1": end_hour}
    filters = [traffic.condition(params)]
    if where is not None and not where.is_any:
        filters.append(where.condition(params))
    if tenant is not None:
        filters.append("tenant = {tenant:String}")
        params["tenant"] = tenant
    if feature is not None:
        filters.append("feature = {feature:String}")
        params["feature"] = feature
    minute_where = " AND ".join(
        [
            "minute >= toStartOfMinute(toDateTime({start_s:Int64}))",
            "minute <= toDateTime({end_s:Int64})",
            "NOT (minute >= toDateTime({h0:Int64}) AND minute < toDateTime({h1:Int64}))",
            *filters,
        ]
    )
    hour_where = " AND ".join(["hour >= toDateTime({h0:Int64})", "hour < toDateTime({h1:Int64})", *filters])
    ddl = Ddl(topology)
    columns = (
        "tenant, feature, stage, model, spans, errors, duration_q, ttft_q, input_tokens, output_tokens,"
        " cost_usd, cost_known"
    )
    # States are merged once per (feature, stage, model) in the inner query; the grouping sets then merge those
    # few per-model states into the totals, instead of merging every stored state twice (once per grouping set).
    sql = f"""
SELECT feature, stage, model,
    grouping(model) AS per_model,
    sum(requests) AS requests, sum(errors) AS errors,
    {_MERGE_DURATION}(duration_q) AS duration_quantiles,
    {_MERGE_TTFT}(ttft_q) AS ttft_quantiles,
    sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
    sum(cost_usd) AS cost_usd, sum(cost_known) AS cost_known
FROM (
    SELECT feature, stage, model,
        sum(spans) AS requests, sum(errors) AS errors,
        {_MERGE_STATE_DURATION}(duration_q) AS duration_q,
        {_MERGE_STATE_TTFT}(ttft_q) AS ttft_q,
        sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
        sum(cost_usd) AS cost_usd, sum(cost_known) AS cost_known
    FROM (
        SELECT {columns} FROM {ddl.table(HOUR_ROLLUP_TABLE)} WHERE {hour_where}
        UNION ALL
        SELECT {columns} FROM {ddl.table(ROLLUP_TABLE)} WHERE {minute_where}
    )
    GROUP BY feature, stage, model
)
GROUP BY GROUPING SETS ((feature, stage), (feature, stage, model))
ORDER BY feature, stage, per_model, model
SETTINGS force_grouping_standard_compatibility = 1"""
    return sql, params


def _number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _metrics(row: dict[str, Any]) -> dict[str, Any]:
    requests = int(row["requests"])
    quantiles = dict(zip(DURATION_LEVELS, row["duration_quantiles"] or (), strict=False))
    ttft = row["ttft_quantiles"] or [None]
    cost = float(row["cost_usd"]) if row["cost_known"] else None  # no span had a known cost: unknown, not 0
    return {
        "requests": requests,
        "errors": int(row["errors"]),
        "error_rate": row["errors"] / requests if requests else None,
        "p50_ms": _number(quantiles.get(0.5)),
        "p95_ms": _number(quantiles.get(0.95)),
        "p99_ms": _number(quantiles.get(0.99)),
        "ttft_p95_ms": _number(ttft[0]),
        "input_tokens": int(row["input_tokens"]),
        "output_tokens": int(row["output_tokens"]),
        "cost_usd": cost,
        "cost_per_request_usd": cost / requests if cost is not None and requests else None,
    }


def assemble_report(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per (feature, stage) with its metrics and `models`: the same metrics per model."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    per_model: list[dict[str, Any]] = []
    for row in rows:
        if row["per_model"]:  # standard GROUPING: 1 = model aggregated away, i.e. the (feature, stage) total
            out[(row["feature"], row["stage"])] = {
                "feature": row["feature"],
                "stage": row["stage"],
                **_metrics(row),
                "models": [],
            }
        else:
            per_model.append(row)
    for row in per_model:
        out[(row["feature"], row["stage"])]["models"].append({"model": row["model"], **_metrics(row)})
    return list(out.values())


def tenant_filter_settings(topology: Topology, tenant: str) -> dict[str, str]:
    """`additional_table_filters` restricting every tenant-bearing table to `tenant` (enforced by the engine)."""
    # The one place a value is quoted into text on the read path: the setting is a map of table → condition text,
    # and the engine parses each condition on its own, without the query's parameters (`tenant = {tenant:String}`
    # there fails with "Query parameter `tenant` was not set", chDB 26.9). Both levels are quoted with
    # `quote_string` (the tenant as a literal in the condition, the condition as a map value), so a tenant name
    # cannot end either string early.
    condition = f"tenant = {quote_string(tenant)}"
    entries = []
    for table in TENANT_TABLES:
        for name in (f"{topology.database}.{table}", table):
            entries.append(f"{quote_string(name)}: {quote_string(condition)}")
    return {"additional_table_filters": "{" + ", ".join(entries) + "}"}
