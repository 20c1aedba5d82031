"""SQL the tail sampler runs against the store: trace fragments per ingest range, payload copies, recent p95.

The sampler never holds span text in Python. It asks for one summary row per (tenant, trace) among the spans of
a write-ahead-log range (`trace_fragments_sql`), decides, and has the engine copy the kept traces' text from
`span_content` into `payloads` (`copy_payloads_sql`: INSERT … SELECT). Values arrive as `{name:Type}` parameters.
Duplicated spans (a re-send that was not the same batch) are collapsed with `LIMIT 1 BY` before counting.
"""

from __future__ import annotations

from ragmon.sinks import content_sql as C
from ragmon.sinks import trace_question_sql as Q
from ragmon.sinks.backend import quote_string as quote
from ragmon.sinks.dialects import otel_genai as GENAI
from ragmon.sinks.dialects import ragmon_names as RAGMON
from ragmon.sinks.schema import CONTENT_TABLE, DURATION_LEVELS, DURATION_STATE, ROLLUP_TABLE, Ddl

from ragmon.model import STAGES

_ROOT = "parent_span_id = ''"


def _stage_max_ms() -> str:
    """Map(stage → the longest span of that stage), for the stages the trace has: one `maxIf` per stage of
    `STAGES`, put in a map once per trace. ``maxMap(map(stage, duration_ms))`` built a map per span, a large share of
    the query's CPU (docs/results.md). The normalising SQL gives no other
    stage; a row written with another (tests write `spans` rows directly, unchecked) is left out of the map."""
    stages = sorted(STAGES)  # the key order maxMap gave
    maxima = ", ".join(f"maxIfOrNull(s.duration_ms, s.stage = '{stage}')" for stage in stages)
    names = ", ".join(f"'{stage}'" for stage in stages)
    return f"CAST(mapFilter((k, v) -> v IS NOT NULL, mapFromArrays([{names}], [{maxima}])), 'Map(String, Float64)')"


def trace_fragments_sql(ddl: Ddl) -> str:
    """Params: seq_from, seq_to (UInt64, inclusive). The spans are summarised per trace before the captured-text
    sizes are joined on, so the join probes once per trace rather than once per span (×0.90–0.93 of the query)."""
    return f"""
SELECT f.*, c.content_bytes AS content_bytes
FROM (
    SELECT s.tenant AS tenant, s.trace_id AS trace_id,
        if(countIf({_ROOT}) > 0, anyIf(s.feature, {_ROOT}), anyIf(s.feature, s.feature != '')) AS feature,
        if(countIf({_ROOT}) > 0, anyIf(s.user, {_ROOT}), anyIf(s.user, s.user != '')) AS user,
        anyIf(s.eval_run, s.eval_run != '') AS eval_run,
        count() AS span_count,
        countIf(s.status = 'error') AS error_count,
        countIf({_ROOT}) > 0 AS root_seen,
        if(root_seen, anyIf(s.duration_ms, {_ROOT}), NULL) AS root_duration_ms,
        -- the span a kept trace's evaluation events are parented to (judges/evaluation_events.py)
        if(root_seen, anyIf(s.span_id, {_ROOT}), '') AS root_span_id,
        {_stage_max_ms()} AS stage_max_ms,
        min(s.top1_score) AS min_top1_score,
        min(s.similarity_gap) AS min_similarity_gap,
        max(s.norm_deviation) AS max_norm_deviation
    FROM (
        SELECT tenant, trace_id, span_id, parent_span_id, feature, user, eval_run, status, duration_ms, stage,
            top1_score, similarity_gap, norm_deviation
        FROM {ddl.table("spans")}
        WHERE ingest_seq BETWEEN {{seq_from:UInt64}} AND {{seq_to:UInt64}}
        LIMIT 1 BY tenant, trace_id, span_id
    ) AS s
    GROUP BY s.tenant, s.trace_id
) AS f
LEFT JOIN (
    SELECT tenant, trace_id, sum(content_bytes) AS content_bytes
    FROM (
        SELECT tenant, trace_id, span_id, content_bytes
        FROM {ddl.table(CONTENT_TABLE)}
        WHERE ingest_seq BETWEEN {{seq_from:UInt64}} AND {{seq_to:UInt64}}
        LIMIT 1 BY tenant, trace_id, span_id
    )
    GROUP BY tenant, trace_id
) AS c ON c.tenant = f.tenant AND c.trace_id = f.trace_id
ORDER BY tenant, trace_id"""


def _prompt_context(messages: str, question: str) -> str:
    """The prompt messages (Array((role, text))) a judge checks an answer against when the trace retrieved
    nothing: those with text, less the user message that is the question itself."""
    return f"arrayFilter(m -> m.2 != '' AND NOT (m.1 = 'user' AND m.2 = {question}), {messages})"


PAYLOAD_INSERT_COLUMNS = (
    "tenant",
    "trace_id",
    "feature",
    "eval_run",
    "release",
    "environment",
    "session",
    "start_time",
    "question",
    "answer",
    "passages",
    "tool_calls",
    "messages",
    "context_source",
    "content",
    "sampling_reason",
    "sampling_reasons",
    "inclusion_probability",
)


def copy_payloads_sql(ddl: Ddl) -> str:
    """Params: tenants, trace_ids (JSON arrays of strings), reasons (a JSON array of arrays of strings),
    probabilities (a JSON array of numbers) — one entry per kept trace, aligned — and min_seq (UInt64): every span
    of those traces was stored at or after it (0: no bound). The bound lets both tables skip old parts by their
    ingest_seq minmax index: without it, finding a few thousand random trace ids reads the trace_id column of
    everything stored. Sequence numbers are per agent instance (ragmon/pipeline/intake.py, IngestSeq), so spans of
    the trace that reached another agent are read only if that agent's numbers are higher — agents sharing a store
    need the load balancer to route by trace id anyway, or no sampler sees a whole trace (deploy/README.md).

    Why JSON text and not ``Array`` parameters: the engine turns an array parameter into a literal it analyses
    element by element, at every use (the kept list was read four times: half of a copy's time); one string parsed at
    run time costs a small fraction of that per element (docs/results.md). The spans are
    found by trace id alone (the set is built once); the final join on (tenant, trace_id) keeps only the pairs
    that were kept."""
    kept = """
    SELECT k.1 AS tenant, k.2 AS trace_id, k.3 AS reasons, k.4 AS probability
    FROM (SELECT arrayJoin(arrayZip(JSONExtract({tenants:String}, 'Array(String)'),
        JSONExtract({trace_ids:String}, 'Array(String)'), JSONExtract({reasons:String}, 'Array(Array(String))'),
        JSONExtract({probabilities:String}, 'Array(Float64)'))) AS k)"""
    kept_ids = "(SELECT arrayJoin(JSONExtract({trace_ids:String}, 'Array(String)')))"
    # Each role's span is chosen per trace by cheap tests (`content_sql.has_*`: key lookups, prefix scans, one
    # column each), and only the chosen span's text is parsed, once per trace, each parse a column of its own.
    # A copy's cost is mostly its plan, paid per copy: parsing every span with aliases read several times planned
    # twice as long as this shape, which still plans longer than b10d7b7's copy, which read ragmon's names only
    # (docs/results.md).
    documents = "stage = 'search' AND has_documents"
    reranked = "stage = 'rerank' AND has_documents"
    passage = "(span_id, stage, retrieved_ids, retrieved_scores, content)"
    # the question and answer the app gave in ragmon's names: the trace's own, before any role is read
    question, answer = quote(RAGMON.QUESTION), quote(RAGMON.ANSWER)
    return f"""
INSERT INTO {ddl.table("payloads")} ({", ".join(PAYLOAD_INSERT_COLUMNS)})
WITH kept AS ({kept}
),
spans_info AS (
    SELECT tenant, trace_id, anyIf(feature, {_ROOT}) AS root_feature, anyIf(feature, feature != '') AS any_feature,
        anyIf(eval_run, eval_run != '') AS eval_run, min(start_time) AS first_start,
        -- the trace's release, environment and conversation: its earliest span's that has one
        argMinIf(release, start_time, release != '') AS release,
        argMinIf(environment, start_time, environment != '') AS environment,
        argMinIf(session, start_time, session != '') AS session
    FROM {ddl.table("spans")}
    WHERE ingest_seq >= {{min_seq:UInt64}} AND trace_id IN {kept_ids}
    GROUP BY tenant, trace_id
),
spans_c AS (
    SELECT tenant, trace_id, span_id, parent_span_id, stage, name, start_time, content, retrieved_ids,
        retrieved_scores
    FROM {ddl.table(CONTENT_TABLE)}
    WHERE ingest_seq >= {{min_seq:UInt64}} AND trace_id IN {kept_ids}
    LIMIT 1 BY tenant, trace_id, span_id
),
spans_t AS (
    SELECT *, {Q.span_flags("content")},
        {C.has_documents("content", "retrieved_ids")} AS has_documents
    FROM spans_c
),
per_trace AS (
    SELECT tenant, trace_id, min(start_time) AS first_start,
        -- the question's spans (`trace_question_sql`): the root's or any ragmon.question, the chain, the
        -- retriever, the answering call's prompt
        {Q.PER_TRACE},
        argMaxIf(span_id, start_time, mapContains(content, {answer})) AS answer_span,
        argMaxIf(content[{answer}], start_time, mapContains(content, {answer})) AS direct_answer,
        -- the LLM call that answered (the last with an output)
        argMaxIf(span_id, start_time, stage = 'generate' AND has_output) AS generate_span,
        argMaxIf(content, start_time, stage = 'generate' AND has_output) AS generate_content,
        if(countIf({reranked}) > 0, argMaxIf({passage}, start_time, {reranked}),
            argMaxIf({passage}, start_time, {documents})) AS passage_source,
        arraySort(x -> x.1, groupArrayIf(
            (start_time, {C.tool_name("content", "name")}, {C.tool_arguments("content")}, {C.tool_result("content")}),
            stage = 'tool')) AS tools,
        arrayFlatten(groupArray(arrayMap((key, value) -> (toString(stage), span_id, key, value, {_ROOT}),
            mapKeys(content), mapValues(content)))) AS entries
    FROM spans_t
    GROUP BY tenant, trace_id
)
SELECT {", ".join(PAYLOAD_INSERT_COLUMNS)} FROM (
    SELECT tenant, trace_id, feature, eval_run, release, environment, session, start_time, question, answer,
        arrayMap(i -> (ids[i], if(i <= length(scores), toNullable(scores[i]), NULL), texts[i]),
            range(1, greatest(length(ids), length(texts)) + 1)) AS passages,
        tool_calls, messages,
        multiIf(notEmpty(passages), 'passages', notEmpty({_prompt_context("messages", "question")}), 'prompt', '')
            AS context_source,
        arrayFilter(e -> NOT (
            (e.3 = {question} AND e.4 = question)
            OR (answer_span != '' AND e.2 = answer_span AND e.3 = {answer})
            OR (answer_span = '' AND e.2 = generate_span AND e.3 = {quote(GENAI.OUTPUT_MESSAGES)})
            OR (e.2 = passage_span AND e.3 = {quote(RAGMON.DOCUMENT_TEXTS)})
            OR (e.1 = 'tool' AND e.3 IN ({", ".join(map(quote, C.TOOL_KEYS))}))
        ), entries) AS rest,
        mapFromArrays(arrayMap(e -> concat(e.1, '/', e.2, '/', e.3), rest), arrayMap(e -> e.4, rest)) AS content,
        sampling_reason, sampling_reasons, inclusion_probability
    FROM (
        SELECT tenant, trace_id, feature, eval_run, release, environment, session, start_time, tool_calls, messages,
            entries, answer_span,
            generate_span, passage_span, sampling_reason, sampling_reasons, inclusion_probability,
            -- the question of the trace, as `trace_questions` has it too (`trace_question_sql`)
            {Q.question("root_question", "any_question", "chain_input", "retrieval_query", "messages")} AS question,
            multiIf(answer_span != '', direct_answer, chain_output != '', chain_output, generate_output) AS answer,
            {C.document_ids("retrieved_ids", "output_docs")} AS ids,
            {C.document_scores("retrieved_ids", "retrieved_scores", "output_docs")} AS scores,
            {C.document_texts("passage_content", "passage_stage", "output_docs")} AS texts
        FROM (
            -- every text parsed once, as a column of its own: an alias used twice in one SELECT is planned twice
            -- (and the plan is paid per copy)
            SELECT k.tenant AS tenant, k.trace_id AS trace_id,
                if(si.root_feature != '', si.root_feature, si.any_feature) AS feature, si.eval_run AS eval_run,
                si.release AS release, si.environment AS environment, si.session AS session,
                if(p.trace_id != '', p.first_start, si.first_start) AS start_time,
                p.root_question AS root_question, p.any_question AS any_question,
                p.answer_span AS answer_span, p.direct_answer AS direct_answer, p.generate_span AS generate_span,
                p.entries AS entries, arrayMap(t -> (t.2, t.3, t.4), p.tools) AS tool_calls,
                {Q.prompt_messages("p.prompt_content")} AS messages,
                {Q.chain_input("p.chain_content")} AS chain_input,
                {C.output_value_text("p.chain_content")} AS chain_output,
                {Q.retrieval_query("p.retrieval_content")} AS retrieval_query,
                if(p.generate_span != '', {C.output_text("p.generate_content")}, '') AS generate_output,
                p.passage_source.1 AS passage_span, p.passage_source.2 AS passage_stage,
                p.passage_source.3 AS retrieved_ids, p.passage_source.4 AS retrieved_scores,
                p.passage_source.5 AS passage_content, {C.output_documents("p.passage_source.5")} AS output_docs,
                k.reasons[1] AS sampling_reason, k.reasons AS sampling_reasons, k.probability AS inclusion_probability
            FROM kept AS k
            LEFT JOIN per_trace AS p ON p.tenant = k.tenant AND p.trace_id = k.trace_id
            LEFT JOIN spans_info AS si ON si.tenant = k.tenant AND si.trace_id = k.trace_id
            WHERE p.trace_id != '' OR si.trace_id != ''
        )
    )
)"""


def kept_count_sql(ddl: Ddl) -> str:
    """Params: tenants, trace_ids (JSON arrays of strings, aligned). How many of those traces have a payload row."""
    return f"""
SELECT count() AS n FROM (
    SELECT DISTINCT tenant, trace_id FROM {ddl.table("payloads")}
    WHERE trace_id IN (SELECT arrayJoin(JSONExtract({{trace_ids:String}}, 'Array(String)')))
        AND (tenant, trace_id) IN (SELECT arrayJoin(arrayZip(JSONExtract({{tenants:String}}, 'Array(String)'),
            JSONExtract({{trace_ids:String}}, 'Array(String)'))))
)"""


def payloads_for_judging_sql(ddl: Ddl) -> str:
    """Params: tenant, trace_ids. The judge's inputs of those traces that have a payload row, one row per trace
    (the latest copy: payloads collapse on (tenant, trace_id), and FINAL reads them collapsed before merges do)."""
    return f"""
SELECT trace_id, feature, eval_run, release, question, answer,
    -- without retrieved passages the judge's context is the answering call's prompt, less the question itself
    if(context_source = 'prompt', arrayMap(m -> m.2, {_prompt_context("messages", "question")}),
        arrayMap(p -> tupleElement(p, 'text'), passages)) AS passage_texts,
    context_source, sampling_reason, inclusion_probability
FROM {ddl.table("payloads")} FINAL
WHERE tenant = {{tenant:String}} AND trace_id IN {{trace_ids:Array(String)}}"""


def unjudged_payloads_sql(ddl: Ddl) -> str:
    """Params: since_s, limit. Kept traces (a payload row) of the last `since_s` seconds with no online score of
    any judge version: what the agent's start-up catch-up offers to the judge queue (traces kept while nothing
    queued them). A trace is scored after it started, so only scores of the same window are read: the NOT IN set
    stays the size of the window, not of the whole scores table. Scores and payloads are sharded alike (by trace
    id), so the NOT IN runs shard-local (`distributed_product_mode = 'local'`)."""
    return f"""
SELECT tenant, trace_id, any(feature) AS feature, any(sampling_reason) AS sampling_reason,
    any(inclusion_probability) AS inclusion_probability
FROM {ddl.table("payloads")}
WHERE start_time >= now() - {{since_s:UInt32}}
    AND NOT has(sampling_reasons, 'conversation')  -- a kept follow-up's earlier turn: context, never judged
    AND (tenant, trace_id) NOT IN (
        SELECT tenant, trace_id FROM {ddl.table("scores")}
        WHERE run_name = '' AND scored_at >= now() - {{since_s:UInt32}})
GROUP BY tenant, trace_id
ORDER BY min(start_time)
LIMIT {{limit:UInt64}}"""


def recent_p95_sql(ddl: Ddl) -> str:
    """Params: window_s (UInt32). p95 per (feature, stage) over the production minutes of the last `window_s`
    seconds (an eval run's requests say nothing about what is slow for users)."""
    index = DURATION_LEVELS.index(0.95) + 1
    merge = DURATION_STATE.replace("(", "Merge(", 1)
    return f"""
SELECT feature, stage, {merge}(duration_q)[{index}] AS p95_ms
FROM {ddl.table(ROLLUP_TABLE)}
WHERE minute >= toStartOfMinute(now() - {{window_s:UInt32}}) AND minute <= now()  -- not spans stamped ahead
    AND eval_run = ''
GROUP BY feature, stage"""


def recent_request_durations_sql(ddl: Ddl) -> str:
    """Params: window_s (UInt32), per_feature (UInt32). The durations of the latest root spans per (tenant,
    feature) over the last `window_s` seconds, oldest first: what a restarted sampler seeds each feature's request
    p95 with, so a restart does not leave "slow" unjudged for a feature's first requests. Production traffic only,
    as the sampler's own measure (`ragmon.sampling.request_latency`)."""
    return f"""
SELECT tenant, feature, arrayReverse(groupArray(duration_ms)) AS durations_ms
FROM (
    SELECT tenant, feature, duration_ms
    FROM {ddl.table("spans")}
    WHERE {_ROOT} AND start_time >= now() - {{window_s:UInt32}} AND eval_run = ''
    ORDER BY start_time DESC
    LIMIT {{per_feature:UInt32}} BY tenant, feature
)
GROUP BY tenant, feature"""
