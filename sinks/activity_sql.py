"""How much a time range of the store holds: spans, distinct traces and the last span's start second, of every
service or one. `ragmon demo` asks it (through `Store.span_activity`) what its live run stored, and whether earlier
runs left spans in the hour it is about to fill with history.

Raw `spans`, duplicates not collapsed: a count for a person to read, not a figure to compute with. Every value is a
bound `{name:Type}` parameter.
"""

from __future__ import annotations

from typing import Any

from ragmon.sinks.schema import Ddl


def span_activity_sql(
    ddl: Ddl, start_s: int, end_s: int | None = None, *, service: str | None = None
) -> tuple[str, dict[str, Any]]:
    """One row (spans, traces, last_s) over spans that started in [start_s, end_s) (no end: up to now), of
    `service` when one is named; last_s is 0 when there is none."""
    params: dict[str, Any] = {"start_s": int(start_s)}
    where = ["start_time >= toDateTime64({start_s:Int64}, 9)"]
    if end_s is not None:
        where.append("start_time < toDateTime64({end_s:Int64}, 9)")
        params["end_s"] = int(end_s)
    if service is not None:
        where.append("service = {service:String}")
        params["service"] = service
    sql = (
        "SELECT count() AS spans, uniqExact(trace_id) AS traces, max(toUnixTimestamp(start_time)) AS last_s"
        f" FROM {ddl.table('spans')} WHERE {' AND '.join(where)}"
    )
    return sql, params
