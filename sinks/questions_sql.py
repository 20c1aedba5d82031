"""SQL of the recurring questions: each decided trace's question and what the grouping needs beside it
(`trace_questions_sql`, read by the agent's question stage), the groups held at start (`question_groups_sql`), and
the view of the most common questions over a window (`question_view_sql`).

A range's traces are those whose root span was stored in it: a root is stored last (it ends after its children),
so a trace is read once, when it is whole. Its spans and captured text are read from `context_from` — the oldest
range the sampler still held a trace in when it took this one, so every earlier span of these traces is at or
after it — to `context_to` (what is stored). The question is `trace_question_sql`'s, the payload copy's own.
"""

from __future__ import annotations

from typing import Any

from ragmon.sinks import trace_question_sql as Q
from ragmon.sinks.quality import weighted_sums
from ragmon.sinks.schema import CONTENT_TABLE, QUESTION_GROUPS_TABLE, TRACE_QUESTIONS_TABLE, Ddl
from ragmon.sinks.traffic import PRODUCTION, Traffic

# Characters of a question kept in `trace_questions` (as asked).
MAX_QUESTION_CHARS = 1000


def trace_questions_sql(ddl: Ddl) -> str:
    """Params (UInt64): seq_from, seq_to — the range; context_from, context_to — where its traces' spans are read.
    One row per trace whose root was stored in the range: tenant, trace_id, feature, eval_run, release, environment,
    start_time, failed, duration_ms and question ('' when none was captured)."""
    roots = f"""SELECT tenant, trace_id FROM {ddl.table("spans")}
        WHERE ingest_seq BETWEEN {{seq_from:UInt64}} AND {{seq_to:UInt64}} AND parent_span_id = ''"""
    context = "ingest_seq BETWEEN {context_from:UInt64} AND {context_to:UInt64}"
    return f"""
WITH info AS (
    SELECT tenant, trace_id,
        if(countIf(root) > 0, anyIf(feature, root), anyIf(feature, feature != '')) AS feature,
        anyIf(eval_run, eval_run != '') AS eval_run,
        -- the trace's release and environment: its earliest span's that has one (as the rollups and payloads)
        argMinIf(release, start_time, release != '') AS release,
        argMinIf(environment, start_time, environment != '') AS environment,
        min(start_time) AS first_start,
        toUInt8(countIf(status = 'error') > 0) AS failed,
        toFloat64(if(countIf(root) > 0, maxIf(duration_ms, root), max(duration_ms))) AS request_ms
    FROM (
        SELECT tenant, trace_id, feature, eval_run, release, environment, start_time, status, duration_ms,
            parent_span_id = '' AS root
        FROM {ddl.table("spans")}
        WHERE {context} AND (tenant, trace_id) IN ({roots})
        LIMIT 1 BY tenant, trace_id, span_id
    )
    GROUP BY tenant, trace_id
),
per_trace AS (
    SELECT tenant, trace_id, {Q.PER_TRACE}
    FROM (
        SELECT tenant, trace_id, span_id, parent_span_id, stage, start_time, content, {Q.span_flags("content")}
        FROM {ddl.table(CONTENT_TABLE)}
        WHERE {context} AND (tenant, trace_id) IN ({roots})
        LIMIT 1 BY tenant, trace_id, span_id
    )
    GROUP BY tenant, trace_id
),
questions AS (
    SELECT tenant, trace_id,
        {Q.question("root_question", "any_question", "chain_input", "retrieval_query", "messages")} AS question
    FROM (
        SELECT tenant, trace_id, root_question, any_question,
            {Q.chain_input("chain_content")} AS chain_input,
            {Q.retrieval_query("retrieval_content")} AS retrieval_query,
            {Q.prompt_messages("prompt_content")} AS messages
        FROM per_trace
    )
)
SELECT i.tenant AS tenant, i.trace_id AS trace_id, i.feature AS feature, i.eval_run AS eval_run,
    i.release AS release, i.environment AS environment, i.first_start AS start_time, i.failed AS failed,
    i.request_ms AS duration_ms, leftUTF8(trimBoth(q.question), {MAX_QUESTION_CHARS}) AS question
FROM info AS i
LEFT JOIN questions AS q ON q.tenant = i.tenant AND q.trace_id = i.trace_id
ORDER BY tenant, feature, start_time, trace_id"""


def question_groups_sql(ddl: Ddl) -> str:
    """Params: per_feature (UInt32). The stored groups, latest state, the most-asked `per_feature` of each
    (tenant, feature): what the grouper holds at start."""
    return f"""
SELECT tenant, feature, group_id, label, normalised, grouper, centroid, members, created_at, updated_at
FROM {ddl.table(QUESTION_GROUPS_TABLE)} FINAL
ORDER BY tenant, feature, members DESC, group_id
LIMIT {{per_feature:UInt32}} BY tenant, feature"""


def question_view_sql(
    ddl: Ddl, start_s: int, end_s: int, feature: str | None, limit: int, traffic: Traffic = PRODUCTION
) -> tuple[str, dict[str, Any]]:
    """The `limit` most asked question groups over [start_s, end_s) and each one's figures over it and over the
    window of equal length before it (`period` 1 and 0): requests, share of the period's grouped requests, errors,
    p95 duration, up to three example questions; and per metric the judged quality weighted by inclusion
    probability (`quality.weighted_sums`) and refusals, from the scores of the group's traces."""
    params: dict[str, Any] = {
        "start_s": int(start_s),
        "end_s": int(end_s),
        "prev_s": int(start_s) - (int(end_s) - int(start_s)),
        "limit": int(limit),
    }
    where = [
        "start_time >= toDateTime64({prev_s:Int64}, 9)",
        "start_time < toDateTime64({end_s:Int64}, 9)",
        traffic.condition(params),
    ]
    if feature is not None:
        where.append("feature = {feature:String}")
        params["feature"] = feature
    scores_where = traffic.scores_condition(params, ddl.table("payloads"))
    return (
        f"""
WITH figures AS (
    -- per group and period straight from the rows (no per-trace step: a day holds millions of traces); a range
    -- grouped again after a crash counts until the table's merge collapses it
    SELECT tenant, feature, group_id, toUInt8(start_time >= toDateTime64({{start_s:Int64}}, 9)) AS period,
        count() AS requests, sum(failed) AS errors, quantile(0.95)(duration_ms) AS p95_ms,
        arraySlice(groupUniqArray(4)(question), 1, 3) AS examples
    FROM {ddl.table(TRACE_QUESTIONS_TABLE)}
    WHERE {" AND ".join(where)}
    GROUP BY tenant, feature, group_id, period
),
totals AS (SELECT period, sum(requests) AS requests FROM figures GROUP BY period),
top AS (
    SELECT tenant, feature, group_id FROM figures WHERE period = 1
    ORDER BY requests DESC, group_id LIMIT {{limit:UInt32}}
),
traces AS (
    SELECT tenant, trace_id, feature, group_id, toUInt8(start_time >= toDateTime64({{start_s:Int64}}, 9)) AS period
    FROM {ddl.table(TRACE_QUESTIONS_TABLE)}
    WHERE {" AND ".join(where)} AND (tenant, feature, group_id) IN (SELECT tenant, feature, group_id FROM top)
),
judged AS (
    SELECT t.tenant AS tenant, t.feature AS feature, t.group_id AS group_id, t.period AS period, s.metric AS metric,
        count() AS judged, countIf(has(s.flags, 'refusal')) AS refusals,
        {weighted_sums("s.")}
    FROM traces AS t
    INNER JOIN (
        SELECT tenant, trace_id, metric, value, status, flags, inclusion_probability
        FROM {ddl.table("scores")} FINAL
        WHERE run_name = '' AND {scores_where}
            AND trace_id IN (SELECT trace_id FROM traces)
    ) AS s ON s.tenant = t.tenant AND s.trace_id = t.trace_id
    GROUP BY tenant, feature, group_id, period, metric
)
SELECT f.tenant AS tenant, f.feature AS feature, f.group_id AS group_id, f.period AS period,
    f.requests AS requests, tot.requests AS period_requests, f.errors AS errors, f.p95_ms AS p95_ms,
    f.examples AS examples, g.label AS label,
    arrayFilter(x -> x.1 != '', groupArray((j.metric, j.judged, j.refusals, j.weighted_n, j.sum_w, j.sum_wy,
        j.sum_w2, j.sum_w2y, j.sum_w2y2))) AS metrics
FROM (SELECT * FROM figures WHERE (tenant, feature, group_id) IN (SELECT tenant, feature, group_id FROM top)) AS f
INNER JOIN totals AS tot ON tot.period = f.period
LEFT JOIN (
    SELECT tenant, feature, group_id, argMax(label, updated_at) AS label
    FROM {ddl.table(QUESTION_GROUPS_TABLE)}
    WHERE (tenant, feature, group_id) IN (SELECT tenant, feature, group_id FROM top)
    GROUP BY tenant, feature, group_id
) AS g ON g.tenant = f.tenant AND g.feature = f.feature AND g.group_id = f.group_id
LEFT JOIN judged AS j ON j.tenant = f.tenant AND j.feature = f.feature AND j.group_id = f.group_id
    AND j.period = f.period
GROUP BY tenant, feature, group_id, period, requests, period_requests, errors, p95_ms, examples, label
""",
        params,
    )
