"""Reads of the alerts table: recent and still open alerts (`ragmon alerts`, `Store.recent_alerts`), and every
stored state change (firing, resolved) of the alerts asked for by id, as `ragmon alerts` would list them (`ragmon
demo` prints the alerts its evaluation fired this way, `Store.alert_rows`).

The ids are one bound `{alert_ids:Array(String)}` parameter (the store takes arrays directly).
"""

from __future__ import annotations

from typing import Any

from ragmon.sinks.schema import Ddl


def alert_rows_sql(ddl: Ddl, alert_ids: list[str]) -> tuple[str, dict[str, Any]]:
    """Every row of the alerts `alert_ids`, each column of the table (`SELECT *`, as `ragmon alerts` reads)."""
    return f"SELECT * FROM {ddl.table('alerts')} WHERE alert_id IN {{alert_ids:Array(String)}}", {
        "alert_ids": list(alert_ids)
    }


def recent_alerts_sql(since_s: float, limit: int, table: str = "alerts") -> tuple[str, dict[str, Any]]:
    """Rows fired within `since_s`, plus every alert never resolved (however old): the table is small. `table`
    unqualified by default, as `ragmon query` reads (the store's database); the store qualifies it
    (`Store.recent_alerts`)."""
    sql = (
        f"SELECT * FROM {table}"
        " WHERE fired_at >= now64(3) - toIntervalSecond({since_s:UInt64})"
        f" OR alert_id NOT IN (SELECT alert_id FROM {table} WHERE state = 'resolved')"
        " ORDER BY fired_at DESC LIMIT {limit:UInt64}"
    )
    return sql, {"since_s": int(since_s), "limit": int(limit)}
