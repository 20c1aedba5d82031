"""The SQL of a release comparison (`ragmon compare`, the canary analysis): bulk sums in ClickHouse, one row per
release (and stage, metric or question group), which `ragmon.sinks.compare` turns into deltas with intervals.

Every read is of production traffic (`eval_run = ''`) of one feature, and takes each release's traffic in its own
window (`Windows`): a span counts for the release it carries (`spans.release`), a judged score and a question for
their trace's (the payload's, `trace_questions.release`). Parameters are bound (`{name:Type}`); the only text
formatted into the SQL is numbers this module computed (quantile levels) and the tables' names.

- `releases_sql`: each release of the feature, its first and last span and how many requests (root spans) it had;
- `stage_sql`: per release and part (a root span is the request, any other span its stage): spans, errors,
  duration sums and the retrieval signals' sums;
- `request_sql`: per release, per-request sums over each trace's spans (failed, cost, tokens);
- `quantile_sql`: the order statistics of each (release, part)'s durations at the ranks `intervals.quantile_ranks`
  chose (`quantileExact(l)` is the value at 0-based index ⌊l·n⌋, so a rank k is asked as l = (k − ½) / n);
- `quality_sql`: judged scores per release and metric, weighted by inclusion probability;
- `group_sql`: per question group and release: traces, failed traces, example questions and trace ids, and the
  judged scores and refusals of its traces;
- `group_documents_sql`: per question group, release and retrieved document (its paragraph or source where the app
  said so, else its chunk id): how many of the group's traces retrieved it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# A root span is the request; every other span counts under its stage.
PART = "if(parent_span_id = '', 'request', stage)"
# A retrieved document by the label that survives re-chunking (its paragraph or source) where the app gave one.
DOCUMENTS = "arrayDistinct(arrayMap((i, s) -> if(s != '', s, i), retrieved_ids, retrieved_sources))"


@dataclass(frozen=True, slots=True)
class Windows:
    """The two releases and the span of traffic each is read over, [start_ns, end_ns) in span start time."""

    baseline: str
    candidate: str
    baseline_start_ns: int
    baseline_end_ns: int
    candidate_start_ns: int
    candidate_end_ns: int

    def params(self, feature: str) -> dict[str, Any]:
        return {
            "feature": feature,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "b_start": self.baseline_start_ns,
            "b_end": self.baseline_end_ns,
            "c_start": self.candidate_start_ns,
            "c_end": self.candidate_end_ns,
        }

    def condition(self, release: str = "release", time: str = "start_time") -> str:
        """Rows of either release inside that release's window."""

        def inside(side: str, start: str, end: str) -> str:
            return (
                f"({release} = {{{side}:String}} AND {time} >= fromUnixTimestamp64Nano({{{start}:Int64}})"
                f" AND {time} < fromUnixTimestamp64Nano({{{end}:Int64}}))"
            )

        # the span of both windows first: a range on the sorting key's time column, so whole granules are skipped
        # (the OR of two releases' windows alone is not used for that)
        both = (
            f"{time} >= fromUnixTimestamp64Nano(least({{b_start:Int64}}, {{c_start:Int64}}))"
            f" AND {time} < fromUnixTimestamp64Nano(greatest({{b_end:Int64}}, {{c_end:Int64}}))"
        )
        return f"{both} AND ({inside('baseline', 'b_start', 'b_end')} OR {inside('candidate', 'c_start', 'c_end')})"


def _spans_where(windows: Windows) -> str:
    return f"feature = {{feature:String}} AND eval_run = '' AND {windows.condition()}"


def releases_sql(spans: str, feature: str) -> tuple[str, dict[str, Any]]:
    """Each release the feature's production spans carry: first and last span start (ns) and its requests."""
    sql = (
        "SELECT release, toUnixTimestamp64Nano(min(start_time)) AS first_ns,\n"
        "    toUnixTimestamp64Nano(max(start_time)) AS last_ns, countIf(parent_span_id = '') AS requests\n"
        f"FROM {spans}\n"
        "WHERE feature = {feature:String} AND eval_run = '' AND release != ''\n"
        "GROUP BY release ORDER BY first_ns"
    )
    return sql, {"feature": feature}


def release_features_sql(spans: str) -> tuple[str, dict[str, Any]]:
    """Per tenant and feature, each release's first request (ns) and how many requests it had: which feature saw a
    new release last (`ragmon compare` without a feature), which candidate a canary analysis looks at."""
    sql = (
        "SELECT tenant, feature, release, toUnixTimestamp64Nano(min(start_time)) AS first_ns, count() AS requests\n"
        f"FROM {spans}\n"
        "WHERE eval_run = '' AND release != '' AND parent_span_id = ''\n"
        "GROUP BY tenant, feature, release"
    )
    return sql, {}


def requests_between_sql(
    spans: str, feature: str, release: str, start_ns: int, end_ns: int
) -> tuple[str, dict[str, Any]]:
    """How many requests (root spans) of `release` started in [start_ns, end_ns)."""
    sql = (
        f"SELECT count() AS requests FROM {spans}\n"
        "WHERE feature = {feature:String} AND eval_run = '' AND release = {release:String} AND parent_span_id = ''\n"
        "    AND start_time >= fromUnixTimestamp64Nano({start:Int64})\n"
        "    AND start_time < fromUnixTimestamp64Nano({end:Int64})"
    )
    return sql, {"feature": feature, "release": release, "start": start_ns, "end": end_ns}


def stage_sql(spans: str, windows: Windows, feature: str) -> tuple[str, dict[str, Any]]:
    search = "stage = 'search'"
    sql = (
        f"SELECT release, {PART} AS part, count() AS spans, countIf(status = 'error') AS errors,\n"
        f"    countIf({search} AND top1_score IS NOT NULL) AS top1_n,\n"
        f"    avgIf(assumeNotNull(top1_score), {search} AND top1_score IS NOT NULL) AS top1_mean,\n"
        f"    varSampIf(assumeNotNull(top1_score), {search} AND top1_score IS NOT NULL) AS top1_var,\n"
        f"    countIf({search} AND similarity_gap IS NOT NULL) AS gap_n,\n"
        f"    avgIf(assumeNotNull(similarity_gap), {search} AND similarity_gap IS NOT NULL) AS gap_mean,\n"
        f"    varSampIf(assumeNotNull(similarity_gap), {search} AND similarity_gap IS NOT NULL) AS gap_var\n"
        f"FROM {spans}\n"
        f"WHERE {_spans_where(windows)}\n"
        "GROUP BY release, part"
    )
    return sql, windows.params(feature)


def request_sql(spans: str, windows: Windows, feature: str) -> tuple[str, dict[str, Any]]:
    sql = (
        "SELECT release, count() AS requests, sum(failed) AS failed,\n"
        "    sum(cost) AS cost_sum, sum(cost * cost) AS cost_sum2, sum(cost_known) AS cost_known,\n"
        "    sum(tokens) AS tokens_sum, sum(tokens * tokens) AS tokens_sum2\n"
        "FROM (\n"
        "    SELECT release, cityHash64(trace_id) AS trace, max(status = 'error') AS failed,\n"
        "        sum(ifNull(cost_usd, 0)) AS cost, max(cost_usd IS NOT NULL) AS cost_known,\n"
        "        toFloat64(sum(input_tokens + output_tokens)) AS tokens\n"
        f"    FROM {spans}\n"
        f"    WHERE {_spans_where(windows)}\n"
        "    GROUP BY release, trace\n"
        ")\n"
        "GROUP BY release"
    )
    return sql, windows.params(feature)


def quantile_sql(
    spans: str, windows: Windows, feature: str, ranks: Sequence[tuple[str, str, int, Sequence[int]]]
) -> tuple[str, dict[str, Any]]:
    """One row: for each (release, part, n, 1-based ranks) the values at those ranks, as column `q<i>` (an array).
    The release and part are bound parameters; the levels are numbers computed from n."""
    params = windows.params(feature)
    columns = []
    for i, (release, part, n, wanted) in enumerate(ranks):
        levels = ", ".join(repr((rank - 0.5) / n) for rank in wanted)
        params[f"r{i}"], params[f"p{i}"] = release, part
        columns.append(
            f"quantilesExactIf({levels})(duration_ms, release = {{r{i}:String}} AND {PART} = {{p{i}:String}}) AS q{i}"
        )
    sql = f"SELECT {', '.join(columns)}\nFROM {spans}\nWHERE {_spans_where(windows)}"
    return sql, params


def _weighted_sums(value: str, ok: str, p: str) -> str:
    weighted = f"{ok} AND ifNull({p}, 0) > 0"
    w = f"assumeNotNull({p})"
    return (
        f"countIf({ok}) AS ok, countIf({weighted}) AS weighted_n,\n"
        f"    sumIf(1 / {w}, {weighted}) AS sum_w, sumIf({value} / {w}, {weighted}) AS sum_wy,\n"
        f"    sumIf(1 / pow({w}, 2), {weighted}) AS sum_w2, sumIf({value} / pow({w}, 2), {weighted}) AS sum_w2y,\n"
        f"    sumIf(pow({value}, 2) / pow({w}, 2), {weighted}) AS sum_w2y2"
    )


def _release_of_trace(payloads: str, windows: Windows, trace: str = "trace_id") -> str:
    """The release of a trace kept in either release's window: its payload says (a set lookup per score, no join:
    a payload copied twice is one trace either way)."""

    def kept(side: str, start: str, end: str) -> str:
        return (
            f"{trace} IN (SELECT trace_id FROM {payloads} WHERE feature = {{feature:String}} AND eval_run = ''"
            f" AND release = {{{side}:String}} AND start_time >= fromUnixTimestamp64Nano({{{start}:Int64}})"
            f" AND start_time < fromUnixTimestamp64Nano({{{end}:Int64}}))"
        )

    return (
        f"multiIf({kept('candidate', 'c_start', 'c_end')}, {{candidate:String}},"
        f" {kept('baseline', 'b_start', 'b_end')}, {{baseline:String}}, '')"
    )


def quality_sql(scores: str, payloads: str, windows: Windows, feature: str) -> tuple[str, dict[str, Any]]:
    """Online judged scores per (release, metric): the trace's release from its payload (kept traces only are
    judged, and a payload outlives a comparison's window), weighted sums as `ragmon.sinks.quality`'s."""
    ok = "status = 'ok' AND value IS NOT NULL"
    sql = (
        "SELECT release_of_trace AS release, metric, count() AS judged,\n"
        "    countIf(has(flags, 'refusal')) AS refusals,\n"
        f"    {_weighted_sums('assumeNotNull(value)', ok, 'inclusion_probability')}\n"
        f"FROM (SELECT *, {_release_of_trace(payloads, windows)} AS release_of_trace\n"
        f"    FROM {scores} FINAL WHERE run_name = '' AND feature = {{feature:String}})\n"
        "WHERE release_of_trace != ''\n"
        "GROUP BY release, metric"
    )
    return sql, windows.params(feature)


def _grouped_traces(questions: str, windows: Windows, scores: str) -> str:
    """The question rows of the judged traces of either release's window (a re-grouped trace's rows agree)."""
    return (
        f"SELECT trace_id, any(release) AS q_release, any(group_id) AS q_group FROM {questions}\n"
        f"    WHERE feature = {{feature:String}} AND eval_run = '' AND {windows.condition()}\n"
        f"        AND trace_id IN (SELECT trace_id FROM {scores}\n"
        "            WHERE run_name = '' AND feature = {feature:String})\n"
        "    GROUP BY trace_id"
    )


def group_sql(questions: str, windows: Windows, feature: str, examples: int = 3) -> tuple[str, dict[str, Any]]:
    """Per question group and release: its traces, failed ones, the question most often asked as it was asked,
    and a few trace ids (failed ones first)."""
    sql = (
        "SELECT group_id, release, count() AS traces, sum(failed) AS failed_traces_n,\n"
        "    topK(1)(question)[1] AS example_question,\n"
        f"    groupArrayIf({int(examples)})(trace_id, failed = 1) AS failed_examples,\n"
        f"    groupArray({int(examples)})(trace_id) AS some_traces\n"
        f"FROM {questions}\n"
        f"WHERE feature = {{feature:String}} AND eval_run = '' AND {windows.condition()}\n"
        "GROUP BY group_id, release"
    )
    return sql, windows.params(feature)


def group_quality_sql(scores: str, questions: str, windows: Windows, feature: str) -> tuple[str, dict[str, Any]]:
    """Per question group, release and metric: judged scores (weighted) and refusals of the group's traces."""
    ok = "s.status = 'ok' AND s.value IS NOT NULL"
    sql = (
        "SELECT q.q_group AS group_id, q.q_release AS release, s.metric AS metric, count() AS judged,\n"
        "    countIf(has(s.flags, 'refusal')) AS refusals,\n"
        f"    {_weighted_sums('assumeNotNull(s.value)', ok, 's.inclusion_probability')}\n"
        f"FROM {scores} AS s FINAL\n"
        f"INNER JOIN ({_grouped_traces(questions, windows, scores)}) AS q ON s.trace_id = q.trace_id\n"
        "WHERE s.run_name = '' AND s.feature = {feature:String}\n"
        "GROUP BY group_id, release, metric"
    )
    return sql, windows.params(feature)


def group_documents_sql(
    spans: str, questions: str, windows: Windows, feature: str, groups: Sequence[str], stride: int = 1
) -> tuple[str, dict[str, Any]]:
    """Per (group, release, document) of `groups`: how many of the group's traces retrieved the document; and per
    (group, release) with document '' how many traces were counted. With `stride` above 1, only the traces whose
    id hashes to 0 modulo `stride` (a uniform sample, the same on both sides of the join, so a busy window's
    shares cost what a quiet one's do)."""
    params = windows.params(feature)
    params["groups"] = list(groups)
    params["stride"] = max(1, int(stride))
    sample = "cityHash64(trace_id) % {stride:UInt64} = 0"
    grouped = (
        f"SELECT DISTINCT cityHash64(trace_id) AS trace, release, group_id FROM {questions}\n"
        f"    WHERE feature = {{feature:String}} AND eval_run = '' AND {windows.condition()}\n"
        f"        AND has({{groups:Array(String)}}, group_id) AND {sample}"
    )
    sql = (
        "SELECT q.group_id AS group_id, q.release AS release, d.document AS document,\n"
        "    uniqExact(d.trace) AS traces\n"
        "FROM (\n"
        f"    SELECT cityHash64(trace_id) AS trace, arrayJoin({DOCUMENTS}) AS document\n"
        f"    FROM {spans}\n"
        f"    WHERE {_spans_where(windows)} AND stage = 'search' AND notEmpty(retrieved_ids) AND {sample}\n"
        ") AS d\n"
        f"INNER JOIN ({grouped}) AS q ON d.trace = q.trace\n"
        "GROUP BY group_id, release, document\n"
        "UNION ALL\n"
        f"SELECT group_id, release, '' AS document, count() AS traces FROM ({grouped}) GROUP BY group_id, release"
    )
    return sql, params
