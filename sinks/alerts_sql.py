"""Reads of the alerts table by alert id: every stored state change (firing, resolved) of the alerts asked for, as
`ragmon alerts` would list them. `ragmon demo` prints the alerts its evaluation fired this way
(`Store.alert_rows`).

The ids are one bound `{alert_ids:Array(String)}` parameter (the store takes arrays directly; only a running
agent's `POST /api/query` is limited to strings and numbers).
"""

from __future__ import annotations

from typing import Any

from ragmon.sinks.schema import Ddl


def alert_rows_sql(ddl: Ddl, alert_ids: list[str]) -> tuple[str, dict[str, Any]]:
    """Every row of the alerts `alert_ids`, each column of the table (`SELECT *`, as `ragmon alerts` reads)."""
    return f"SELECT * FROM {ddl.table('alerts')} WHERE alert_id IN {{alert_ids:Array(String)}}", {
        "alert_ids": list(alert_ids)
    }
