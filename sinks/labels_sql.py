"""The SQL behind people's labels (schema v8): is a trace this tenant's to label, the review queue sampled across the
judge's scores, a trace's labels, and each label beside the judge's score of the same trace and metric.

Values are bound `{name:Type}` parameters. Reads run with the tenant filter the engine applies to every
tenant-bearing table (`Store`), so none of these texts names a tenant except the write-side check, which must
answer for one tenant whatever keys are configured.

Why the queue is stratified. Labels drawn from low scores only would meet a judge that is mostly right there and
say nothing of its false passes; drawn from all traces, a judge that passes 95 % of them would be labelled on
passes only. Each score bin ([0, 1/bins), …, [(bins-1)/bins, 1]) offers the same number of traces, picked in a
fixed pseudo-random order (a hash of the trace id, so every reviewer sees the same ones and their labels overlap),
skipping those the reviewer already labelled. Agreement figures over such labels describe the judge across its
range, not weighted by how often production lands in each bin.
"""

from __future__ import annotations

from ragmon.sinks.schema import LABELS_TABLE, Ddl

# The judge's latest online verdict per (tenant, trace, metric[, version]): a re-judged trace counts once.
_LATEST_SCORES = (
    "SELECT tenant, trace_id, metric, judge_version, argMax(value, scored_at) AS score,"
    " argMax(status, scored_at) AS score_status FROM {scores} FINAL WHERE run_name = ''"
    " GROUP BY tenant, trace_id, metric, judge_version"
)


def kept_trace_sql(ddl: Ddl) -> str:
    """1 when `tenant` has a kept trace `trace_id` (a payload row): only those can be labelled."""
    return (
        f"SELECT count() > 0 AS kept FROM {ddl.table('payloads')}"
        " WHERE tenant = {tenant:String} AND trace_id = {trace_id:String}"
    )


def review_queue_sql(ddl: Ddl) -> str:
    """Up to `per_bin` production traces per score bin of `metric`, kept in the last `since_s` seconds, that
    `reviewer` has not labelled for that metric; with each bin's size (scored traces in the window) and how
    many of them the reviewer has labelled."""
    scores = (
        "SELECT tenant, trace_id, argMax(value, scored_at) AS score, argMax(judge_version, scored_at) AS version"
        f" FROM {ddl.table('scores')} FINAL"
        " WHERE run_name = '' AND metric = {metric:String} AND status = 'ok' AND value IS NOT NULL"
        " GROUP BY tenant, trace_id"
    )
    mine = (
        f"SELECT tenant, trace_id FROM {ddl.table(LABELS_TABLE)} FINAL"
        " WHERE metric = {metric:String} AND reviewer = {reviewer:String}"
    )
    return (
        "SELECT trace_id, feature, start_time, question, score, version, bin, in_bin, labelled_in_bin FROM (\n"
        "  SELECT s.trace_id AS trace_id, p.feature AS feature, p.start_time AS start_time,\n"
        "    substring(p.question, 1, 240) AS question, s.score AS score, s.version AS version,\n"
        "    least(toUInt32(floor(greatest(s.score, 0) * {bins:UInt32})), {bins:UInt32} - 1) AS bin,\n"
        "    (s.tenant, s.trace_id) IN (" + mine + ") AS labelled,\n"
        "    count() OVER (PARTITION BY bin) AS in_bin,\n"
        "    countIf(labelled) OVER (PARTITION BY bin) AS labelled_in_bin,\n"
        "    row_number() OVER (PARTITION BY bin, labelled ORDER BY cityHash64(s.trace_id), s.trace_id) AS rank\n"
        f"  FROM ({scores}) AS s\n"
        "  INNER JOIN (SELECT tenant, trace_id, feature, start_time, question"
        f" FROM {ddl.table('payloads')} FINAL\n"
        "    WHERE eval_run = '' AND start_time >= now64(3) - toIntervalSecond({since_s:UInt32})) AS p\n"
        "  ON s.tenant = p.tenant AND s.trace_id = p.trace_id\n"
        ") WHERE NOT labelled AND rank <= {per_bin:UInt32}\n"
        "ORDER BY bin, rank"
    )


def reviewer_label_count_sql(ddl: Ddl) -> str:
    """How many traces `reviewer` has labelled for `metric` (current labels)."""
    return (
        f"SELECT count() AS n FROM {ddl.table(LABELS_TABLE)} FINAL"
        " WHERE metric = {metric:String} AND reviewer = {reviewer:String}"
    )


def trace_labels_sql(ddl: Ddl) -> str:
    """The current labels of one trace, every metric and reviewer."""
    return (
        "SELECT metric, reviewer, label, claim_labels, note, judge_versions, labelled_at"
        f" FROM {ddl.table(LABELS_TABLE)} FINAL WHERE trace_id = {{trace_id:String}}"
        " ORDER BY metric, reviewer"
    )


def labelled_scores_sql(ddl: Ddl, *, one_version: bool) -> str:
    """Each current label of the last `since_s` seconds beside the judge's latest online score of the same trace
    and metric, one row per judge version that scored it (`one_version`: only `{judge_version:String}`'s). A
    label no judge scored has no row: there is nothing to agree with."""
    version = " AND s.judge_version = {judge_version:String}" if one_version else ""
    return (
        "SELECT l.metric AS metric, s.judge_version AS judge_version, l.trace_id AS trace_id,"
        " l.reviewer AS reviewer, l.label AS label, s.score AS score, s.score_status AS score_status\n"
        f"FROM (SELECT tenant, trace_id, metric, reviewer, label FROM {ddl.table(LABELS_TABLE)} FINAL\n"
        "  WHERE labelled_at >= now64(3) - toIntervalSecond({since_s:UInt32})) AS l\n"
        f"INNER JOIN ({_LATEST_SCORES.format(scores=ddl.table('scores'))}) AS s\n"
        "ON l.tenant = s.tenant AND l.trace_id = s.trace_id AND l.metric = s.metric\n"
        f"WHERE 1{version}\n"
        "ORDER BY metric, judge_version, trace_id, reviewer"
    )
