"""The document views' SQL: which documents production answers were built on, for which questions, how those
answers were judged, and which documents stopped (or started) being retrieved between two releases.

A *document* is the paragraph or source a retrieved chunk belongs to when the app names one
(`spans.retrieved_sources`: labels that survive re-chunking), else the chunk id itself. The documents that count
are an answer's *final context*: a reranker's output when the feature reranks (it has rerank spans with documents
in the window), else its retriever's — the chunks the retriever found and the reranker dropped never reached the
answer. A document retrieved twice in one trace (two searches) counts twice in `retrieved`, once in `traces`.

Each builder returns SQL and its `{name:Type}` parameters, over tables qualified by the store; the caller runs them
as a caller's read with the tenant filter (`for_report.py`), and `ragmon.sinks.named_reads` serves them. Judged
quality uses the scores' inclusion probabilities as `ragmon.sinks.quality` does (kept traces weighted back to all
traffic); an answer is *judged bad* on a metric when its score is below `BAD_BELOW`.
"""

from __future__ import annotations

from typing import Any, Final

from ragmon.sinks.documents_rollup_sql import final_context_rolled, rolled_documents
from ragmon.sinks.schema import Ddl
from ragmon.sinks.traffic import PRODUCTION, Traffic

BAD_BELOW: Final = 0.5  # a score below this is judged unfaithful (faithfulness) or unhelpful (answer_relevance)
UNFAITHFUL_METRIC: Final = "faithfulness"
UNHELPFUL_METRIC: Final = "answer_relevance"


def _window(params: dict[str, Any], start_s: int, end_s: int, column: str = "start_time") -> str:
    params["start_s"], params["end_s"] = int(start_s), int(end_s)
    return f"{column} >= toDateTime64({{start_s:Int64}}, 9) AND {column} < toDateTime64({{end_s:Int64}}, 9)"


def final_context(
    spans: str,
    params: dict[str, Any],
    start_s: int,
    end_s: int,
    feature: str | None,
    traffic: Traffic,
    only_traces: str | None = None,
    reranking: list[str] | None = None,
) -> str:
    """SQL of rows (trace_id, trace_hash, feature, release, doc, chunk, rank) — one per document of each answer's
    final context in [start_s, end_s) of `traffic` (production unless asked), `feature` when named; of the traces
    `only_traces` gives, when given (SQL of `cityHash64(trace_id)`s: the set held in memory is numbers, not ids).
    The per-trace views join a few traces (the judged ones, a group's): filtering the spans by them first saves
    unnesting every other trace's documents. `reranking`, when given, names the features that rerank in the window
    (`reranking_sql`, from the document rollups): each feature's spans are then read for one stage only, the
    index choosing them, instead of both stages and a pass over the spans to find the rerankers. Adds its
    parameters."""
    where = [_window(params, start_s, end_s), "notEmpty(retrieved_ids)", traffic.condition(params)]
    if feature is not None:
        params["feature"] = feature
        where.append("feature = {feature:String}")
    common = " AND ".join(where)
    chosen = "" if only_traces is None else f" AND cityHash64(trace_id) IN ({only_traces})"
    if reranking is None:
        stage = (
            "(stage = 'rerank' OR (stage = 'search' AND feature NOT IN (\n"
            f"    SELECT DISTINCT feature FROM {spans} WHERE stage = 'rerank' AND {common})))"
        )
    else:
        params["reranking"] = list(reranking)
        stage = (
            "((stage = 'rerank' AND feature IN {reranking:Array(String)})"
            " OR (stage = 'search' AND feature NOT IN {reranking:Array(String)}))"
        )
    return (
        "SELECT trace_id, cityHash64(trace_id) AS trace_hash, feature, release, chunk, rank,\n"
        "    if(source != '', source, chunk) AS doc\n"
        f"FROM {spans}\n"
        "ARRAY JOIN retrieved_ids AS chunk,\n"
        # sources are parallel to the ids (the normaliser makes them so); resized all the same, so a row written
        # before v10 (no sources) reads as naming none instead of failing the join
        "    arrayResize(retrieved_sources, length(retrieved_ids), '') AS source,\n"
        "    arrayEnumerate(retrieved_ids) AS rank\n"
        f"WHERE {common}{chosen} AND {stage}\n"
        "    AND doc != ''"
    )


def reranking_sql(ddl: Ddl, start_s: int, end_s: int, traffic: Traffic = PRODUCTION) -> tuple[str, dict[str, Any]]:
    """The features with rerank documents in the window (from the document rollups): their answers' final context is
    the reranker's output (`final_context`'s `reranking`)."""
    params: dict[str, Any] = {}
    rolled = rolled_documents(ddl, params, start_s, end_s, None, traffic)
    return f"SELECT DISTINCT feature FROM ({rolled}) WHERE stage = 'rerank'", params


def documents_sql(
    ddl: Ddl, start_s: int, end_s: int, feature: str | None, traffic: Traffic = PRODUCTION, limit: int = 50
) -> tuple[str, dict[str, Any]]:
    """Per (feature, document), the most retrieved first: how often (retrievals, traces), at which ranks (the mean,
    how often first, a count per rank with ranks above `MAX_RANK_BUCKET` together), from how many chunks. Read from
    the document rollups (`documents_rollup_sql.py`) over the minutes that begin in the window."""
    params: dict[str, Any] = {"limit": int(limit)}
    context = final_context_rolled(rolled_documents(ddl, params, start_s, end_s, feature, traffic))
    sql = (
        "SELECT feature, doc, retrieved, traces, rank_sum / retrieved AS mean_rank, first, chunks,\n"
        "    ranks.1 AS rank_keys, ranks.2 AS rank_counts FROM (\n"
        "SELECT feature, doc, sum(n_retrieved) AS retrieved, sum(n_traces) AS traces, sum(n_rank_sum) AS rank_sum,\n"
        "    sum(n_first) AS first, uniqExactMerge(n_chunks) AS chunks, sumMap(n_ranks) AS ranks\n"
        f"FROM ({context})\n"
        "GROUP BY feature, doc\n"
        "ORDER BY retrieved DESC, feature, doc\n"
        "LIMIT {limit:UInt32})"
    )
    return sql, params


def document_groups_sql(
    spans: str,
    questions: str,
    groups: str,
    start_s: int,
    end_s: int,
    feature: str | None,
    docs: list[str],
    traffic: Traffic = PRODUCTION,
    per_document: int = 3,
    *,
    reranking: list[str] | None = None,
) -> tuple[str, dict[str, Any]]:
    """For the documents `docs`: the question groups (`trace_questions`) whose answers were built on each, the most
    frequent `per_document` first, with the group's label (its example question: `group_examples_sql`)."""
    params: dict[str, Any] = {"docs": list(docs), "per_document": int(per_document)}
    context = final_context(spans, params, start_s, end_s, feature, traffic, reranking=reranking)
    sql = (
        "SELECT d.feature AS feature, d.doc AS doc, q.group_id AS group_id, uniqExact(d.trace_hash) AS traces\n"
        f"FROM ({context} AND doc IN {{docs:Array(String)}}) AS d\n"
        f"INNER JOIN ({_trace_groups(questions, params, start_s, end_s, feature)}) AS q\n"
        "    ON q.trace_hash = d.trace_hash\n"
        "GROUP BY feature, doc, group_id\n"
        "ORDER BY traces DESC, group_id\n"
        "LIMIT {per_document:UInt32} BY feature, doc"
    )
    return _labelled(sql, groups), params


def _trace_groups(questions: str, params: dict[str, Any], start_s: int, end_s: int, feature: str | None) -> str:
    """Each trace's question group in the window, keyed by the trace id's 64-bit hash: the side of a join that is
    held in memory, one row per trace of the window, is then a number and a group id, not the id's 32 characters
    and the question (a collision among the window's traces is a chance in billions, and costs one trace's group)."""
    where = [_window(params, start_s, end_s)]
    if feature is not None:
        params["feature"] = feature
        where.append("feature = {feature:String}")
    return f"SELECT cityHash64(trace_id) AS trace_hash, group_id FROM {questions} WHERE {' AND '.join(where)}"


def group_examples_sql(
    questions: str, start_s: int, end_s: int, feature: str | None, group_ids: list[str]
) -> tuple[str, dict[str, Any]]:
    """A question as asked, per (feature, question group) of `group_ids`, in the window: the group's example."""
    params: dict[str, Any] = {"group_ids": list(group_ids)}
    where = [_window(params, start_s, end_s), "group_id IN {group_ids:Array(String)}"]
    if feature is not None:
        params["feature"] = feature
        where.append("feature = {feature:String}")
    sql = (
        f"SELECT feature, group_id, any(question) AS example FROM {questions}\n"
        f"WHERE {' AND '.join(where)}\n"
        "GROUP BY feature, group_id"
    )
    return sql, params


def _labelled(sql: str, groups: str) -> str:
    """`sql`'s rows (with feature, group_id) and each group's label from `question_groups` ('' when unknown)."""
    return (
        "SELECT r.*, ifNull(g.label, '') AS label\n"
        f"FROM ({sql}) AS r\n"
        f"LEFT JOIN (SELECT feature, group_id, argMax(label, updated_at) AS label FROM {groups}\n"
        "    GROUP BY feature, group_id) AS g ON g.feature = r.feature AND g.group_id = r.group_id\n"
        "SETTINGS join_use_nulls = 1"
    )


def _judged(scores: str, metrics: str | None = None) -> str:
    """Online scores that hold a value (of `metrics`, an SQL list, when named), the latest per (trace, metric,
    judge version)."""
    chosen = "" if metrics is None else f" AND metric IN {metrics}"
    return (
        f"SELECT trace_id, metric, assumeNotNull(value) AS value, inclusion_probability FROM {scores} FINAL\n"
        f"    WHERE run_name = '' AND status = 'ok' AND value IS NOT NULL{chosen}"
    )


def document_quality_sql(
    spans: str,
    scores: str,
    start_s: int,
    end_s: int,
    feature: str | None,
    docs: list[str],
    traffic: Traffic = PRODUCTION,
    *,
    reranking: list[str] | None = None,
) -> tuple[str, dict[str, Any]]:
    """For the documents `docs`, per metric: the sums `ragmon.sinks.quality.assemble_quality` estimates from (kept
    and weighted), and how many of the judged answers built on the document were judged bad."""
    params: dict[str, Any] = {"docs": list(docs), "bad_below": BAD_BELOW}
    judged = f"SELECT cityHash64(trace_id) FROM ({_judged(scores)})"
    context = final_context(spans, params, start_s, end_s, feature, traffic, judged, reranking)
    p = "assumeNotNull(s.inclusion_probability)"
    weighted = "ifNull(s.inclusion_probability, 0) > 0"
    sql = (
        "SELECT d.feature AS feature, d.doc AS doc, s.metric AS metric, count() AS judged, count() AS ok,\n"
        "    countIf(s.value < {bad_below:Float64}) AS bad,\n"
        f"    countIf(NOT {weighted}) AS unknown_weight,\n"
        "    sum(s.value) AS sum_y, sum(pow(s.value, 2)) AS sum_y2,\n"
        f"    countIf({weighted}) AS weighted_n, sumIf(1 / {p}, {weighted}) AS sum_w,\n"
        f"    sumIf(s.value / {p}, {weighted}) AS sum_wy, sumIf(1 / pow({p}, 2), {weighted}) AS sum_w2,\n"
        f"    sumIf(s.value / pow({p}, 2), {weighted}) AS sum_w2y,\n"
        f"    sumIf(pow(s.value, 2) / pow({p}, 2), {weighted}) AS sum_w2y2,\n"
        f"    sumIf(1 / {p}, {weighted} AND s.value < {{bad_below:Float64}}) AS sum_w_bad\n"
        f"FROM ({context} AND doc IN {{docs:Array(String)}}) AS d\n"
        f"INNER JOIN ({_judged(scores)}) AS s\n"
        "    ON s.trace_id = d.trace_id\n"
        "GROUP BY feature, doc, metric\n"
        "ORDER BY feature, doc, metric"
    )
    return sql, params


def problem_documents_sql(
    spans: str,
    scores: str,
    start_s: int,
    end_s: int,
    feature: str | None,
    traffic: Traffic = PRODUCTION,
    *,
    reranking: list[str] | None = None,
) -> tuple[str, dict[str, Any]]:
    """Per (feature, document) over the judged answers built on it: how many, and how many were judged unfaithful,
    unhelpful, or either; and the same per feature over all its judged answers with documents (the rows whose
    `doc` is ''), the baseline a document's rate is held against."""
    params: dict[str, Any] = {
        "bad_below": BAD_BELOW,
        "unfaithful": UNFAITHFUL_METRIC,
        "unhelpful": UNHELPFUL_METRIC,
    }
    chosen = _judged(scores, "({unfaithful:String}, {unhelpful:String})")
    only = f"SELECT cityHash64(trace_id) FROM ({chosen})"
    context = final_context(spans, params, start_s, end_s, feature, traffic, only, reranking)
    verdicts = (
        "SELECT trace_id,\n"
        "    max(metric = {unfaithful:String} AND value < {bad_below:Float64}) AS unfaithful,\n"
        "    max(metric = {unhelpful:String} AND value < {bad_below:Float64}) AS unhelpful\n"
        f"FROM ({chosen})\n"
        "GROUP BY trace_id"
    )
    sql = (
        "SELECT d.feature AS feature, d.doc AS doc, uniqExact(d.trace_id) AS judged,\n"
        "    uniqExactIf(d.trace_id, v.unfaithful = 1) AS unfaithful,\n"
        "    uniqExactIf(d.trace_id, v.unhelpful = 1) AS unhelpful,\n"
        "    uniqExactIf(d.trace_id, v.unfaithful = 1 OR v.unhelpful = 1) AS bad\n"
        f"FROM ({context}) AS d\n"
        f"INNER JOIN ({verdicts}) AS v ON v.trace_id = d.trace_id\n"
        "GROUP BY GROUPING SETS ((feature, doc), (feature))\n"
        "ORDER BY feature, doc"
    )
    return sql, params


def document_shift_sql(
    spans: str,
    questions: str,
    groups: str,
    feature: str | None,
    release_a: str,
    release_b: str,
    start_s: int,
    end_s: int,
    group_id: str | None = None,
    traffic: Traffic = PRODUCTION,
    *,
    reranking: list[str] | None = None,
) -> tuple[str, dict[str, Any]]:
    """Per (question group, document) of `feature` (every feature when None): in how many of the group's traces of
    release A and of release B the document was in the final context, beside the group's traces of each release
    (rows whose `doc` is '': every trace of the group, retrieved or not). `group_id` narrows it to one group. What
    `ragmon compare` and the canary call with a feature, a group and two releases."""
    params: dict[str, Any] = {"release_a": release_a, "release_b": release_b}
    where = [
        _window(params, start_s, end_s),
        "release IN ({release_a:String}, {release_b:String})",
        traffic.condition(params),
    ]
    if feature is not None:
        params["feature"] = feature
        where.append("feature = {feature:String}")
    if group_id is not None:
        params["group_id"] = group_id
        where.append("group_id = {group_id:String}")
    chosen = f"FROM {questions} WHERE {' AND '.join(where)}"
    # the join's side held in memory: per trace its hash, feature, group and release (not its id, not its question)
    traces = f"SELECT cityHash64(trace_id) AS trace_hash, feature, group_id, release {chosen}"
    # only the traces of the two releases (of the group when named) are unnested
    only = f"SELECT trace_hash FROM ({traces})"
    context = final_context(spans, params, start_s, end_s, feature, traffic, only, reranking)
    a, b = "q.release = {release_a:String}", "q.release = {release_b:String}"
    per_document = (
        "SELECT q.feature AS feature, q.group_id AS group_id, d.doc AS doc,\n"
        f"    uniqExactIf(q.trace_hash, {a}) AS traces_a, uniqExactIf(q.trace_hash, {b}) AS traces_b, '' AS example\n"
        f"FROM ({context}) AS d\n"
        f"INNER JOIN ({traces}) AS q ON q.trace_hash = d.trace_hash\n"
        "GROUP BY feature, group_id, doc"
    )
    per_group = (
        "SELECT feature, group_id, '' AS doc, countIf(release = {release_a:String}) AS traces_a,\n"
        "    countIf(release = {release_b:String}) AS traces_b, any(question) AS example\n"
        f"{chosen}\n"
        "GROUP BY feature, group_id"
    )
    sql = _labelled(f"{per_document}\nUNION ALL\n{per_group}", groups)
    return sql, params
