"""ragmon's lean OTLP encoder produces the same messages as the official OpenTelemetry encoder."""

from __future__ import annotations

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as official_encode
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from ragmon._otlp import SpanEncoder


def _spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "enc-test", "deployment": "ü-1"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("scope-a", "1.2.3")
    other = provider.get_tracer("scope-b")
    with tracer.start_as_current_span("root", kind=SpanKind.SERVER, attributes={"feature": "qa", "n": -5}) as root:
        with tracer.start_as_current_span(
            "child ✓",
            kind=SpanKind.CLIENT,
            attributes={
                "s": "x" * 300,
                "b": True,
                "f": 0.125,
                "big": 2**62,
                "ids": ("a", "b"),
                "scores": (0.5, 0.25),
                "flags": (True, False),
                "ints": (1, -2),
            },
            links=[Link(root.get_span_context(), {"why": "retry"})],
        ) as child:
            child.add_event("token", {"index": 3})
            child.set_status(Status(StatusCode.ERROR, "boom"))
        with other.start_as_current_span("other scope"):
            pass
    return exporter.get_finished_spans()


def _by_span_id(request: ExportTraceServiceRequest) -> dict[str, dict]:
    out = {}
    for rs in request.resource_spans:
        resource = MessageToDict(rs.resource)
        for ss in rs.scope_spans:
            scope = MessageToDict(ss.scope)
            for span in ss.spans:
                out[span.span_id.hex()] = {"span": MessageToDict(span), "scope": scope, "resource": resource}
    return out


def test_lean_encoder_matches_the_official_one() -> None:
    spans = _spans()
    ours = ExportTraceServiceRequest.FromString(SpanEncoder().encode(spans))
    theirs = official_encode(spans)
    ours_by_id, theirs_by_id = _by_span_id(ours), _by_span_id(theirs)
    assert len(ours_by_id) == 3
    trace_flags = {format(s.context.span_id, "016x"): int(s.context.trace_flags) for s in spans}
    for span_id, ours_span in ours_by_id.items():
        # ragmon also sets bits 0-7 to the W3C trace flags, as the OTLP spec asks; the stock encoder leaves them 0.
        assert trace_flags[span_id] & 0x01  # sampled
        expected = theirs_by_id[span_id]["span"].pop("flags") | trace_flags[span_id]
        assert ours_span["span"].pop("flags") == expected
    assert ours_by_id == theirs_by_id


def test_encoder_caches_do_not_leak_between_values() -> None:
    encoder = SpanEncoder()
    spans = _spans()
    first = encoder.encode(spans)
    second = encoder.encode(spans)  # served partly from caches
    assert first == second


def test_scope_attributes_carry_the_drop_counter() -> None:
    body = SpanEncoder().encode(_spans(), {"ragmon.sdk.dropped_spans": 42})
    request = ExportTraceServiceRequest.FromString(body)
    scope = request.resource_spans[0].scope_spans[0].scope
    assert [(kv.key, kv.value.int_value) for kv in scope.attributes] == [("ragmon.sdk.dropped_spans", 42)]
