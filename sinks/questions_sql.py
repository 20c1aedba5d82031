"""SQL of the recurring questions: each decided trace's question and what the grouping needs beside it
(`trace_questions_sql`, read by the agent's question stage), the groups held at start (`question_groups_sql`), and
the view of the most common questions over a window (`question_figures_sql`, then `question_details_sql` for
the groups it ranks first).

A range's traces are those whose root span was stored in it: a root is stored last (it ends after its children),
so a trace is read once, when it is whole. Its spans and captured text are read from `context_from` — the oldest
range the sampler still held a trace in when it took this one, so every earlier span of these traces is at or
after it — to `context_to` (what is stored). The question is `trace_question_sql`'s, the payload copy's own.
"""

from __future__ import annotations

from typing import Any

from ragmon.sinks import trace_question_sql as Q
from ragmon.sinks.quality import weighted_sums
from ragmon.sinks.schema import (
    CONTENT_TABLE,
    DURATION_STATE,
    QUESTION_EXAMPLES,
    QUESTION_GROUPS_TABLE,
    QUESTION_HOUR_ROLLUP_TABLE,
    TRACE_HASH,
    TRACE_QUESTIONS_TABLE,
    Ddl,
)
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


def whole_hours(start_s: int, end_s: int) -> tuple[int, int]:
    """[first, last) clock hours wholly inside [start_s, end_s); first == last when there is none."""
    first = -(-int(start_s) // 3600) * 3600
    return first, max(first, int(end_s) // 3600 * 3600)


def _view_params(start_s: int, end_s: int, feature: str | None, traffic: Traffic) -> tuple[dict[str, Any], list[str]]:
    """The window [start_s, end_s) and the one of equal length before it (`prev_s`), and the conditions every
    part of the view shares (traffic, feature) over `trace_questions` and its hourly rollup."""
    params: dict[str, Any] = {
        "start_s": int(start_s),
        "end_s": int(end_s),
        "prev_s": int(start_s) - (int(end_s) - int(start_s)),
    }
    shared = [traffic.condition(params)]
    if feature is not None:
        shared.append("feature = {feature:String}")
        params["feature"] = feature
    return params, shared


def question_figures_sql(
    ddl: Ddl, start_s: int, end_s: int, feature: str | None, traffic: Traffic = PRODUCTION
) -> tuple[str, dict[str, Any]]:
    """Every group's requests, errors and duration sketch over [start_s, end_s) (`period` 1) and the window of
    equal length before it (0): each period's whole hours from `trace_questions_1h`, its edges from
    `trace_questions` itself (exact to the second). A few hundred rows per feature; the caller ranks them."""
    params, shared = _view_params(start_s, end_s, feature, traffic)
    edges = []
    for p, (a, b) in enumerate(((params["prev_s"], params["start_s"]), (params["start_s"], params["end_s"]))):
        params[f"h{p}0"], params[f"h{p}1"] = whole_hours(a, b)
        edges.append(f"NOT (start_time >= toDateTime64({{h{p}0:Int64}}, 9)"
                     f" AND start_time < toDateTime64({{h{p}1:Int64}}, 9))")  # fmt: skip
    hours = " OR ".join(f"(hour >= toDateTime({{h{p}0:Int64}}) AND hour < toDateTime({{h{p}1:Int64}}))" for p in (0, 1))
    merge_state = DURATION_STATE.replace("(", "State(", 1)
    period = "toUInt8({column} >= toDateTime64({{start_s:Int64}}, 9))"
    return (
        f"""
SELECT tenant, feature, group_id, period, sum(requests) AS requests, sum(errors) AS errors,
    {DURATION_STATE.replace("(", "Merge(", 1)}(duration_q) AS duration_quantiles
FROM (
    SELECT tenant, feature, group_id, {period.format(column="hour")} AS period, requests, failed AS errors,
        duration_q
    FROM {ddl.table(QUESTION_HOUR_ROLLUP_TABLE)}
    WHERE ({hours}) AND {" AND ".join(shared)}
    UNION ALL
    -- the edges: a few partial hours of rows (a range grouped again after a crash counts until merges collapse it)
    SELECT tenant, feature, group_id, {period.format(column="start_time")} AS period, count() AS requests,
        sum(failed) AS errors, {merge_state}(duration_ms) AS duration_q
    FROM {ddl.table(TRACE_QUESTIONS_TABLE)}
    WHERE start_time >= toDateTime64({{prev_s:Int64}}, 9) AND start_time < toDateTime64({{end_s:Int64}}, 9)
        AND {" AND ".join(edges)} AND {" AND ".join(shared)}
    GROUP BY tenant, feature, group_id, period
)
GROUP BY tenant, feature, group_id, period""",
        params,
    )


def question_details_sql(
    ddl: Ddl, start_s: int, end_s: int, feature: str | None, groups: list[str], traffic: Traffic = PRODUCTION
) -> tuple[str, dict[str, Any]]:
    """For the groups ranked first (`groups`, their ids): each one's label and up to three askings from the
    window (`period` 1, `metric` ''), and per period and metric the judged quality weighted by
    inclusion probability (`quality.weighted_sums`), the refusals and up to ten judged trace ids (in `examples`:
    kept traces, whose text and scores the trace view shows). Judged quality starts from the scores (a
    small kept share) and finds their traces' groups by `trace_hash`, so it never builds a set of every trace."""
    params, shared = _view_params(start_s, end_s, feature, traffic)
    params["groups"] = list(groups)
    params["h0"], params["h1"] = whole_hours(start_s, end_s)
    groups_shared = " AND ".join(["group_id IN {groups:Array(String)}", *shared])
    # a trace is scored after it began: scores older than the windows (an hour's clock skew aside) are not read
    params["scored_from"] = params["prev_s"] - 3600
    scores_where = traffic.scores_condition(params, ddl.table("payloads"))
    scored = "run_name = '' AND scored_at >= toDateTime64({scored_from:Int64}, 3)"
    return (
        f"""
SELECT h.tenant AS tenant, h.feature AS feature, h.group_id AS group_id, toUInt8(1) AS period, '' AS metric,
    groupUniqArrayMerge({QUESTION_EXAMPLES})(h.examples) AS examples, any(g.label) AS label,
    toUInt64(0) AS judged, toUInt64(0) AS refusals, toUInt64(0) AS weighted_n, 0. AS sum_w, 0. AS sum_wy,
    0. AS sum_w2, 0. AS sum_w2y, 0. AS sum_w2y2
FROM (
    -- askings of the window only: its whole hours' from the rollup, its edges' from the rows
    SELECT tenant, feature, group_id, examples FROM {ddl.table(QUESTION_HOUR_ROLLUP_TABLE)}
    WHERE hour >= toDateTime({{h0:Int64}}) AND hour < toDateTime({{h1:Int64}}) AND {groups_shared}
    UNION ALL
    SELECT tenant, feature, group_id, groupUniqArrayState({QUESTION_EXAMPLES})(question) AS examples
    FROM {ddl.table(TRACE_QUESTIONS_TABLE)}
    WHERE start_time >= toDateTime64({{start_s:Int64}}, 9) AND start_time < toDateTime64({{end_s:Int64}}, 9)
        AND NOT (start_time >= toDateTime64({{h0:Int64}}, 9) AND start_time < toDateTime64({{h1:Int64}}, 9))
        AND {groups_shared}
    GROUP BY tenant, feature, group_id
) AS h
LEFT JOIN (
    SELECT tenant, feature, group_id, argMax(label, updated_at) AS label
    FROM {ddl.table(QUESTION_GROUPS_TABLE)}
    WHERE group_id IN {{groups:Array(String)}}
    GROUP BY tenant, feature, group_id
) AS g ON g.tenant = h.tenant AND g.feature = h.feature AND g.group_id = h.group_id
GROUP BY tenant, feature, group_id
UNION ALL
SELECT t.tenant AS tenant, t.feature AS feature, t.group_id AS group_id, t.period AS period, s.metric AS metric,
    groupUniqArray(10)(t.trace_id) AS examples, '' AS label, count() AS judged,
    countIf(has(s.flags, 'refusal')) AS refusals,
    {weighted_sums("s.")}
FROM (
    SELECT tenant, trace_id, feature, group_id, toUInt8(start_time >= toDateTime64({{start_s:Int64}}, 9)) AS period
    FROM {ddl.table(TRACE_QUESTIONS_TABLE)}
    -- first the scored traces' numbers (one column), then the rest of their rows only
    PREWHERE trace_hash IN (SELECT {TRACE_HASH} FROM {ddl.table("scores")} WHERE {scored})
    WHERE start_time >= toDateTime64({{prev_s:Int64}}, 9) AND start_time < toDateTime64({{end_s:Int64}}, 9)
        AND {groups_shared}
    LIMIT 1 BY tenant, trace_id  -- a range grouped again after a crash, until merges collapse it
) AS t
INNER JOIN (
    SELECT tenant, trace_id, metric, value, status, flags, inclusion_probability
    FROM {ddl.table("scores")} FINAL
    WHERE {scored} AND {scores_where}
) AS s ON s.tenant = t.tenant AND s.trace_id = t.trace_id
GROUP BY tenant, feature, group_id, period, metric""",
        params,
    )
