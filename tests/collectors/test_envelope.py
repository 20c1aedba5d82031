"""The receive path's per-request work (validate, seal, OTLP/JSON conversion) and the SQL's contract."""

from __future__ import annotations

import base64
from typing import Any

import grpc
import pytest
from chdb import session as chdb_session
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from ragmon.collectors import ExportHandler, GrpcReceiver, validate
from ragmon.collectors.errors import JsonDecodeError
from ragmon.collectors.otlp_json import request_from_json
from ragmon.sinks.envelope import seal
from ragmon.sinks.normalise_sql import content_select, normalise_select, spans_select

from ragmon.model import CONTENT_COLUMNS, SPAN_COLUMNS
from tests.collectors.collector_fakes import API_KEYS, RecordingConsumer, sdk_request
from tests.collectors.sql_store import SqlStore


def one_span(tracer: Any) -> None:
    with tracer.start_as_current_span("only") as span:
        span.set_attribute("ragmon.tenant", "spoof")


def test_valid_body_is_passed_through_unchanged() -> None:
    body = sdk_request(one_span).SerializeToString()
    validation = validate(ExportTraceServiceRequest.FromString(body), body)
    assert validation.body is body and validation.spans_accepted == 1 and validation.error_message() == ""


def test_seal_appends_tenant_and_sequence_as_envelope_fields() -> None:
    body = sdk_request(one_span).SerializeToString()
    sealed = seal(body, "acme", 300)
    assert sealed.startswith(body)
    # An OTLP parser keeps fields 15 and 16 as unknown fields and still sees the same request.
    parsed = ExportTraceServiceRequest.FromString(sealed)
    parsed.DiscardUnknownFields()
    assert parsed == ExportTraceServiceRequest.FromString(body)
    with pytest.raises(ValueError):
        seal(body, "acme", -1)


def test_select_columns_are_exactly_the_models(chdb: chdb_session.Session, store: SqlStore) -> None:
    for select, columns in ((spans_select, SPAN_COLUMNS), (content_select, CONTENT_COLUMNS)):
        described = chdb.query(f"DESCRIBE ({select(f'{store.db}.norm')})", "TabSeparated").bytes().decode()
        got = [tuple(line.split("\t")[:2]) for line in described.splitlines()]
        assert got == list(columns)
    for limit in ("max_attribute_chars", "max_content_chars"):
        with pytest.raises(ValueError, match=limit):
            normalise_select("x", **{limit: 0})


def test_every_value_kind_becomes_text(store: SqlStore) -> None:
    request = sdk_request(one_span)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    values = {
        "zero": AnyValue(int_value=0),
        "off": AnyValue(bool_value=False),
        "empty": AnyValue(string_value=""),
        "ratio": AnyValue(double_value=0.5),
        "blob": AnyValue(bytes_value=b"\x00\x01"),
        "tags": AnyValue(array_value=ArrayValue(values=[AnyValue(string_value='a"/b'), AnyValue(int_value=2)])),
        "meta": AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="k", value=AnyValue(bool_value=True))])),
        "unset": AnyValue(),
    }
    span.attributes.extend(KeyValue(key=k, value=v) for k, v in values.items())
    store.insert([("t", validate(request).body)])
    (row,) = store.spans()
    assert row["attributes"] == {
        "zero": "0",
        "off": "false",
        "empty": "",
        "ratio": "0.5",
        "blob": base64.b64encode(b"\x00\x01").decode(),
        "tags": '["a\\"/b",2]',
        "meta": '{"k":true}',
    }
    assert row["tenant"] == "t"  # never the span's ragmon.tenant


def test_otlp_json_malformed_span_is_counted_and_bad_structure_raises() -> None:
    good = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001000000000",
    }
    malformed = {**good, "name": 5}
    bad_parent = {**good, "parentSpanId": "zz"}
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [good, malformed, bad_parent]}]}]}
    request, dropped = request_from_json(doc)
    validation = validate(request, malformed_spans=dropped)
    assert validation.rejected_by_reason == {"malformed_span": 1, "invalid_parent_span_id": 1}
    assert validation.spans_total == 3 and validation.spans_accepted == 1
    with pytest.raises(JsonDecodeError, match="resourceSpans"):
        request_from_json({"resourceSpans": [{"scopeSpans": "nope"}]})


def test_tenant_attributes_are_counted_without_walking_attributes(consumer: RecordingConsumer) -> None:
    ingest = ExportHandler(consumer)
    ingest.export_body(sdk_request(one_span).SerializeToString(), encoding="protobuf", tenant="acme")
    assert ingest.counters.get("ragmon_receiver_tenant_attributes_dropped_total") == 1
    assert consumer.requests[0][0] == "acme" and consumer.requests[0][2] == 1


def test_grpc_undecodable_message_is_invalid_argument(grpc_receiver: GrpcReceiver) -> None:
    with grpc.insecure_channel(grpc_receiver.endpoint) as channel:
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,
            response_deserializer=None,
        )
        with pytest.raises(grpc.RpcError) as caught:
            export(b"\x0a\xff\xff\xff\xff\x0f", metadata=(("x-api-key", API_KEYS["acme"]),), timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert trace_service_pb2_grpc is not None
