"""Hostile input for the OTLP/gRPC receiver (a smaller budget than HTTP): INVALID_ARGUMENT for what does not
parse, RESOURCE_EXHAUSTED for oversized messages, OK (maybe with partial_success) otherwise — and a good export
right after is delivered byte for byte."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from ragmon.collectors import GrpcReceiver

from tests.faults.faults_support import TALLY, Recorder, good_body, request, scaled, span

pytestmark = pytest.mark.faults

METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
MAX_BODY = 64 * 1024
BASE = request(*(span(f"grpc-{i}") for i in range(3))).SerializeToString()


@pytest.fixture(scope="module")
def export(fuzz_grpc: GrpcReceiver) -> Iterator[grpc.UnaryUnaryMultiCallable]:
    channel = grpc.insecure_channel(fuzz_grpc.endpoint)
    yield channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
    channel.close()


def _call(export: grpc.UnaryUnaryMultiCallable, body: bytes, *, fault: bool) -> tuple[grpc.StatusCode, bytes]:
    try:
        reply = export(body, timeout=10)
    except grpc.RpcError as exc:
        code = exc.code()  # type: ignore[attr-defined]
        TALLY.record(f"grpc:{code.name}", fault=fault)
        return code, b""
    partial = ExportTraceServiceResponse.FromString(reply).partial_success.rejected_spans > 0
    TALLY.record("OK", fault=fault, partial=partial)
    return grpc.StatusCode.OK, reply


def _still_serving(export: grpc.UnaryUnaryMultiCallable, recorder: Recorder) -> None:
    body, span_ids = good_body(2)
    before = recorder.count()
    code, _ = _call(export, body, fault=False)
    TALLY.good_sent += 1
    assert code == grpc.StatusCode.OK
    assert recorder.since(before) == [("default", body, len(span_ids))]
    TALLY.good_delivered += 1


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    body = bytearray(BASE)
    for _ in range(draw(st.integers(1, 3))):
        if not body:
            break
        at = draw(st.integers(0, len(body) - 1))
        kind = draw(st.sampled_from(["flip", "truncate", "retag"]))
        if kind == "flip":
            body[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del body[at:]
        else:
            body[at] = (draw(st.integers(1, 15)) << 3) | (body[at] & 0x07)
    return bytes(body)


@settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=scaled(30, 300),
    suppress_health_check=[HealthCheck.too_slow],
)
@given(body=st.one_of(st.binary(max_size=1024), mutated()))
def test_random_and_mutated_messages(export: grpc.UnaryUnaryMultiCallable, recorder: Recorder, body: bytes) -> None:
    since = recorder.count()
    code, _ = _call(export, body, fault=True)
    assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT), code
    if code != grpc.StatusCode.OK:
        assert recorder.count() == since
    _still_serving(export, recorder)


def test_oversized_message_is_resource_exhausted(export: grpc.UnaryUnaryMultiCallable, recorder: Recorder) -> None:
    s = span("big", attributes=0)
    s.attributes.append(KeyValue(key="big", value=AnyValue(string_value="x" * (MAX_BODY + 1))))
    since = recorder.count()
    code, _ = _call(export, request(s).SerializeToString(), fault=True)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert recorder.count() == since
    _still_serving(export, recorder)


def test_invalid_utf8_is_invalid_argument(export: grpc.UnaryUnaryMultiCallable, recorder: Recorder) -> None:
    body = request(span("\u00e9\u00e9\u00e9\u00e9")).SerializeToString()
    body = body.replace("\u00e9\u00e9".encode(), b"\xff\xfe\xc3\x28")
    code, _ = _call(export, body, fault=True)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    _still_serving(export, recorder)


def test_invalid_spans_are_partial_success(export: grpc.UnaryUnaryMultiCallable, recorder: Recorder) -> None:
    bad = span("bad")
    bad.trace_id = bytes(16)
    good = span("good")
    since = recorder.count()
    code, reply = _call(export, request(good, bad).SerializeToString(), fault=True)
    assert code == grpc.StatusCode.OK
    assert ExportTraceServiceResponse.FromString(reply).partial_success.rejected_spans == 1
    [(_, _, count)] = recorder.since(since)
    assert count == 1
    _still_serving(export, recorder)
