"""OTLP/JSON → the protobuf `ExportTraceServiceRequest`, so JSON bodies take the same path as protobuf ones.

OTLP/JSON differs from protobuf's canonical JSON mapping (see the OTLP spec, "JSON Protobuf Encoding"): trace
and span ids are hex strings (case-insensitive), not base64; keys are lowerCamelCase; 64-bit integers may be
strings or numbers; enums are integers. Base64 ids are tolerated (some exporters use protobuf's mapping by
mistake) rather than losing data.

A document whose structure is wrong outside spans raises `JsonDecodeError` (the whole request is bad, 400).
A span object with wrongly typed fields is dropped alone and counted (``malformed_span``); a span with bad ids
or timestamps is converted with ids that `ragmon.collectors.validate.validate` rejects, so it is counted there under
the right reason.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from ragmon.collectors.errors import JsonDecodeError

__all__ = ["request_from_json"]

_MAX_VALUE_DEPTH: Final = 32  # nested arrays/kvlists; protobuf enforces its own limit
_STATUS_NAMES: Final = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_INVALID_ID: Final = b"\x00"  # one byte: no valid id has that length, so validation rejects it by reason


class _BadSpan(Exception):
    """A span object whose fields have the wrong type or shape."""


def request_from_json(document: Any) -> tuple[ExportTraceServiceRequest, int]:
    """(request, spans dropped as malformed) from a parsed OTLP/JSON ExportTraceServiceRequest."""
    if not isinstance(document, dict):
        raise JsonDecodeError("expected a JSON object (ExportTraceServiceRequest)")
    request = ExportTraceServiceRequest()
    malformed = 0
    for r_index, resource_spans in enumerate(_list(document.get("resourceSpans"), "resourceSpans")):
        where = f"resourceSpans[{r_index}]"
        if not isinstance(resource_spans, dict):
            raise JsonDecodeError(f"{where}: expected an object")
        resource = resource_spans.get("resource") or {}
        if not isinstance(resource, dict):
            raise JsonDecodeError(f"{where}.resource: expected an object")
        out_resource = request.resource_spans.add()
        try:
            _attributes(resource.get("attributes"), out_resource.resource.attributes)
        except _BadSpan as exc:
            raise JsonDecodeError(f"{where}.resource.attributes: {exc}") from exc
        for s_index, scope_spans in enumerate(_list(resource_spans.get("scopeSpans"), f"{where}.scopeSpans")):
            if not isinstance(scope_spans, dict):
                raise JsonDecodeError(f"{where}.scopeSpans[{s_index}]: expected an object")
            out_scope = out_resource.scope_spans.add()
            for span in _list(scope_spans.get("spans"), f"{where}.scopeSpans[{s_index}].spans"):
                out_span = out_scope.spans.add()
                try:
                    _span(span, out_span)
                except (_BadSpan, ValueError, TypeError, AttributeError, RecursionError):
                    del out_scope.spans[-1]
                    malformed += 1
    return request, malformed


def _span(span: Any, out: Any) -> None:
    if not isinstance(span, dict):
        raise _BadSpan("span: expected an object")
    out.trace_id = _id(span.get("traceId"), 16)
    out.span_id = _id(span.get("spanId"), 8)
    parent = span.get("parentSpanId")
    if parent:
        out.parent_span_id = _id(parent, 8)
    out.start_time_unix_nano = _uint64(span.get("startTimeUnixNano"))
    out.end_time_unix_nano = _uint64(span.get("endTimeUnixNano"))
    name = span.get("name", "")
    if not isinstance(name, str):
        raise _BadSpan("name: expected a string")
    out.name = name
    kind = span.get("kind", 0)
    if type(kind) is int:
        out.kind = kind
    status = span.get("status") or {}
    if not isinstance(status, dict):
        raise _BadSpan("status: expected an object")
    message = status.get("message", "")
    if not isinstance(message, str):
        raise _BadSpan("status.message: expected a string")
    out.status.code = _status_code(status.get("code", 0))
    out.status.message = message
    _attributes(span.get("attributes"), out.attributes)
    events = span.get("events")
    if events:
        for event in _list_in_span(events):
            event = _as_dict(event)
            out_event = out.events.add()
            event_name = event.get("name", "")
            if not isinstance(event_name, str):
                raise _BadSpan("event name: expected a string")
            out_event.name = event_name
            out_event.time_unix_nano = _uint64(event.get("timeUnixNano"))
            _attributes(event.get("attributes"), out_event.attributes)


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise JsonDecodeError(f"{where}: expected an array")
    return value


def _list_in_span(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _BadSpan("expected an array")
    return value


def _as_dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _BadSpan("expected an object")
    return value


def _id(value: Any, size: int) -> bytes:
    """Hex id (case-insensitive) → bytes; base64 tolerated; an invalid one → bytes validation rejects."""
    if not isinstance(value, str):
        return _INVALID_ID if value is not None else b""
    if len(value) == 2 * size:
        try:
            return bytes.fromhex(value)
        except ValueError:
            return _INVALID_ID
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return _INVALID_ID
    return raw if len(raw) == size else _INVALID_ID


def _uint64(value: Any) -> int:
    """int64/uint64 fields: decimal strings or numbers in OTLP/JSON; missing means 0."""
    if value is None:
        return 0
    kind = type(value)
    if kind is int:
        number = int(value)
    elif kind is str:
        number = int(value)  # ValueError → malformed span
    elif kind is float and value.is_integer():
        number = int(value)
    else:
        raise _BadSpan("expected an integer")
    if not 0 <= number < 2**64:
        raise _BadSpan("expected a uint64")
    return number


def _status_code(value: Any) -> int:
    if type(value) is int:
        return int(value)
    if isinstance(value, str):  # enum names are invalid OTLP/JSON, but unambiguous: accept them
        return _STATUS_NAMES[value] if value in _STATUS_NAMES else int(value)
    raise _BadSpan("status.code: expected an integer")


def _attributes(values: Any, out: Any) -> None:
    if not values:
        return
    if not isinstance(values, list):
        raise _BadSpan("attributes: expected an array")
    for kv in values:
        if not isinstance(kv, dict):
            raise _BadSpan("attribute: expected an object")
        key = kv.get("key")
        if not isinstance(key, str):
            raise _BadSpan("attribute key: expected a string")
        value = kv.get("value")
        if value is None:
            continue
        if not isinstance(value, dict):
            raise _BadSpan(f"attribute {key!r}: expected an AnyValue object")
        item = out.add()
        item.key = key
        _value(value, item.value, 0)


def _value(value: dict[str, Any], out: AnyValue, depth: int) -> None:
    if depth > _MAX_VALUE_DEPTH:
        raise _BadSpan("attribute value nested too deeply")
    if "stringValue" in value:
        text = value["stringValue"]
        if not isinstance(text, str):
            raise _BadSpan("stringValue: expected a string")
        out.string_value = text
    elif "intValue" in value:
        number = value["intValue"]
        if type(number) is bool or not isinstance(number, int | str | float):
            raise _BadSpan("intValue: expected an integer")
        if isinstance(number, float) and not number.is_integer():
            raise _BadSpan("intValue: expected an integer")
        out.int_value = int(number)
    elif "doubleValue" in value:
        number = value["doubleValue"]
        if type(number) is bool or not isinstance(number, int | float | str):
            raise _BadSpan("doubleValue: expected a number")
        out.double_value = float(number)  # "NaN", "Infinity" are valid proto3 JSON
    elif "boolValue" in value:
        flag = value["boolValue"]
        if type(flag) is not bool:
            raise _BadSpan("boolValue: expected true or false")
        out.bool_value = flag
    elif "arrayValue" in value:
        out.array_value.SetInParent()  # an empty array is still an array
        for item in _list_in_span((_as_dict(value["arrayValue"] or {})).get("values") or []):
            _value(_as_dict(item), out.array_value.values.add(), depth + 1)
    elif "kvlistValue" in value:
        out.kvlist_value.SetInParent()
        for pair in _list_in_span((_as_dict(value["kvlistValue"] or {})).get("values") or []):
            pair = _as_dict(pair)
            key = pair.get("key")
            if not isinstance(key, str):
                raise _BadSpan("kvlist key: expected a string")
            entry: KeyValue = out.kvlist_value.values.add()
            entry.key = key
            _value(_as_dict(pair.get("value") or {}), entry.value, depth + 1)
    elif "bytesValue" in value:
        data = value["bytesValue"]
        if not isinstance(data, str):
            raise _BadSpan("bytesValue: expected base64 text")
        out.bytes_value = base64.b64decode(data, validate=True)  # binascii.Error is a ValueError
