"""A minimal OTLP → SQL normaliser for the store's tests, independent of `ragmon.sinks.normalise_sql`.

The store only needs *some* Protobuf schema, input columns and two SELECTs producing `SPAN_COLUMNS` and
`CONTENT_COLUMNS` (over the rows of a third, `normalise_select`) to test `Store.install_otlp_views` /
`insert_otlp`; the real ones (every dialect, the price table) live in `sinks/normalise_sql.py`. This one reads
ragmon's own attribute names only, and an envelope that wraps an `ExportTraceServiceRequest` body with the tenant
and the write-ahead-log position.

`seal(body, tenant, ingest_seq)` wraps already-encoded request bytes without re-parsing them: a nested message is
just a length-delimited field, so field 3 of the envelope *is* the request body.
"""

from __future__ import annotations

from ragmon.otlp_encoding import varint
from tests.support.synth import encode_otlp_request as encode_request  # noqa: F401  (re-exported for the tests)

PROTO_MESSAGE = "Envelope"

# Arrays hold leaves only (no recursion: ClickHouse maps the message to nested Tuples, which must be finite).
PROTO_SCHEMA = """syntax = "proto3";
message Leaf { string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4; }
message LeafArray { repeated Leaf values = 1; }
message AnyValue { string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4;
  LeafArray array_value = 5; }
message KeyValue { string key = 1; AnyValue value = 2; }
message Resource { repeated KeyValue attributes = 1; }
message Status { string message = 2; int32 code = 3; }
message Span { bytes trace_id = 1; bytes span_id = 2; bytes parent_span_id = 4; string name = 5;
  fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8; repeated KeyValue attributes = 9;
  Status status = 15; }
message ScopeSpans { repeated Span spans = 2; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; }
message Request { repeated ResourceSpans resource_spans = 1; }
message Envelope { string tenant = 1; uint64 ingest_seq = 2; Request request = 3; }
"""

_LEAF = "Tuple(string_value String, bool_value Bool, int_value Int64, double_value Float64)"
_KV = "Array(Tuple(key String, value Tuple(string_value String, bool_value Bool, int_value Int64,"
_KV += f" double_value Float64, array_value Tuple(values Array({_LEAF})))))"
INPUT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "String"),
    ("ingest_seq", "UInt64"),
    (
        "request",
        f"Tuple(resource_spans Array(Tuple(resource Tuple(attributes {_KV}), scope_spans Array(Tuple(spans"
        " Array(Tuple(trace_id String, span_id String, parent_span_id String, name String,"
        f" start_time_unix_nano UInt64, end_time_unix_nano UInt64, attributes {_KV},"
        " status Tuple(message String, code Int32))))))))",
    ),
)

CONTENT_KEYS = (
    "ragmon.question",
    "ragmon.answer",
    "ragmon.retrieval.document_texts",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)
_CONTENT_ARRAY = "[" + ", ".join(f"'{k}'" for k in CONTENT_KEYS) + "]"

_LEAF_TEXT = (
    "multiIf(l.string_value != '', toJSONString(l.string_value), l.int_value != 0, toString(l.int_value),"
    " l.double_value != 0, toString(l.double_value), l.bool_value, 'true', 'null')"
)
_VALUE_TEXT = (
    "multiIf(v.string_value != '', v.string_value, notEmpty(v.array_value.values),"
    f" concat('[', arrayStringConcat(arrayMap(l -> {_LEAF_TEXT}, v.array_value.values), ','), ']'),"
    " v.int_value != 0, toString(v.int_value), v.double_value != 0, toString(v.double_value),"
    " v.bool_value, 'true', '')"
)


def normalise_select(source_table: str) -> str:
    """One row per span with its attributes as a Map; what both other SELECTs read."""
    return f"""
SELECT i.tenant AS env_tenant, i.ingest_seq AS env_seq, sp,
    mapFromArrays(sp.attributes.key, arrayMap(v -> {_VALUE_TEXT}, sp.attributes.value)) AS a,
    mapFromArrays(rs.resource.attributes.key, arrayMap(v -> {_VALUE_TEXT}, rs.resource.attributes.value)) AS r
FROM {source_table} AS i
ARRAY JOIN i.request.resource_spans AS rs
ARRAY JOIN rs.scope_spans AS ss
ARRAY JOIN ss.spans AS sp"""


_STAGE = (
    "if(a['ragmon.stage'] != '', a['ragmon.stage'], multiIf(a['gen_ai.operation.name'] = 'embeddings', 'embed',"
    " a['gen_ai.operation.name'] = 'retrieval', 'search', a['gen_ai.operation.name'] = 'rerank', 'rerank',"
    " a['gen_ai.operation.name'] = 'chat', 'generate', a['gen_ai.operation.name'] = 'execute_tool', 'tool', 'other'))"
)


def spans_select(source_table: str) -> str:
    return f"""
SELECT env_tenant AS tenant, lower(hex(sp.trace_id)) AS trace_id, lower(hex(sp.span_id)) AS span_id,
    lower(hex(sp.parent_span_id)) AS parent_span_id, sp.name AS name, {_STAGE} AS stage,
    a['ragmon.feature'] AS feature, a['ragmon.user'] AS user, a['ragmon.session'] AS session,
    r['service.name'] AS service,
    fromUnixTimestamp64Nano(toInt64(sp.start_time_unix_nano), 'UTC') AS start_time,
    (toInt64(sp.end_time_unix_nano) - toInt64(sp.start_time_unix_nano)) / 1e6 AS duration_ms,
    ['unset', 'ok', 'error'][sp.status.code + 1] AS status, a['error.type'] AS error_type,
    a['gen_ai.request.model'] AS model, a['gen_ai.provider.name'] AS provider,
    toUInt32OrZero(a['gen_ai.usage.input_tokens']) AS input_tokens,
    toUInt32OrZero(a['gen_ai.usage.output_tokens']) AS output_tokens,
    toUInt32OrZero(a['gen_ai.usage.cache_read.input_tokens']) AS cached_input_tokens,
    toFloat64OrNull(a['ragmon.cost_usd']) AS cost_usd,
    toFloat32OrNull(a['ragmon.retrieval.top1_score']) AS top1_score,
    toFloat32OrNull(a['ragmon.retrieval.similarity_gap']) AS similarity_gap,
    toFloat32OrNull(a['ragmon.embedding.query_norm_deviation']) AS norm_deviation,
    toFloat32OrNull(a['ragmon.generate.time_to_first_token_ms']) AS ttft_ms,
    JSONExtract(a['ragmon.retrieval.document_ids'], 'Array(String)') AS retrieved_ids,
    JSONExtract(a['ragmon.retrieval.document_scores'], 'Array(Float32)') AS retrieved_scores,
    mapFilter((k, v) -> NOT has({_CONTENT_ARRAY}, k), a) AS attributes,
    env_seq AS ingest_seq
FROM {source_table}"""


def content_select(source_table: str) -> str:
    return f"""
SELECT env_tenant AS tenant, lower(hex(sp.trace_id)) AS trace_id, lower(hex(sp.span_id)) AS span_id,
    lower(hex(sp.parent_span_id)) AS parent_span_id, {_STAGE} AS stage, sp.name AS name,
    fromUnixTimestamp64Nano(toInt64(sp.start_time_unix_nano), 'UTC') AS start_time,
    (toInt64(sp.end_time_unix_nano) - toInt64(sp.start_time_unix_nano)) / 1e6 AS duration_ms,
    ['unset', 'ok', 'error'][sp.status.code + 1] AS status,
    mapFilter((k, v) -> has({_CONTENT_ARRAY}, k), a) AS content,
    JSONExtract(a['ragmon.retrieval.document_ids'], 'Array(String)') AS retrieved_ids,
    JSONExtract(a['ragmon.retrieval.document_scores'], 'Array(Float32)') AS retrieved_scores,
    env_seq AS ingest_seq
FROM {source_table}
WHERE notEmpty(content) OR notEmpty(retrieved_ids)"""


def seal(body: bytes, tenant: str, ingest_seq: int) -> bytes:
    """An `Envelope` around an encoded ExportTraceServiceRequest, without re-parsing it."""
    name = tenant.encode()
    out = b"\x0a" + varint(len(name)) + name if name else b""
    if ingest_seq:
        out += b"\x10" + varint(ingest_seq)
    return out + b"\x1a" + varint(len(body)) + body
