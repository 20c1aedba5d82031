"""SQL of conversations: the traces that share a session, as turns (`ragmon.conversation` says what a
conversation and a follow-up are).

A trace's session is its root span's when the root names one, else any of its spans' (OTel GenAI puts
`gen_ai.conversation.id` on the model call, not the app's root). Turns come from `spans` — every trace has its numbers
there, kept or not — and their text from `payloads` (kept traces). Reads that need earlier turns' text before the
sampler copied it (the judge, the sampler's own copy) fall back to `span_content`, which holds every trace's text
for a day (`Retention.content_hours`).

Values are `{name:Type}` parameters. `spans` and `span_content` may hold a re-sent span twice: collapsed with
`LIMIT 1 BY` before counting. Reads for a caller run under the tenant filter (`additional_table_filters`); the
judge's and the sampler's name their tenant in the SQL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragmon.sinks import content_sql as C
from ragmon.sinks.backend import quote_string as quote
from ragmon.sinks.dialects import ragmon_names as RAGMON
from ragmon.sinks.schema import CONTENT_TABLE, Ddl

from ragmon.conversation import FOLLOW_UP_MAX_WORDS, FOLLOW_UP_PATTERN

_ROOT = "parent_span_id = ''"
# One session per trace: the root's when it names one, else any span's.
_TRACE_SESSION = (
    f"if(countIf({_ROOT} AND session != '') > 0, anyIf(session, {_ROOT} AND session != ''),"
    " anyIf(session, session != ''))"
)
# The request's latency: the root span's, else the trace's extent (a root not arrived yet).
_LATENCY_MS = (
    f"if(countIf({_ROOT}) > 0, anyIf(duration_ms, {_ROOT}), (max(toUnixTimestamp64Micro(start_time)"
    " + toInt64(duration_ms * 1000)) - min(toUnixTimestamp64Micro(start_time))) / 1000)"
)


def follow_up_condition(question: str) -> str:
    """SQL: `ragmon.conversation.is_follow_up` of the String expression `question`."""
    words = f"length(splitByWhitespace({question}))"
    pattern = quote(FOLLOW_UP_PATTERN)
    return f"({words} > 0 AND ({words} <= {FOLLOW_UP_MAX_WORDS} OR match(lower({question}), {pattern})))"


def session_of_trace_sql(ddl: Ddl) -> str:
    """Params: trace_id. The session of a trace ('' when it names none), and when it started."""
    return f"""
SELECT {_TRACE_SESSION} AS session, min(start_time) AS started
FROM {ddl.table("spans")}
WHERE trace_id = {{trace_id:String}}"""


def turns_sql(ddl: Ddl, *, of_session: bool = True) -> str:
    """Params: session (or with `of_session` false, trace_ids), start_s (Int64), limit. A session's traces (or
    those traces) since `start_s`, oldest first: one row per trace with its start, latency, error count, feature
    and user."""
    traces = (
        f"(SELECT trace_id FROM {ddl.table('spans')}"
        " WHERE session = {session:String} AND start_time >= toDateTime({start_s:Int64}))"
        if of_session
        else "{trace_ids:Array(String)}"
    )
    return f"""
SELECT tenant, trace_id, min(start_time) AS started, {_LATENCY_MS} AS latency_ms,
    countIf(status = 'error') AS errors, anyIf(error_type, error_type != '') AS error_type,
    if(countIf({_ROOT}) > 0, anyIf(feature, {_ROOT}), anyIf(feature, feature != '')) AS feature,
    anyIf(user, user != '') AS user, anyIf(eval_run, eval_run != '') AS eval_run
FROM (
    SELECT tenant, trace_id, span_id, parent_span_id, start_time, duration_ms, status, error_type, feature, user,
        eval_run
    FROM {ddl.table("spans")}
    WHERE start_time >= toDateTime({{start_s:Int64}})
        AND trace_id IN {traces}
    LIMIT 1 BY tenant, trace_id, span_id
)
GROUP BY tenant, trace_id
ORDER BY started, trace_id
LIMIT {{limit:UInt32}}"""


def turn_texts_sql(ddl: Ddl) -> str:
    """Params: trace_ids. The kept turns' question and answer, and why they were kept (the latest copy)."""
    return f"""
SELECT trace_id, question, answer, sampling_reasons
FROM {ddl.table("payloads")} FINAL
WHERE trace_id IN {{trace_ids:Array(String)}}"""


def turn_scores_sql(ddl: Ddl) -> str:
    """Params: trace_ids. The latest online score of each (trace, metric), with its status and flags."""
    return f"""
SELECT trace_id, metric, argMax(value, scored_at) AS value, argMax(status, scored_at) AS status,
    argMax(flags, scored_at) AS flags, argMax(judge_version, scored_at) AS judge_version
FROM {ddl.table("scores")} FINAL
WHERE trace_id IN {{trace_ids:Array(String)}} AND run_name = ''
GROUP BY trace_id, metric"""


def recent_sessions_sql(ddl: Ddl, traffic_condition: str) -> str:
    """Params: start_s, limit, and the traffic condition's. The sessions with a turn since `start_s`, most recently
    active first: turns, first and last start, errors, and the first turn's trace."""
    return f"""
SELECT tenant, session, count() AS turns, min(started) AS first_start, max(started) AS last_start,
    sum(errors > 0) AS failed_turns, argMin(trace_id, started) AS first_trace, any(feature) AS feature
FROM (
    SELECT tenant, trace_id, {_TRACE_SESSION} AS session, min(start_time) AS started,
        countIf(status = 'error') AS errors, anyIf(feature, feature != '') AS feature
    FROM (
        SELECT tenant, trace_id, span_id, parent_span_id, session, start_time, status, feature
        FROM {ddl.table("spans")}
        WHERE start_time >= toDateTime({{start_s:Int64}}) AND {traffic_condition}
            AND trace_id IN (SELECT trace_id FROM {ddl.table("spans")}
                WHERE session != '' AND start_time >= toDateTime({{start_s:Int64}}))
        LIMIT 1 BY tenant, trace_id, span_id
    )
    GROUP BY tenant, trace_id
)
WHERE session != ''
GROUP BY tenant, session
ORDER BY last_start DESC, session
LIMIT {{limit:UInt32}}"""


def _captured_texts(ddl: Ddl, traces: str) -> str:
    """Per (tenant, trace) of the subquery `traces` (tenant, trace_id): the question and answer from the captured
    text still in `span_content` — ragmon's own names, else the app's outermost chain span's input and output (an
    OpenInference or OpenLLMetry app) — as the payload copy reads them first (`sampler_sql.copy_payloads_sql`)."""
    question, answer = quote(RAGMON.QUESTION), quote(RAGMON.ANSWER)
    return f"""
    SELECT tenant, trace_id,
        if(direct_question != '', direct_question, {C.input_text("chain_content")}) AS question,
        if(direct_answer != '', direct_answer, {C.output_value_text("chain_content")}) AS answer
    FROM (
        SELECT tenant, trace_id,
            argMinIf(content[{question}], start_time, mapContains(content, {question})) AS direct_question,
            argMaxIf(content[{answer}], start_time, mapContains(content, {answer})) AS direct_answer,
            argMinIf(content, start_time, stage IN ('request', 'other') AND {C.has_input_or_output("content")})
                AS chain_content
        FROM (
            SELECT tenant, trace_id, span_id, stage, start_time, content
            FROM {ddl.table(CONTENT_TABLE)}
            WHERE (tenant, trace_id) IN ({traces})
            LIMIT 1 BY tenant, trace_id, span_id
        )
        GROUP BY tenant, trace_id
    )"""


# The traces whose earlier turns are read, as parameters: aligned arrays of tenant, trace id, session and start
# (unix nanoseconds), taken from their payloads (`sessioned_payloads_sql`) — never from a scan of `spans`.
_TARGETS = (
    "SELECT t.1 AS tenant, t.2 AS trace_id, t.3 AS session, fromUnixTimestamp64Nano(t.4) AS started FROM (SELECT"
    " arrayJoin(arrayZip({t_tenants:Array(String)}, {t_ids:Array(String)}, {t_sessions:Array(String)},"
    " {t_started:Array(Int64)})) AS t)"
)


def target_params(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`sessioned_payloads_sql` rows as the `_TARGETS` parameters."""
    return {
        "t_tenants": [str(r["tenant"]) for r in rows],
        "t_ids": [str(r["trace_id"]) for r in rows],
        "t_sessions": [str(r["session"]) for r in rows],
        "t_started": [int(r["started_ns"]) for r in rows],
    }


def sessioned_payloads_sql(ddl: Ddl, *, follow_ups_only: bool) -> str:
    """Params: tenants, trace_ids (JSON arrays, aligned). Those traces' payloads that name a session (v10): tenant,
    trace_id, session, start (unix ns) — with `follow_ups_only`, only those whose question is a follow-up
    (`ragmon.conversation`). What the earlier-turn reads start from; empty, they are not run at all."""
    pairs = (
        "SELECT arrayJoin(arrayZip(JSONExtract({tenants:String}, 'Array(String)'),"
        " JSONExtract({trace_ids:String}, 'Array(String)')))"
    )
    follow_up = f" AND {follow_up_condition('question')}" if follow_ups_only else ""
    return f"""
SELECT tenant, trace_id, session, toUnixTimestamp64Nano(start_time) AS started_ns
FROM {ddl.table("payloads")} FINAL
WHERE (tenant, trace_id) IN ({pairs}) AND session != ''{follow_up}"""


def _earlier(ddl: Ddl) -> str:
    """(target, tenant, trace_id, started, first_seq, turn) of the last {turns:UInt32} turns before each target
    (`_TARGETS`), within {window_s:UInt32} seconds before it, newest first (turn 1 is the one just before). The
    session's traces are found through the spans' session index, from the earliest target's start less the window."""
    return f"""
    targets AS ({_TARGETS}),
    session_traces AS (
        SELECT tenant, trace_id, any(s.session) AS trace_session, min(s.start_time) AS started,
            min(s.ingest_seq) AS first_seq
        FROM {ddl.table("spans")} AS s
        WHERE s.session IN {{t_sessions:Array(String)}}
            AND s.start_time >= fromUnixTimestamp64Nano(arrayMin({{t_started:Array(Int64)}}))
                - toIntervalSecond({{window_s:UInt32}})
        GROUP BY tenant, trace_id
    ),
    earlier AS (
        SELECT t.trace_id AS target, s.tenant AS tenant, s.trace_id AS trace_id, s.started AS started,
            s.first_seq AS first_seq,
            row_number() OVER (PARTITION BY t.tenant, t.trace_id ORDER BY s.started DESC, s.trace_id) AS turn
        FROM targets AS t
        INNER JOIN session_traces AS s ON s.tenant = t.tenant AND s.trace_session = t.session
        WHERE s.started < t.started AND s.started >= t.started - toIntervalSecond({{window_s:UInt32}})
    ),
    wanted AS (SELECT * FROM earlier WHERE turn <= {{turns:UInt32}})"""


def earlier_turns_sql(ddl: Ddl) -> str:
    """Params: the targets (`_TARGETS`: traces with a session), turns, window_s. For each target, the question and
    answer of its last `turns` earlier turns (within `window_s` before it), oldest first: from the turn's payload,
    else from its captured text while `span_content` holds it. What the judge is given for a follow-up."""
    return f"""
WITH {_earlier(ddl)},
captured AS ({_captured_texts(ddl, "SELECT tenant, trace_id FROM wanted")}
),
kept AS (
    SELECT tenant, trace_id, question, answer FROM {ddl.table("payloads")} FINAL
    WHERE (tenant, trace_id) IN (SELECT tenant, trace_id FROM wanted)
)
SELECT w.target AS target, w.trace_id AS trace_id, w.turn AS turn,
    if(k.trace_id != '', k.question, c.question) AS question, if(k.trace_id != '', k.answer, c.answer) AS answer
FROM wanted AS w
LEFT JOIN kept AS k ON k.tenant = w.tenant AND k.trace_id = w.trace_id
LEFT JOIN captured AS c ON c.tenant = w.tenant AND c.trace_id = w.trace_id
ORDER BY target, turn DESC"""


def conversation_turns_to_copy_sql(ddl: Ddl) -> str:
    """Params: the targets (`_TARGETS`: kept follow-ups with a session), turns, window_s. Their earlier turns not
    kept themselves: what the sampler copies beside them (`Store.copy_conversation_turns`)."""
    return f"""
WITH {_earlier(ddl)}
SELECT tenant, trace_id, min(first_seq) AS first_ingest_seq FROM wanted
WHERE (tenant, trace_id) NOT IN (SELECT tenant, trace_id FROM {ddl.table("payloads")}
    WHERE (tenant, trace_id) IN (SELECT tenant, trace_id FROM wanted))
GROUP BY tenant, trace_id"""
