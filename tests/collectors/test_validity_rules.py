"""What the receiver acknowledges, the store keeps: one validity rule on both sides, and bodies the store's parser
reads as upb does.

- The span rule of `ragmon.collectors.validate` and the SQL's filter (`ragmon.sinks.normalise_sql`) keep the same
  spans, on both sides of every bound (ids, a missing start, start times before 2000 or from 2100, end before
  start): a request with one span of each kind, validated in Python and inserted raw into the SQL, keeps the same
  names. Spans stamped 1 ns or near 2**64 ns were acknowledged without a partial_success and then dropped by the
  spans TTL; they are now rejected with a reason (issue 37, finding 6).
- Bodies upb accepts and ClickHouse's Protobuf format refuses ("Protobuf messages are corrupted") or reads
  differently (the probe in `ragmon.collectors.validate`'s docstring): the receiver keeps upb's re-encoding, which
  the engine stores with exactly the spans the receiver counted (issue 37, finding 3).
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from ragmon.collectors import HttpReceiver
from ragmon.collectors.decode import parse_protobuf
from ragmon.collectors.validate import MAX_START_TIME_NS, MIN_START_TIME_NS, START_TIME_OUT_OF_RANGE, validate
from ragmon.sinks import Store, normalise_sql, open_store, otlp_views

from ragmon.otlp_encoding import varint
from tests.collectors.collector_fakes import RecordingConsumer
from tests.collectors.sql_store import SqlStore

PROTOBUF = {"Content-Type": "application/x-protobuf"}
NOW_NS = time.time_ns()
TRACE_ID = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")

# (name, trace id, span id, parent id, start, end): one span of each kind, each side of each bound.
EDGE_SPANS: list[tuple[str, bytes, bytes, bytes, int, int]] = [
    ("now", TRACE_ID, b"", b"", NOW_NS, NOW_NS + 5),
    ("zero-trace", bytes(16), b"", b"", NOW_NS, NOW_NS),
    ("short-trace", TRACE_ID[:15], b"", b"", NOW_NS, NOW_NS),
    ("zero-span", TRACE_ID, bytes(8), b"", NOW_NS, NOW_NS),
    ("short-parent", TRACE_ID, b"", b"\x01" * 7, NOW_NS, NOW_NS),
    ("zero-parent", TRACE_ID, b"", bytes(8), NOW_NS, NOW_NS),
    ("start-0", TRACE_ID, b"", b"", 0, 5),
    ("start-1ns", TRACE_ID, b"", b"", 1, 2),
    ("start-before-2000", TRACE_ID, b"", b"", MIN_START_TIME_NS - 1, MIN_START_TIME_NS),
    ("start-2000", TRACE_ID, b"", b"", MIN_START_TIME_NS, MIN_START_TIME_NS),
    ("start-last-before-2100", TRACE_ID, b"", b"", MAX_START_TIME_NS - 1, MAX_START_TIME_NS - 1),
    ("start-2100", TRACE_ID, b"", b"", MAX_START_TIME_NS, MAX_START_TIME_NS),
    ("start-2^32-s", TRACE_ID, b"", b"", (1 << 32) * 10**9, (1 << 32) * 10**9),
    ("start-2^63-1", TRACE_ID, b"", b"", (1 << 63) - 1, (1 << 63) - 1),
    ("start-2^63", TRACE_ID, b"", b"", 1 << 63, 1 << 63),
    ("start-2^64-1", TRACE_ID, b"", b"", (1 << 64) - 1, (1 << 64) - 1),
    ("end-before-start", TRACE_ID, b"", b"", NOW_NS, NOW_NS - 1),
    ("end-2^64-1", TRACE_ID, b"", b"", NOW_NS, (1 << 64) - 1),
]


def _request(spans: list[tuple[str, bytes, bytes, bytes, int, int]]) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for index, (name, trace_id, span_id, parent, start, end) in enumerate(spans, start=1):
        span = scope.spans.add()
        span.name, span.trace_id, span.parent_span_id = name, trace_id, parent
        span.span_id = span_id or struct.pack(">Q", index)
        span.start_time_unix_nano, span.end_time_unix_nano = start, end
    return request


def _names(body: bytes) -> set[str]:
    request = ExportTraceServiceRequest.FromString(body)
    return {span.name for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans}


def test_the_bounds_are_written_alike_in_the_receiver_and_the_store() -> None:
    assert (normalise_sql.MIN_START_TIME_NS, normalise_sql.MAX_START_TIME_NS) == (MIN_START_TIME_NS, MAX_START_TIME_NS)


def test_the_receiver_and_the_store_sql_keep_the_same_spans(store: SqlStore) -> None:
    body = _request(EDGE_SPANS).SerializeToString()
    kept = _names(validate(parse_protobuf(body), body).body)
    assert kept == {"now", "zero-parent", "start-2000", "start-last-before-2100", "end-2^64-1"}
    store.insert([("acme", body)])  # the raw request, invalid spans included: the SQL filters on its own
    assert {row["name"] for row in store.spans()} == kept


def test_out_of_range_start_times_get_a_partial_success(
    http_receiver: HttpReceiver, consumer: RecordingConsumer
) -> None:
    spans = [span for span in EDGE_SPANS if span[0] in ("now", "start-1ns", "start-2^64-1", "start-2^63")]
    with httpx.Client() as client:
        response = client.post(
            f"{http_receiver.endpoint}/v1/traces", content=_request(spans).SerializeToString(), headers=PROTOBUF
        )
    assert response.status_code == 200
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 3
    assert f"{START_TIME_OUT_OF_RANGE}=3" in partial.error_message
    assert [row["name"] for row in consumer.rows()] == ["now"]


@pytest.fixture
def real_store(chdb_engine_dir: Path) -> Iterator[Store]:
    opened = open_store(str(chdb_engine_dir), database=f"rules_{uuid.uuid4().hex[:10]}")
    otlp_views.install(opened)
    yield opened
    opened.close()


def test_what_is_acknowledged_outlives_the_spans_ttl(real_store: Store) -> None:
    # within the retention, or at the far bound: the TTL (toDateTime(start_time) + 30 days) must not expire them
    spans = [span for span in EDGE_SPANS if span[0] in ("now", "start-last-before-2100", "end-2^64-1")]
    spans += [span for span in EDGE_SPANS if span[0] in ("start-1ns", "start-2^64-1", "start-2^63", "start-2^32-s")]
    body = _request(spans).SerializeToString()
    validation = validate(parse_protobuf(body), body)
    assert validation.spans_accepted == 3
    real_store.insert_otlp([envelope(validation.body)], "rules-1")
    real_store.backend.execute(f"OPTIMIZE TABLE {real_store.topology.database}.spans FINAL")  # runs the TTL now
    stored = real_store.read("SELECT name FROM spans")
    assert sorted(row["name"] for row in stored) == sorted(_names(validation.body))


def envelope(body: bytes, tenant: str = "acme", seq: int = 1) -> bytes:
    from ragmon.sinks.envelope import seal

    return seal(body, tenant, seq)


# --- bodies the engine's Protobuf reader refuses or reads differently ------------------------------------------


def _tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def _len(field: int, payload: bytes) -> bytes:
    return _tag(field, 2) + varint(len(payload)) + payload


def _varint(field: int, value: int) -> bytes:
    return _tag(field, 0) + varint(value)


def _fixed32(field: int, value: int) -> bytes:
    return _tag(field, 5) + struct.pack("<I", value)


def _group(field: int, inner: bytes) -> bytes:
    return _tag(field, 3) + inner + _tag(field, 4)


def _body(*, span: bytes = b"", resource_spans: bytes = b"", request: bytes = b"", attribute: bytes = b"") -> bytes:
    """One valid span now, with extra wire bytes appended at the level named."""
    key_value = _len(1, b"k") + _len(2, _len(1, b"v"))
    span_bytes = (
        _len(1, TRACE_ID)
        + _len(2, b"\x01" * 8)
        + _len(5, b"poison-case")
        + _tag(7, 1)
        + struct.pack("<Q", NOW_NS)
        + _tag(8, 1)
        + struct.pack("<Q", NOW_NS + 1000)
        + _len(9, key_value)
        + attribute
        + span
    )
    return _len(1, _len(2, _len(2, span_bytes)) + resource_spans) + request


# From the probe (chDB 4.4): each parses in upb; the engine refused the first ones and read the last ones wrong.
POISON_BODIES = {
    "unknown group at the request": _body(request=_group(7, _varint(1, 3))),
    "nested unknown groups": _body(request=_group(7, _group(8, _varint(1, 1)))),
    "unknown group in ResourceSpans": _body(resource_spans=_group(9, _varint(1, 1))),
    "unknown group in a span": _body(span=_group(20, _varint(1, 1))),
    "resource_spans as a varint": _body(request=_varint(1, 3)),
    "scope_spans as fixed32": _body(resource_spans=_fixed32(2, 1)),
    "span name as a varint": _body(span=_varint(5, 1)),
    "start time as a varint": _body(span=_varint(7, 1)),
    "end time as fixed32": _body(span=_fixed32(8, 1)),
    "attributes as a varint": _body(span=_varint(9, 1)),
    "status as a varint": _body(span=_varint(15, 1)),
    "tenant field as a varint": _body(request=_varint(15, 3)),
    "status code beyond int32": _body(span=_len(15, _varint(3, 1 << 40))),
    "bool value 5": _body(attribute=_len(9, _len(1, b"b") + _len(2, _varint(2, 5)))),
    "double value as a varint": _body(attribute=_len(9, _len(1, b"b") + _len(2, _varint(4, 7)))),
    "10-byte varint past 64 bits": _body(request=_tag(7, 0) + b"\xff" * 9 + b"\x7f"),
    "unknown groups 50 deep": _body(request=_tag(7, 3) * 50 + _tag(7, 4) * 50),
    # read differently: the engine took these bytes as the start time, and dropped the span as ending before it
    "start time length-delimited": _body(span=_len(7, b"12345678")),
    "tenant field as a string": _body(request=_len(15, b"globex")),
}


@pytest.mark.parametrize("name", list(POISON_BODIES))
def test_a_body_the_engine_reads_otherwise_is_kept_as_upb_reads_it(name: str, store: SqlStore) -> None:
    body = POISON_BODIES[name]
    validation = validate(parse_protobuf(body), body)  # upb accepts it: the receiver acknowledges it
    assert validation.spans_accepted == 1 and validation.reencoded and validation.body != body
    store.insert([("acme", validation.body)])  # the engine takes what the receiver keeps ...
    rows = store.spans()
    assert [(row["name"], row["tenant"]) for row in rows] == [("poison-case", "acme")]  # ... as the receiver read it
    assert rows[0]["duration_ms"] == pytest.approx(0.001)


def test_a_canonical_body_is_kept_as_received() -> None:
    body = _request(EDGE_SPANS[:1]).SerializeToString()
    validation = validate(parse_protobuf(body), body)
    assert validation.body is body and not validation.reencoded


def test_the_http_receiver_acknowledges_a_poison_body_and_keeps_its_re_encoding(
    http_receiver: HttpReceiver, consumer: RecordingConsumer
) -> None:
    body = POISON_BODIES["unknown group in a span"]
    with httpx.Client() as client:
        response = client.post(f"{http_receiver.endpoint}/v1/traces", content=body, headers=PROTOBUF)
    assert response.status_code == 200
    assert not ExportTraceServiceResponse.FromString(response.content).HasField("partial_success")
    assert [row["name"] for row in consumer.rows()] == ["poison-case"]  # stored: the engine took the kept bytes
