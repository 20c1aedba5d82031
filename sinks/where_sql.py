"""The SQL that says where a drift alert's change is (`ragmon.drift.where`): which release came in around it, and
which recurring question its worst traces asked. Every value is a bound parameter.

Both read small things: the per-minute rollup over the feature's recent minutes (a few rows per minute and
release), and `trace_questions` over the alert's window for one feature (its sort key starts with the tenant and
the time, so the window is one range of it).
"""

from __future__ import annotations

from ragmon.sinks.schema import QUESTION_GROUPS_TABLE, ROLLUP_TABLE, TRACE_QUESTIONS_TABLE, Ddl


def releases_sql(ddl: Ddl) -> str:
    """Params: tenant, feature, since (DateTime: how far back a release counts as already there), current_from
    (DateTime). Per release of the feature's production traffic since `since`: the first minute it was seen, its
    calls, and its calls since `current_from`; '' (no release sent) included, so shares add up."""
    return f"""
SELECT release, min(minute) AS first_seen, sum(spans) AS calls,
    sumIf(spans, minute >= {{current_from:DateTime}}) AS current_calls
FROM {ddl.table(ROLLUP_TABLE)}
WHERE tenant = {{tenant:String}} AND feature = {{feature:String}} AND eval_run = ''
    AND minute >= {{since:DateTime}}
GROUP BY release"""


def example_groups_sql(ddl: Ddl) -> str:
    """Params: tenant, feature, window_from, window_to (DateTime64), trace_ids (Array(String)): the alert's example
    traces. Per question group that holds at least one of them: how many, the group's requests in the window and
    the window's total, a question of the examples as asked, and the group's representative question."""
    in_examples = "trace_id IN {trace_ids:Array(String)}"
    window = (
        f"FROM {ddl.table(TRACE_QUESTIONS_TABLE)}\n"
        "    WHERE tenant = {tenant:String} AND feature = {feature:String} AND eval_run = ''\n"
        "        AND start_time >= {window_from:DateTime64(3)} AND start_time < {window_to:DateTime64(3)}"
    )
    return f"""
SELECT q.group_id AS group_id, q.examples AS examples, q.requests AS requests,
    (SELECT uniqExact(trace_id) {window}) AS total, q.question AS question, g.label AS label
FROM (
    SELECT group_id, uniqExactIf(trace_id, {in_examples}) AS examples, uniqExact(trace_id) AS requests,
        anyIf(question, {in_examples}) AS question
    {window}
    GROUP BY group_id
    HAVING examples > 0
) AS q
LEFT JOIN (
    SELECT group_id, argMax(label, updated_at) AS label
    FROM {ddl.table(QUESTION_GROUPS_TABLE)}
    WHERE tenant = {{tenant:String}} AND feature = {{feature:String}}
    GROUP BY group_id
) AS g ON g.group_id = q.group_id
ORDER BY examples DESC, requests DESC, group_id
LIMIT 3"""
