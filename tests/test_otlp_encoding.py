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

from ragmon.otlp_encoding import SpanEncoder


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


# -- awkward values: decoded with the official protobuf classes, compared with the official encoder ---------------
def _compare_with_official(
    spans, *, ignore_dropped_attributes: bool = False, encoder: SpanEncoder | None = None
) -> dict[str, dict]:
    """Our message and the official one, span by span, equal up to the documented differences; ours returned."""
    body = (encoder or SpanEncoder()).encode(spans)
    ours_by_id = _by_span_id(ExportTraceServiceRequest.FromString(body))
    theirs_by_id = _by_span_id(official_encode(spans))
    assert ours_by_id.keys() == theirs_by_id.keys()
    flags = {format(s.context.span_id, "016x"): int(s.context.trace_flags) for s in spans}
    for span_id, ours in ours_by_id.items():
        ours = {**ours, "span": dict(ours["span"])}
        theirs = {**theirs_by_id[span_id], "span": dict(theirs_by_id[span_id]["span"])}
        assert ours["span"].pop("flags") == theirs["span"].pop("flags") | flags[span_id]
        if ignore_dropped_attributes:
            ours["span"].pop("droppedAttributesCount", None)
        assert ours == theirs
    return ours_by_id


def _provider(**limits: int) -> tuple[TracerProvider, InMemorySpanExporter]:
    from opentelemetry.sdk.trace import SpanLimits

    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "awkward", "empty": "", "🙂": "ok"}, schema_url="https://s/1"),
        span_limits=SpanLimits(**limits),
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_awkward_attribute_values_round_trip() -> None:
    provider, exporter = _provider()
    tracer = provider.get_tracer("scope-x", "0.1", schema_url="https://scope/2", attributes={"scope.attr": 7})
    values = {
        "unicode": "ünïcødé 漢字 🙂 \u0000 nul",
        "empty": "",
        "none": None,
        "long": "é" * 5000,  # two UTF-8 bytes per char: a multi-byte length prefix
        "int.max": 2**63 - 1,
        "int.min": -(2**63),
        "int.neg": -1,
        "zero": 0,
        "float.inf": float("inf"),
        "float.neg_zero": -0.0,
        "float.tiny": 5e-324,
        "bool.false": False,
        "bytes": b"\x00\xff raw",
        "empty.tuple": (),
        "strs": ("a", "", "漢"),
        "mixed.array": ("x", 1, 2.5, True),
        "nested": {"k": "v", "n": 3, "inner": {"deep": [1, 2]}, "list": ["a", None]},
        "none.in.array": (None, "y"),
        "": "empty key",
    }
    with tracer.start_as_current_span("awkward ✓", attributes=values) as span:
        span.add_event("evt", {"i": 1, "s": "ü", "arr": (1.5, 2.5)})
        span.add_event("no attributes")
        span.set_status(Status(StatusCode.ERROR, "boom: ✗"))
    with tracer.start_as_current_span("ok") as span:
        span.set_status(Status(StatusCode.OK))
    ours = _compare_with_official(exporter.get_finished_spans())
    by_name = {entry["span"]["name"]: entry for entry in ours.values()}
    assert by_name["awkward ✓"]["span"]["status"] == {"code": "STATUS_CODE_ERROR", "message": "boom: ✗"}
    assert by_name["ok"]["span"]["status"] == {"code": "STATUS_CODE_OK"}


def test_int_beyond_int64_is_dropped_and_counted_not_wrapped() -> None:
    provider, exporter = _provider()
    with provider.get_tracer("t").start_as_current_span("big", attributes={"big": 2**64 + 5, "ok": 1, "neg": -(2**70)}):
        pass
    (span,) = exporter.get_finished_spans()
    request = ExportTraceServiceRequest.FromString(SpanEncoder().encode([span]))
    encoded = request.resource_spans[0].scope_spans[0].spans[0]
    assert [(kv.key, kv.value.int_value) for kv in encoded.attributes] == [("ok", 1)]
    assert encoded.dropped_attributes_count == 2
    _compare_with_official([span], ignore_dropped_attributes=True)  # the official encoder drops them uncounted


def test_span_limits_drops_are_carried() -> None:
    provider, exporter = _provider(max_span_attributes=2, max_events=1, max_links=1, max_event_attributes=1)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("a") as first:
        pass
    links = [Link(first.get_span_context(), {"n": 1}), Link(first.get_span_context(), {"n": 2})]
    with tracer.start_as_current_span("b", attributes={"a": 1, "b": 2, "c": 3}, links=links) as span:
        span.add_event("dropped: the list keeps the newest")
        span.add_event("kept", {"x": 1, "y": 2})
    ours = _compare_with_official(exporter.get_finished_spans())
    (b_span,) = [entry["span"] for entry in ours.values() if entry["span"]["name"] == "b"]
    assert b_span["droppedAttributesCount"] == 1
    assert b_span["droppedEventsCount"] == 1 and b_span["droppedLinksCount"] == 1
    assert b_span["events"][0]["droppedAttributesCount"] == 1


def test_remote_parent_and_trace_state() -> None:
    from opentelemetry import trace as trace_api
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    provider, exporter = _provider()
    remote = SpanContext(
        trace_id=0x0102030405060708090A0B0C0D0E0F10,
        span_id=0x1112131415161718,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("vendor", "v1"), ("other@tenant", "x")]),
    )
    parent_context = trace_api.set_span_in_context(NonRecordingSpan(remote))
    with provider.get_tracer("t").start_as_current_span("child", context=parent_context):
        pass
    (span,) = exporter.get_finished_spans()
    request = ExportTraceServiceRequest.FromString(SpanEncoder().encode([span]))
    encoded = request.resource_spans[0].scope_spans[0].spans[0]
    assert encoded.trace_id == remote.trace_id.to_bytes(16, "big")
    assert encoded.parent_span_id == remote.span_id.to_bytes(8, "big")
    assert encoded.trace_state == "vendor=v1,other@tenant=x"
    assert encoded.flags == 0x300 | 0x01  # context has is_remote, is remote, sampled
    _compare_with_official([span])


def test_cached_values_keep_their_types_across_spans() -> None:
    # True == 1 == 1.0 and hash alike: a cache keyed by value alone would send one as the other.
    provider, exporter = _provider()
    tracer = provider.get_tracer("t")
    for value in (1, True, 1.0, "1", (True,), (1,), ("1",), 1, True, 1.0, ("1",), (1,)):
        with tracer.start_as_current_span("s", attributes={"v": value}):
            pass
    spans = exporter.get_finished_spans()
    encoder = SpanEncoder()
    first = ExportTraceServiceRequest.FromString(encoder.encode(spans))
    second = ExportTraceServiceRequest.FromString(encoder.encode(spans))  # now served from the caches
    assert first == second
    kinds = [span.attributes[0].value.WhichOneof("value") for span in second.resource_spans[0].scope_spans[0].spans]
    assert kinds == ["int_value", "bool_value", "double_value", "string_value"] + ["array_value"] * 3 + [
        "int_value",
        "bool_value",
        "double_value",
        "array_value",
        "array_value",
    ]
    _compare_with_official(spans)


def test_full_caches_start_over_and_stay_correct(monkeypatch) -> None:
    import ragmon.otlp_encoding as otlp

    monkeypatch.setattr(otlp, "_CACHE_MAX_ENTRIES", 4)
    provider, exporter = _provider()
    tracer = provider.get_tracer("t")
    for i in range(20):
        with tracer.start_as_current_span(f"name-{i % 7}", attributes={f"k{i % 5}": f"v{i}", "n": i, "f": i / 3}):
            pass
    spans = exporter.get_finished_spans()
    encoder = SpanEncoder()
    for _ in range(3):  # the first pass fills and restarts the caches, the others are served from them
        _compare_with_official(spans, encoder=encoder)
    assert len(encoder._span_attributes._scalars) <= 4 and len(encoder._names) <= 4


def test_hand_built_readable_span_uses_the_public_view() -> None:
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.trace import SpanContext, TraceFlags

    context = SpanContext(0xABC, 0xDEF, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    span = ReadableSpan(
        name="by hand",
        context=context,
        attributes={"a": "b", "n": 2},
        events=(Event("e", {"k": "v"}, timestamp=5),),
        kind=SpanKind.PRODUCER,
        start_time=1,
        end_time=2,
    )
    ours = _compare_with_official([span])
    assert next(iter(ours.values()))["span"]["kind"] == "SPAN_KIND_PRODUCER"


def test_lone_surrogate_is_replaced_not_fatal() -> None:
    # Valid Python, invalid UTF-8: protobuf strings cannot carry it. The span must still go out.
    provider, exporter = _provider()
    with provider.get_tracer("t").start_as_current_span("s", attributes={"text": "a\ud800b", "n": 1}):
        pass
    request = ExportTraceServiceRequest.FromString(SpanEncoder().encode(exporter.get_finished_spans()))
    attributes = request.resource_spans[0].scope_spans[0].spans[0].attributes
    assert [(kv.key, kv.value.WhichOneof("value")) for kv in attributes] == [
        ("text", "string_value"),
        ("n", "int_value"),
    ]
    assert attributes[0].value.string_value == "a?b"
