"""The reads of a back-evaluation (`ragmon backeval`): kept traces' payloads page by page, and the evaluation row
ids their spans carry. Each function returns the SQL and its parameters; every value is a bound `{name:Type}`
parameter, so the same pair runs on the store (`Store.query`) or through a running agent (`POST /api/query` with
`"params"`), read-only and tenant-filtered either way.
"""

from __future__ import annotations

import json
from typing import Any

from ragmon.sinks.schema import quote_identifier

from ragmon import attributes as attr

Query = tuple[str, dict[str, Any]]


def _table(database: str, name: str) -> str:
    # `database` qualifies the table when the store's default database is another one (identifiers cannot be
    # bound parameters, so it is quoted as the schema's DDL quotes it)
    return f"{quote_identifier(database)}.{name}" if database else name


def kept_traces_page(
    *,
    since_s: float,
    feature: str | None,
    eval_run: str | None,
    evaluation: bool,
    offset: int,
    page_rows: int,
    database: str = "",
) -> Query:
    """One page of the kept traces that started within `since_s`: of one feature (or all), of one eval run's
    traffic (`eval_run`), every run's (`evaluation`) or production's (neither); oldest first."""
    params: dict[str, Any] = {"since_s": int(since_s), "offset": int(offset), "page_rows": int(page_rows)}
    where = ["start_time >= now64(9) - toIntervalSecond({since_s:UInt64})"]
    if feature is not None:
        where.append("feature = {feature:String}")
        params["feature"] = feature
    if eval_run is not None:
        # by the spans' attribute, not the payload's column: payloads copied before schema v7 have eval_run ''
        where.append(
            f"trace_id IN (SELECT trace_id FROM {_table(database, 'spans')}"
            " WHERE attributes[{run_key:String}] = {eval_run:String})"
        )
        params.update(run_key=attr.RAGMON_EVAL_RUN, eval_run=eval_run)
    else:
        where.append("eval_run != ''" if evaluation else "eval_run = ''")
    sql = (
        "SELECT tenant, trace_id, feature, eval_run, release, question, answer,"
        " arrayMap(p -> tupleElement(p, 'text'), passages) AS passage_texts,"
        " sampling_reason, inclusion_probability"
        f" FROM {_table(database, 'payloads')} FINAL WHERE {' AND '.join(where)}"
        " ORDER BY start_time, tenant, trace_id LIMIT {page_rows:UInt64} OFFSET {offset:UInt64}"
    )
    return sql, params


def eval_row_ids(trace_ids: list[str], *, database: str = "") -> Query:
    """(tenant, trace_id, row_id) for those of `trace_ids` whose spans carry `ragmon eval run`'s row id. The ids
    travel as one JSON text parameter (why not an Array parameter: `sampler_sql.copy_payloads_sql`)."""
    sql = (
        f"SELECT tenant, trace_id, any(attributes[{{key:String}}]) AS row_id FROM {_table(database, 'spans')}"
        " WHERE trace_id IN (SELECT arrayJoin(JSONExtract({trace_ids:String}, 'Array(String)')))"
        " AND attributes[{key:String}] != '' GROUP BY tenant, trace_id"
    )
    return sql, {"key": attr.RAGMON_EVAL_ROW_ID, "trace_ids": json.dumps(trace_ids, ensure_ascii=False)}
