"""The document rollups (`documents_1m`, and per hour `documents_1h`): written once per decided range, read by the
document views instead of every retrieval span of their window.

Why: a view over raw spans unnests every retrieval's documents (ten per search, five per rerank) and groups them
all, per read; over 10M spans that is tens of millions of rows per read and did not fit the caller's memory budget.
The agent already rolls up each decided range of spans into `spans_1m` (`ragmon.pipeline.rollups`); the same step
adds the range's documents here — a second INSERT … SELECT with its own deterministic deduplication token, so a range
rolled up again after a crash is dropped like the first (`Store.roll_up`). The hours follow by a view, as the span
hours do; a view reads whole hours from `documents_1h` and its edge minutes from `documents_1m`, a few thousand
rows per hour of traffic whatever the traffic.

Per retrieval span of the range (a `search` or `rerank` with documents, of any tenant and eval run): one row per
(feature, stage, eval run, release, document, minute) — the document being the paragraph or source where the app
names one, else the chunk id (`ragmon.sinks.documents_sql`) — with how often it was retrieved, by how many traces,
its ranks and its chunks. Which stage is an answer's final context (the reranker's when the feature reranks) is
decided when read, over the window read, as over raw spans. A trace counts once per document, minute and range;
a trace's retrievals are milliseconds apart and land in one range unless its spans arrive seconds apart, so it
counts once but for those. Duplicated spans (re-sent in another batch) count again, as in the span rollup.
"""

from __future__ import annotations

from typing import Any, Final

from ragmon.sinks.schema import (
    DOCUMENT_HOUR_ROLLUP_TABLE,
    DOCUMENT_ROLLUP_COLUMNS,
    DOCUMENT_ROLLUP_TABLE,
    Ddl,
)
from ragmon.sinks.traffic import Traffic

MAX_RANK_BUCKET: Final = 10  # ranks above 10 are counted together, as 10
RETRIEVAL_STAGES: Final = ("search", "rerank")


def documents_rollup_sql(ddl: Ddl) -> str:
    """INSERT … SELECT of the documents of the spans with ingest_seq in [seq_from, seq_to] (UInt64 parameters)."""
    columns = ", ".join(name for name, _ in DOCUMENT_ROLLUP_COLUMNS)
    stages = ", ".join(f"'{stage}'" for stage in RETRIEVAL_STAGES)
    return f"""
INSERT INTO {ddl.table(DOCUMENT_ROLLUP_TABLE)} ({columns})
SELECT tenant, feature, stage, eval_run, release, doc, minute,
    count() AS retrieved, uniqExact(trace_id) AS traces, sum(rank) AS rank_sum, countIf(rank = 1) AS first,
    sumMap([toUInt16(least(rank, {MAX_RANK_BUCKET}))], [toUInt64(1)]) AS ranks, uniqExactState(chunk) AS chunks
FROM (
    SELECT tenant, feature, stage, eval_run, release, trace_id, toStartOfMinute(toDateTime(start_time)) AS minute,
        chunk, rank, if(source != '', source, chunk) AS doc
    FROM {ddl.table("spans")}
    ARRAY JOIN retrieved_ids AS chunk,
        -- parallel to the ids (the normaliser makes them so); resized all the same, as the raw views do
        arrayResize(retrieved_sources, length(retrieved_ids), '') AS source,
        arrayEnumerate(retrieved_ids) AS rank
    WHERE ingest_seq BETWEEN {{seq_from:UInt64}} AND {{seq_to:UInt64}}
        AND stage IN ({stages}) AND notEmpty(retrieved_ids)
)
WHERE doc != ''
GROUP BY tenant, feature, stage, eval_run, release, doc, minute"""


def _whole_hours(start_s: int, end_s: int) -> tuple[int, int]:
    """[first, last) clock hours all of whose minutes are read: minutes m with minute(start_s) <= m < end_s."""
    first = -(-(start_s // 60 * 60) // 3600) * 3600
    last = -(-end_s // 60) * 60 // 3600 * 3600  # h is whole when its last minute h + 3540 < end_s
    return first, max(first, last)


def rolled_documents(
    ddl: Ddl, params: dict[str, Any], start_s: int, end_s: int, feature: str | None, traffic: Traffic
) -> str:
    """SQL of rows (feature, stage, doc, n_retrieved, n_traces, n_rank_sum, n_first, n_ranks, n_chunks) of `traffic`
    (and `feature` when named) over the minutes that begin in [minute(start_s), end_s): whole hours from the hourly
    rollup, the rest from the minutes. Adds its parameters."""
    first_hour, end_hour = _whole_hours(int(start_s), int(end_s))
    params.update({"doc_start_s": int(start_s), "doc_end_s": int(end_s), "doc_h0": first_hour, "doc_h1": end_hour})
    filters = [traffic.condition(params)]
    if feature is not None:
        params["feature"] = feature
        filters.append("feature = {feature:String}")
    minutes = " AND ".join(
        [
            "minute >= toStartOfMinute(toDateTime({doc_start_s:Int64}))",
            "minute < toDateTime({doc_end_s:Int64})",
            "NOT (minute >= toDateTime({doc_h0:Int64}) AND minute < toDateTime({doc_h1:Int64}))",
            *filters,
        ]
    )
    hours = " AND ".join(["hour >= toDateTime({doc_h0:Int64})", "hour < toDateTime({doc_h1:Int64})", *filters])
    columns = (
        "feature, stage, doc, retrieved AS n_retrieved, traces AS n_traces, rank_sum AS n_rank_sum,"
        " first AS n_first, ranks AS n_ranks, chunks AS n_chunks"
    )
    return (
        f"SELECT {columns} FROM {ddl.table(DOCUMENT_HOUR_ROLLUP_TABLE)} WHERE {hours}\n"
        "UNION ALL\n"
        f"SELECT {columns} FROM {ddl.table(DOCUMENT_ROLLUP_TABLE)} WHERE {minutes}"
    )


def final_context_rolled(rolled: str) -> str:
    """`rolled`'s rows of each answer's final context: the rerank rows of a feature that has any in the window, else
    its search rows (the rule `ragmon.sinks.documents_sql.final_context` applies to raw spans)."""
    return (
        f"SELECT * FROM ({rolled})\n"
        "WHERE stage = 'rerank' OR (stage = 'search' AND feature NOT IN (\n"
        f"    SELECT DISTINCT feature FROM ({rolled}) WHERE stage = 'rerank'))"
    )
