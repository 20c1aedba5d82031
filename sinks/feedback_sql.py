"""The SQL behind end users' feedback (schema v10): figures per feature, each trace's verdict beside the judge's
score, the review queue's disagreements ("thumbs down, judged faithful") and the drift signal's share of negative
feedback.

Feedback is joined to its trace when it is read, never when it is written: it may arrive before its trace, or name
the app's own request id (`ragmon.request_id` on the request span) instead of a trace id. A read therefore:

1. takes the latest value per voter (`feedback FINAL`) received in its window;
2. resolves request ids to traces through the request spans that carry the attribute, over the window widened by
   `REQUEST_LOOKBACK_S` (the request started before its feedback was given) — bounded by the feedback it resolves,
   not a scan of every request;
3. joins the trace's spans for its feature (and production/evaluation traffic). Feedback whose trace is not in the
   store (not yet, or never) is *unmatched*: counted apart, kept until its TTL, matched by any later read once the
   trace arrives.

Values are bound `{name:Type}` parameters; reads run with the engine's tenant filter on every tenant-bearing table
(`Store`), and the joins also match on tenant so one tenant's request id never resolves to another's trace.
"""

from __future__ import annotations

from ragmon.sinks.schema import FEEDBACK_TABLE, TRACE_QUESTIONS_TABLE, Ddl
from ragmon.sinks.traffic import Traffic

# How far before a feedback's window its request may have started (a user answering a day-old chat).
REQUEST_LOOKBACK_S = 86400
REQUEST_ID_ATTRIBUTE = "ragmon.request_id"


# Feedback received in the last `since_s` seconds, and the request spans that may carry its request ids.
_SINCE = "received_at >= now64(3) - toIntervalSecond({since_s:UInt32})"
_SINCE_REQUESTS = f"start_time >= now64(3) - toIntervalSecond({{since_s:UInt32}} + {REQUEST_LOOKBACK_S})"
# The same for [start_ns, end_ns): the drift signal's windows.
BETWEEN = (
    "received_at >= fromUnixTimestamp64Nano({start_ns:Int64}) AND received_at < fromUnixTimestamp64Nano({end_ns:Int64})"
)
BETWEEN_REQUESTS = f"start_time >= fromUnixTimestamp64Nano({{start_ns:Int64}} - {REQUEST_LOOKBACK_S * 10**9})"


def _resolved(ddl: Ddl, where: str, received: str = _SINCE, requests: str = _SINCE_REQUESTS) -> str:
    """Feedback of the window (`received`; the latest per voter; `where` narrows it) with `tid`, the trace it
    belongs to ('' when the trace is not known yet): its trace id, or the trace of the request span carrying its
    request id (request spans that started as `requests` says, the window widened by `REQUEST_LOOKBACK_S`)."""
    spans, feedback = ddl.table("spans"), ddl.table(FEEDBACK_TABLE)
    return (
        "SELECT f.tenant AS tenant, f.name AS name, f.kind AS kind, f.value AS value, f.negative AS negative,\n"
        "    f.user AS user, f.comment AS comment, f.given_at AS given_at, f.received_at AS received_at,\n"
        "    if(f.trace_id != '', f.trace_id, r.resolved) AS tid\n"
        "  FROM (SELECT tenant, trace_id, request_id, name, kind, value, negative, user, comment, given_at,\n"
        f"    received_at FROM {feedback} FINAL WHERE {received}{where}) AS f\n"
        "  LEFT JOIN (\n"
        f"    SELECT tenant, attributes['{REQUEST_ID_ATTRIBUTE}'] AS request_id, min(trace_id) AS resolved\n"
        f"    FROM {spans}\n"
        f"    WHERE {requests} AND stage = 'request'\n"
        f"      AND request_id IN (SELECT request_id FROM {feedback} WHERE request_id != '' AND {received})\n"
        "    GROUP BY tenant, request_id\n"
        "  ) AS r ON r.tenant = f.tenant AND r.request_id = f.request_id AND f.request_id != ''"
    )


def _traces(ddl: Ddl, source: str) -> str:
    """Per trace named by `source`'s `tid`: its feature and release (the first span's that has one) and eval run."""
    return (
        "SELECT tenant, trace_id, argMinIf(feature, start_time, feature != '') AS feature,"
        " argMinIf(release, start_time, release != '') AS release, any(eval_run) AS eval_run\n"
        f"  FROM {ddl.table('spans')} WHERE trace_id IN (SELECT tid FROM {source} WHERE tid != '')\n"
        "  GROUP BY tenant, trace_id"
    )


# What a group of feedback rows `fb` (joined to its traces) counts, after `count() AS feedback`.
_FIGURES = (
    "  countIf(fb.kind = 'thumbs' AND fb.value = 1) AS thumbs_up,\n"
    "  countIf(fb.kind = 'thumbs' AND fb.value = 0) AS thumbs_down,\n"
    "  countIf(fb.kind = 'rating') AS ratings,\n"
    "  if(ratings > 0, avgIf(fb.value, fb.kind = 'rating'), NULL) AS mean_rating,\n"
    "  countIf(fb.kind = 'score') AS scores,\n"
    "  countIf(fb.kind IN ('thumbs', 'rating')) AS verdicts, countIf(fb.negative) AS negative,\n"
    "  if(verdicts > 0, negative / verdicts, NULL) AS negative_share\n"
)


def summary_sql(ddl: Ddl, feature: str | None, traffic: Traffic, params: dict[str, object]) -> str:
    """Per feature and release (`service.version`; unmatched feedback under feature and release ''): how much
    feedback, matched or not, thumbs up and down, ratings and their mean, named scores, and the share of negative
    verdicts (thumbs down or a rating of 1-2) among thumbs and ratings. Feedback on evaluation traffic is left out
    of production's figures (and kept in an eval run's); unmatched feedback counts as production."""
    only = " AND t.feature = {feature:String}" if feature else ""
    traffic_condition = traffic.condition(params, "t.eval_run")
    if traffic.is_production:
        traffic_condition = f"(t.trace_id = '' OR {traffic_condition})"
    else:
        traffic_condition = f"(t.trace_id != '' AND {traffic_condition})"
    return (
        f"WITH fb AS ({_resolved(ddl, '')}),\n"
        f"  t AS ({_traces(ddl, 'fb')})\n"
        "SELECT if(t.trace_id = '', '', t.feature) AS feature, if(t.trace_id = '', '', t.release) AS release,\n"
        "  count() AS feedback,\n"
        "  countIf(t.trace_id != '') AS matched, countIf(t.trace_id = '') AS unmatched,\n"
        f"{_FIGURES}"
        "FROM fb LEFT JOIN t ON t.tenant = fb.tenant AND t.trace_id = fb.tid\n"
        f"WHERE {traffic_condition}{only}\n"
        "GROUP BY feature, release ORDER BY feature, release"
    )


# The judge's latest online verdict per (tenant, trace, metric, version), as the reviewers' agreement reads it.
_LATEST_SCORES = (
    "SELECT tenant, trace_id, metric, judge_version, argMax(value, scored_at) AS score,"
    " argMax(status, scored_at) AS score_status FROM {scores} FINAL WHERE run_name = ''"
    " GROUP BY tenant, trace_id, metric, judge_version"
)


def verdicts_sql(ddl: Ddl) -> str:
    """Per matched trace, its end users' verdict: how many thumbs and ratings, how many negative."""
    verdict_kinds = " AND kind IN ('thumbs', 'rating')"
    return (
        "SELECT tenant, tid AS trace_id, count() AS verdicts, countIf(negative) AS negative\n"
        f"FROM ({_resolved(ddl, verdict_kinds)})\n"
        "WHERE tid != '' GROUP BY tenant, trace_id"
    )


def trace_feedback_sql(ddl: Ddl) -> str:
    """Params: trace_ids, since_s. Per trace of `trace_ids`, its end users' feedback received in the last `since_s`
    seconds (the latest per voter): thumbs up and down, ratings and their mean, named scores, how many verdicts
    are negative, and the latest comment — what a conversation's turn shows beside the judge's scores."""
    only = " AND (trace_id IN {trace_ids:Array(String)} OR request_id != '')"
    return (
        "SELECT tid AS trace_id, countIf(kind = 'thumbs' AND value = 1) AS thumbs_up,\n"
        "  countIf(kind = 'thumbs' AND value = 0) AS thumbs_down, countIf(kind = 'rating') AS ratings,\n"
        "  if(ratings > 0, avgIf(value, kind = 'rating'), NULL) AS mean_rating, countIf(kind = 'score') AS scores,\n"
        "  countIf(kind IN ('thumbs', 'rating')) AS verdicts, countIf(negative) AS negative,\n"
        "  argMaxIf(comment, received_at, comment != '') AS comment\n"
        f"FROM ({_resolved(ddl, only)})\n"
        "WHERE tid IN {trace_ids:Array(String)} GROUP BY trace_id"
    )


def feedback_scores_sql(ddl: Ddl, *, one_version: bool) -> str:
    """Each trace with end-user verdicts (thumbs, ratings) of the last `since_s` seconds beside the judge's latest
    online score of it, per metric and judge version. `label` is the users' reading: true (good) when fewer than
    half of the trace's verdicts are negative."""
    version = " AND s.judge_version = {judge_version:String}" if one_version else ""
    return (
        "SELECT s.metric AS metric, s.judge_version AS judge_version, v.trace_id AS trace_id,"
        " v.verdicts AS verdicts, v.negative AS negative, v.negative * 2 < v.verdicts AS label,"
        " s.score AS score, s.score_status AS score_status\n"
        f"FROM ({verdicts_sql(ddl)}) AS v\n"
        f"INNER JOIN ({_LATEST_SCORES.format(scores=ddl.table('scores'))}) AS s\n"
        "ON v.tenant = s.tenant AND v.trace_id = s.trace_id\n"
        f"WHERE 1{version}\n"
        "ORDER BY metric, judge_version, trace_id"
    )


def disagreements_sql(ddl: Ddl) -> str:
    """The review queue's "thumbs down, judged faithful": kept traces of the last `since_s` seconds whose users'
    verdict is negative (most of it) while the judge's latest score of `metric` passes (>= `threshold`), newest
    feedback first, at most `limit`. Either the judge missed something or the answer fails in a way no judge metric
    asks about (right but useless): the traces to read first."""
    return (
        "SELECT s.trace_id AS trace_id, p.feature AS feature, p.start_time AS start_time,"
        " substring(p.question, 1, 240) AS question, s.score AS score, s.judge_version AS version,"
        " v.verdicts AS verdicts, v.negative AS negative\n"
        f"FROM ({verdicts_sql(ddl)}) AS v\n"
        f"INNER JOIN ({_LATEST_SCORES.format(scores=ddl.table('scores'))}) AS s\n"
        "  ON v.tenant = s.tenant AND v.trace_id = s.trace_id\n"
        "INNER JOIN (SELECT tenant, trace_id, feature, start_time, question"
        f" FROM {ddl.table('payloads')} FINAL WHERE eval_run = '') AS p\n"
        "  ON p.tenant = s.tenant AND p.trace_id = s.trace_id\n"
        "WHERE s.metric = {metric:String} AND s.score_status = 'ok' AND s.score >= {threshold:Float64}\n"
        "  AND v.negative * 2 >= v.verdicts\n"
        "ORDER BY p.start_time DESC, trace_id LIMIT {limit:UInt32}"
    )


def negative_share_scopes_sql(ddl: Ddl, traffic: Traffic, params: dict[str, object]) -> str:
    """(tenant, feature, '' AS stage) with matched thumbs or ratings received in [start_ns, end_ns)."""
    verdicts = _resolved(ddl, " AND kind IN ('thumbs', 'rating')", BETWEEN, BETWEEN_REQUESTS)
    return (
        f"WITH fb AS ({verdicts}), t AS ({_traces(ddl, 'fb')})\n"
        "SELECT DISTINCT t.tenant AS tenant, t.feature AS feature, '' AS stage\n"
        "FROM fb INNER JOIN t ON t.tenant = fb.tenant AND t.trace_id = fb.tid\n"
        f"WHERE {traffic.condition(params, 't.eval_run')}"
    )


def negative_share_series_sql(ddl: Ddl, traffic: Traffic, params: dict[str, object], examples: int) -> str:
    """Per window of `received_at` (`{step_ns}` wide from `{start_ns}`), over the scope's ({tenant}, {feature})
    matched thumbs and ratings: the share that is negative (value), how many (count) and up to `examples` traces
    with negative feedback (trace_ids)."""
    verdicts = _resolved(
        ddl, " AND kind IN ('thumbs', 'rating') AND tenant = {tenant:String}", BETWEEN, BETWEEN_REQUESTS
    )
    return (
        f"WITH fb AS ({verdicts}), t AS ({_traces(ddl, 'fb')})\n"
        "SELECT intDiv(toUnixTimestamp64Nano(fb.received_at) - {start_ns:Int64}, {step_ns:Int64}) AS window,\n"
        "  countIf(fb.negative) / count() AS value, count() AS count,\n"
        f"  arraySlice(groupUniqArrayIf(fb.tid, fb.negative), 1, {int(examples)}) AS trace_ids\n"
        "FROM fb INNER JOIN t ON t.tenant = fb.tenant AND t.trace_id = fb.tid\n"
        f"WHERE t.feature = {{feature:String}} AND {traffic.condition(params, 't.eval_run')}\n"
        "GROUP BY window ORDER BY window"
    )


def by_question_sql(ddl: Ddl, feature: str | None, traffic: Traffic, params: dict[str, object]) -> str:
    """Per feature and recurring question group (`trace_questions`, joined by trace id: only feedback whose trace
    the grouper has placed), the same figures as `summary_sql`, with the group's question as asked closest to its
    representative; the groups with the most negative verdicts first, at most `limit`."""
    only = " AND q.feature = {feature:String}" if feature else ""
    traffic_condition = traffic.condition(params, "q.eval_run")
    questions = ddl.table(TRACE_QUESTIONS_TABLE)
    return (
        f"WITH fb AS ({_resolved(ddl, '')}),\n"
        "  q AS (SELECT tenant, trace_id, any(feature) AS feature, any(eval_run) AS eval_run,"
        " any(group_id) AS group_id, any(question) AS question, any(similarity) AS similarity\n"
        f"    FROM {questions} WHERE trace_id IN (SELECT tid FROM fb WHERE tid != '') GROUP BY tenant, trace_id)\n"
        "SELECT q.feature AS feature, q.group_id AS group_id, argMax(q.question, q.similarity) AS question,\n"
        "  uniqExact(q.trace_id) AS traces, count() AS feedback,\n"
        f"{_FIGURES}"
        "FROM fb INNER JOIN q ON q.tenant = fb.tenant AND q.trace_id = fb.tid\n"
        f"WHERE {traffic_condition}{only}\n"
        "GROUP BY feature, group_id ORDER BY negative DESC, feedback DESC, feature, group_id LIMIT {limit:UInt32}"
    )
