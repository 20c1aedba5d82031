"""The per-minute rollup's input: one call per nested run of a stage, counted once the trace's upper spans are in.

Why not a materialised view on `spans` (store versions 1–4 had one): a view sees each inserted block alone, and a
span's ancestors arrive after it — a parent ends, and is exported, after its children; `SimpleSpanProcessor` sends
spans one by one. Whether LlamaIndex's `OpenAI.chat` is a second LLM call or the inside of `OpenAI.predict` is
known only once the spans above it are stored. So the agent rolls up a range of ingest sequence numbers once the
tail sampler has decided every trace with a span in it — the root arrived plus the grace period, or the decision
timeout passed (`ragmon.pipeline.rollups`) — with one INSERT … SELECT per range and a deterministic deduplication
token, so a range rolled up again after a crash is dropped like a re-sent batch. The sampler's per-range pass is
the one place that already waits for traces to be whole; the report lags by that wait (two to three seconds; at
most the roll-up's maximum delay while a trace whose root never arrives is pending).

The rules, per span of the range, against the spans of its trace stored from the range's start on:
- a span is a call unless an ancestor has its stage: the outermost span of a nested run is the call, with its
  duration and status (inner spans stay stored, and in the trace's waterfall);
- tokens and cost count on a span that carries usage unless a same-stage ancestor carries usage too (a wrapper
  without usage around the client call that has it: the client call's; both with usage: the outer one's);
- TTFT likewise: the outermost span of the run that has one;
- a trace is evaluation traffic (`eval_run`) when any of its spans is: an eval run's spans carry the marker, a
  downstream service's spans in the same trace may not;
- a trace's calls count under its release and environment: those of its earliest span that has one (the app's
  outermost span; a downstream service in the same trace has a version of its own).

How, in the engine, per trace: its spans in start order (a parent starts no later than its children; at equal
starts the longer first); each span's parent position from one dense numbering of ids then parent ids; one fold
that gives each span the stage bits above it (and those above it that carry usage or a TTFT) from its parent's
entry. The fold copies its accumulator per span, quadratic in a trace's spans, so it walks a trace's first
`MAX_WALKED_SPANS` spans; the rest count as calls. What the arrays carry is kept narrow, as copying it is most of
the query's cost: span ids as 64-bit hashes, the stage as its bit (a stage outside `STAGES`, which only rows
written by hand can have, is rolled up as 'other'), the status as a flag — each ~5% of the query. Duplicates are
not collapsed: a span re-sent in another batch (a re-sent batch the token drops) counts again, as it did under the
view, and sorting them out was another ~5%. Cost: `benchmarks/rollup.py` (beside the view's plain aggregation over the
same ranges; docs/results.md); one range per two seconds at most
(`ragmon.pipeline.rollups`).
"""

from __future__ import annotations

from ragmon.sinks.schema import DURATION_STATE, ROLLUP_COLUMNS, ROLLUP_TABLE, TTFT_STATE, Ddl

from ragmon.model import STAGES

MAX_WALKED_SPANS = 4096

# One bit per stage; a stage the normaliser does not produce gets bit 7 (rows written by hand may have one).
_STAGE_NAMES = ", ".join(f"'{stage}'" for stage in STAGES)
_STAGE_BITS = ", ".join(str(1 << i) for i in range(len(STAGES)))
# A span's own entry: its stage bit; the same bit 8 places up if it carries usage, 16 places up if it has a TTFT.
_OWN = (
    f"toUInt32(transform(toString(stage), [{_STAGE_NAMES}], [{_STAGE_BITS}], 128)"
    " * (1 + 256 * (input_tokens + output_tokens + cached_input_tokens > 0 OR cost_usd IS NOT NULL)"
    " + 65536 * (ttft_ms IS NOT NULL)))"
)
_LOW_24 = 0xFFFFFF

# A span as the per-trace arrays hold it: a plain tuple (a named one costs a conversion per span, ~10% of the query).
_FIELDS = (
    "start_time", "duration_ms", "span_id", "parent_span_id", "own", "ingest_seq", "feature", "model",
    "failed", "ttft_ms", "input_tokens", "output_tokens", "cached_input_tokens", "cost_usd",
)  # fmt: skip


def _at(field: str, of: str = "s") -> str:
    return f"{of}.{_FIELDS.index(field) + 1}"


def rollup_sql(ddl: Ddl) -> str:
    """INSERT … SELECT into the minute rollup. Params (UInt64): seq_from, seq_to — the range rolled up, inclusive;
    context_to — the spans of its traces stored from seq_from to context_to are read for ancestors (the agent: up
    to the last it has stored; later ranges included, as parents are stored after their children)."""
    columns = ", ".join(name for name, _ in ROLLUP_COLUMNS)
    in_range = "BETWEEN {seq_from:UInt64} AND {seq_to:UInt64}"
    hashed = {
        "own": _OWN,
        "span_id": "cityHash64(span_id)",
        "parent_span_id": "cityHash64(parent_span_id)",
        "failed": "status = 'error'",
    }
    source = ", ".join(hashed.get(f, f) for f in _FIELDS)
    ttft_state = TTFT_STATE.replace("(", "State(", 1)
    return f"""
INSERT INTO {ddl.table(ROLLUP_TABLE)} ({columns})
SELECT tenant, {_at("feature")} AS feature, transform(bit, [{_STAGE_BITS}], [{_STAGE_NAMES}], 'other') AS stage,
    {_at("model")} AS model, eval_run, release, environment,
    toStartOfMinute(toDateTime({_at("start_time")})) AS minute,
    countIf(call) AS spans, countIf(call AND {_at("failed")}) AS errors,
    {DURATION_STATE.replace("(", "StateIf(", 1)}({_at("duration_ms")}, call) AS duration_q,
    -- NULL where it does not count (not -If): the rollup's TTFT state is typed over Nullable(Float32)
    {ttft_state}(if(ttft_counts, {_at("ttft_ms")}, NULL)) AS ttft_q,
    sumIf({_at("input_tokens")}, usage_counts) AS input_tokens,
    sumIf({_at("output_tokens")}, usage_counts) AS output_tokens,
    sumIf({_at("cached_input_tokens")}, usage_counts) AS cached_input_tokens,
    sumIf(ifNull({_at("cost_usd")}, 0), usage_counts) AS cost_usd,
    countIf(usage_counts AND {_at("cost_usd")} IS NOT NULL) AS cost_known
FROM (
    SELECT tenant, eval_run, release, environment, s,
        bitAnd({_at("own")}, 255) AS bit,
        bitShiftRight(walked, 32) AS above,
        bitAnd(above, bit) = 0 AS call,
        bitAnd(bitShiftRight({_at("own")}, 8), bit) != 0 AND bitAnd(bitShiftRight(above, 8), bit) = 0 AS usage_counts,
        bitAnd(bitShiftRight({_at("own")}, 16), bit) != 0 AND bitAnd(bitShiftRight(above, 16), bit) = 0 AS ttft_counts
    FROM (
        SELECT tenant, trace_id,
            -- the trace's: another service's span in an eval run's trace (sent without the marker) is eval traffic
            anyIf(eval_run, eval_run != '') AS eval_run,
            -- the trace's release: its outermost span's that has one (a downstream service's is its own)
            argMinIf(release, start_time, release != '') AS release,
            argMinIf(environment, start_time, environment != '') AS environment,
            arraySort(x -> ({_at("start_time", "x")}, -{_at("duration_ms", "x")}), groupArray(({source}))) AS spans,
            length(spans) AS n,
            -- each span's parent's position among them (0: the parent is not among the trace's stored spans)
            arrayMap(d -> if(d <= n, d, 0), arraySlice(arrayEnumerateDense(arrayConcat(
                arrayMap(x -> {_at("span_id", "x")}, spans), arrayMap(x -> {_at("parent_span_id", "x")}, spans))),
                n + 1)) AS parent_at,
            -- per span: above << 32 | (above | own), `above` being what its parent's entry passes down
            arrayResize(arrayFold(
                (acc, p, own) -> arrayPushBack(acc, bitOr(
                    bitShiftLeft(bitAnd(acc[p], {_LOW_24}), 32), bitOr(bitAnd(acc[p], {_LOW_24}), own))),
                arraySlice(parent_at, 1, {MAX_WALKED_SPANS}),
                arraySlice(arrayMap(x -> {_at("own", "x")}, spans), 1, {MAX_WALKED_SPANS}),
                CAST([], 'Array(UInt64)')), n, 0) AS walks
        FROM (
            SELECT {", ".join(f for f in _FIELDS if f not in ("own", "failed"))}, stage, status, tenant, trace_id,
                eval_run, release, environment
            FROM {ddl.table("spans")}
            WHERE ingest_seq BETWEEN {{seq_from:UInt64}} AND {{context_to:UInt64}}
                AND (tenant, trace_id) IN (
                    SELECT tenant, trace_id FROM {ddl.table("spans")} WHERE ingest_seq {in_range})
        )
        GROUP BY tenant, trace_id
    )
    ARRAY JOIN spans AS s, walks AS walked
    WHERE {_at("ingest_seq")} {in_range}
)
WHERE call OR usage_counts OR ttft_counts
GROUP BY tenant, feature, stage, model, eval_run, release, environment, minute"""
