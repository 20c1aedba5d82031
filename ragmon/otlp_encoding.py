"""A lean OTLP/protobuf encoder for finished OpenTelemetry spans.

Why not the stock encoder: building protobuf message objects from Python costs more per span than creating the
span (docs/results.md); the Python OTLP exporter thereby doubles an instrumented request's CPU. This module writes the
wire format directly, and spends its effort where a RAG span stream repeats itself:

- whole attribute fields (tag, length, key, value) for short strings and ints are cached: models, features,
  operation names, token counts recur on every request. The caches are bounded and start over when full, so a
  stream of one-off values (session ids) cannot pin them;
- a float attribute is a fixed-size field: its bytes before the 8-byte double are cached per key;
- span names, the trace id of consecutive spans, the status/flags tail of the span are cached likewise;
- the SDK span is read through its own fields (its public properties copy events and links on every read), its
  ids and timestamps packed with one `struct` call each.

Output is a serialised `ExportTraceServiceRequest` (opentelemetry/proto/collector/trace/v1), the same message the
official encoder builds — schema URLs, scope attributes, nested maps (kvlist), None as an empty value, drop
counters — which the tests check by decoding both with the official protobuf classes. Deliberate differences:
span flags also carry the W3C trace flags in bits 0-7, as the OTLP spec asks (the stock encoder leaves them 0);
a link carries its trace state; an attribute OTLP cannot carry (an int beyond int64, an object of unknown type)
is left out and counted in its span's `dropped_attributes_count`, instead of failing the batch or being sent
wrong; a lone surrogate in a string becomes "?" instead of failing the batch.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace.span import DEFAULT_TRACE_STATE

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT64_MASK = (1 << 64) - 1
_CACHE_MAX_ENTRIES = 8192  # per cache; a full cache is cleared, not frozen, so it follows the stream
_CACHE_MAX_VALUE_CHARS = 96  # longer strings are rarely repeated (questions, documents, ids of many kinds)

_pack_double = struct.Struct("<d").pack
_pack_fixed32_field = struct.Struct("<BBI").pack  # a two-byte tag, then a little-endian fixed32
_pack_id_field = struct.Struct(">BBQ").pack  # tag, length 8, big-endian 64-bit id
_pack_two_id_fields = struct.Struct(">BBQBBQ").pack  # span id and parent span id in one call
_pack_time_fields = struct.Struct("<BQBQ").pack  # start and end time, fixed64 each
_pack_event_time = struct.Struct("<BQ").pack

# Field tags: field_number << 3 | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
_TAG_SPAN_ID = 0x12  # Span.span_id = 2
_TAG_PARENT_ID = 0x22  # Span.parent_span_id = 4
_TAG_START = 0x39  # Span.start_time_unix_nano = 7, fixed64
_TAG_END = 0x41  # Span.end_time_unix_nano = 8, fixed64
_SPAN_TRACE_STATE = b"\x1a"  # Span.trace_state = 3
_SPAN_NAME = b"\x2a"  # Span.name = 5
_SPAN_ATTRIBUTE = b"\x4a"  # Span.attributes = 9
_SPAN_DROPPED_ATTRIBUTES = b"\x50"  # 10
_SPAN_EVENT = b"\x5a"  # 11
_SPAN_DROPPED_EVENTS = b"\x60"  # 12
_SPAN_LINK = b"\x6a"  # 13
_SPAN_DROPPED_LINKS = b"\x70"  # 14
_SPAN_STATUS = b"\x7a"  # 15
_EMPTY_STATUS = b"\x7a\x00"  # receivers expect the field present, as the official encoder sends it
_FLAGS_TAG = (0x85, 0x01)  # Span.flags = 16, fixed32
_KIND_FIELDS = tuple(b"\x30" + bytes((kind + 1,)) for kind in range(5))  # API INTERNAL=0 → OTLP INTERNAL=1
_FLAG_HAS_IS_REMOTE = 0x100
_FLAG_IS_REMOTE = 0x200

_ONE_BYTE = tuple(bytes((n,)) for n in range(0x80))


def varint(value: int) -> bytes:
    """Base-128 varint of a non-negative int below 2**64."""
    if value < 0x80:
        return _ONE_BYTE[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    return tag + varint(len(payload)) + payload


def _utf8(text: str) -> bytes:
    # Lone surrogates cannot be sent as protobuf strings; replacing them keeps the span instead of the batch failing.
    return text.encode("utf-8", "replace")


def _any_value(value: Any) -> bytes | None:
    """The body of an AnyValue message, or None for a value OTLP cannot carry (the attribute is then dropped)."""
    kind = type(value)
    if kind is str:
        return _field(b"\x0a", _utf8(value))
    if kind is bool:
        return b"\x10\x01" if value else b"\x10\x00"
    if kind is int:
        if _INT64_MIN <= value <= _INT64_MAX:
            return b"\x18" + varint(value & _UINT64_MASK)
        return None  # int64 on the wire; masking would send a different number
    if kind is float:
        return b"\x21" + _pack_double(value)
    if value is None:
        return b""  # an empty AnyValue, as the official encoder sends None
    if kind is tuple or kind is list:
        return _array_value(value)
    if kind is dict:
        return _kvlist_value(value)
    if kind is bytes:
        return _field(b"\x3a", value)
    # Subclasses (str enums, IntEnum, numpy floats) and other containers, by what they are.
    if isinstance(value, bool):
        return _any_value(bool(value))
    if isinstance(value, int):
        return _any_value(int(value))
    if isinstance(value, float):
        return _any_value(float(value))
    if isinstance(value, str):
        return _any_value(str(value))
    if isinstance(value, bytes):
        return _any_value(bytes(value))
    if isinstance(value, Mapping):
        return _kvlist_value(value)
    if isinstance(value, Sequence):  # as the official encoder: a bytearray is an array of ints
        return _array_value(value)
    return None


def _array_value(values: Iterable[Any]) -> bytes | None:
    items = []
    for item in values:
        encoded = _any_value(item)
        if encoded is None:
            return None  # one bad element drops the attribute, as it does in the official encoder
        items.append(_field(b"\x0a", encoded))  # ArrayValue.values = 1
    return _field(b"\x2a", b"".join(items))  # AnyValue.array_value = 5


def _kvlist_value(mapping: Mapping[Any, Any]) -> bytes | None:
    items = []
    for key, item in mapping.items():
        encoded = _any_value(item)
        if encoded is None:
            return None
        items.append(_field(b"\x0a", _field(b"\x0a", _utf8(str(key))) + _field(b"\x12", encoded)))
    return _field(b"\x32", b"".join(items))  # AnyValue.kvlist_value = 6, KeyValueList.values = 1


class _AttributeEncoder:
    """Encodes a mapping's entries as KeyValue fields under one tag (span, event, link, resource attributes).

    Not thread-safe (its caches are unlocked): one per encoder, one encoder per export thread.
    """

    __slots__ = ("_float_heads", "_keys", "_scalars", "_str_tuples", "_tag")

    def __init__(self, tag: bytes) -> None:
        self._tag = tag
        self._keys: dict[str, bytes] = {}  # key -> encoded KeyValue.key field
        # (key, value) -> whole field, for short str and int values only. An int never equals a str, so the two
        # share one dict; bools (True == 1) and floats (1.0 == 1) never enter it.
        self._scalars: dict[tuple[str, Any], bytes] = {}
        self._float_heads: dict[str, bytes] = {}  # key -> the field's bytes before its 8-byte double
        self._str_tuples: dict[tuple[str, tuple[Any, ...]], bytes] = {}  # (key, tuple of short str) -> field

    def encode_into(self, out: list[bytes], attributes: Mapping[str, Any]) -> int:
        """Append one field per attribute to `out`; return how many attributes OTLP could not carry."""
        scalars = self._scalars
        float_heads = self._float_heads
        append = out.append
        dropped = 0
        for item in attributes.items():  # the (key, value) item itself is the cache key: no tuple to build
            value = item[1]
            kind = type(value)
            if (kind is str and len(value) <= _CACHE_MAX_VALUE_CHARS) or kind is int:
                encoded = scalars.get(item)
                if encoded is None:
                    encoded = self._scalar_miss(item[0], value)
                    if encoded is None:
                        dropped += 1
                        continue
            elif kind is float:
                head = float_heads.get(item[0])
                if head is None:
                    head = self._float_head(item[0])
                encoded = head + _pack_double(value)
            else:
                encoded = self._other(item[0], value, kind)
                if encoded is None:
                    dropped += 1
                    continue
            append(encoded)
        return dropped

    def _other(self, key: str, value: Any, kind: type) -> bytes | None:
        if kind is str:  # documents, messages: rarely repeated, never cached
            return self._long_string(key, value)
        if kind is tuple:  # ("stop",): finish reasons, small label lists
            return self._tuple(key, value)
        return self._field(key, value)

    def _key_field(self, key: str) -> bytes:
        key_field = self._keys.get(key)
        if key_field is None:
            key_field = _field(b"\x0a", _utf8(key if type(key) is str else str(key)))
            if len(self._keys) >= _CACHE_MAX_ENTRIES:
                self._keys.clear()
            self._keys[key] = key_field
        return key_field

    def _field(self, key: str, value: Any) -> bytes | None:
        body = _any_value(value)
        if body is None:
            return None
        return _field(self._tag, self._key_field(key) + _field(b"\x12", body))

    def _scalar_miss(self, key: str, value: str | int) -> bytes | None:
        encoded = self._field(key, value)
        if encoded is not None:
            if len(self._scalars) >= _CACHE_MAX_ENTRIES:
                self._scalars.clear()
            self._scalars[(key, value)] = encoded
        return encoded

    def _long_string(self, key: str, value: str) -> bytes:
        data = _utf8(value)
        value_field = b"\x0a" + varint(len(data)) + data  # AnyValue.string_value = 1
        key_value = self._key_field(key) + b"\x12" + varint(len(value_field)) + value_field  # KeyValue.value = 2
        return self._tag + varint(len(key_value)) + key_value

    def _tuple(self, key: str, value: tuple[Any, ...]) -> bytes | None:
        # Only tuples of strings are cached: (True,) == (1,) == (1.0,), but no other tuple equals a string tuple.
        try:
            encoded = self._str_tuples.get((key, value))
        except TypeError:  # an unhashable element (a nested mapping)
            return self._field(key, value)
        if encoded is None:
            encoded = self._field(key, value)
            if (
                encoded is not None
                and len(value) <= 8
                and all(type(item) is str and len(item) <= _CACHE_MAX_VALUE_CHARS for item in value)
            ):
                if len(self._str_tuples) >= _CACHE_MAX_ENTRIES:
                    self._str_tuples.clear()
                self._str_tuples[(key, value)] = encoded
        return encoded

    def _float_head(self, key: str) -> bytes:
        key_field = self._key_field(key)
        # KeyValue = key field + value field (tag 0x12, length 9, AnyValue.double_value tag 0x21, 8 bytes)
        head = self._tag + varint(len(key_field) + 11) + key_field + b"\x12\x09\x21"
        if len(self._float_heads) >= _CACHE_MAX_ENTRIES:
            self._float_heads.clear()
        self._float_heads[key] = head
        return head


def _raw_attributes(attributes: Any) -> tuple[Mapping[str, Any], int]:
    """The plain dict inside the SDK's BoundedAttributes (its Mapping methods are Python-level) and its drops."""
    if not attributes:
        return {}, 0
    return getattr(attributes, "_dict", attributes), getattr(attributes, "dropped", 0)


class SpanEncoder:
    """Turns batches of ReadableSpan into serialised ExportTraceServiceRequest bytes.

    Not thread-safe (its caches are unlocked): one encoder per export thread.
    """

    def __init__(self) -> None:
        self._span_attributes = _AttributeEncoder(_SPAN_ATTRIBUTE)
        self._event_attributes = _AttributeEncoder(b"\x1a")  # Event.attributes = 3
        self._link_attributes = _AttributeEncoder(b"\x22")  # Link.attributes = 4
        self._other_attributes = _AttributeEncoder(b"\x0a")  # Resource.attributes = 1
        self._scope_attributes = _AttributeEncoder(b"\x1a")  # InstrumentationScope.attributes = 3
        # id -> (object, encoded): holding the object keeps its id from being reused by another one
        self._resources: dict[int, tuple[Any, bytes, bytes]] = {}
        self._scopes: dict[int, tuple[Any, tuple[bytes, bytes]]] = {}
        self._names: dict[str, bytes] = {}
        self._tails: dict[int, bytes] = {}  # span flags -> empty status + flags fields
        self._last_trace_id = -1
        self._last_trace_field = b""

    def encode(self, spans: Sequence[ReadableSpan], scope_attributes: Mapping[str, Any] | None = None) -> bytes:
        """`scope_attributes` are added to every scope of this request (ragmon's running drop counter)."""
        # resource id -> (resource, scope body -> spans). Consecutive spans almost always share both objects.
        groups: dict[int, tuple[Any, dict[bytes, tuple[bytes, list[bytes]]]]] = {}
        last_resource: Any = groups  # a sentinel no span carries
        last_scope: Any = groups
        bodies: list[bytes] = []
        span_field = self._span
        for span in spans:
            try:
                resource, scope = span._resource, span._instrumentation_scope
            except AttributeError:  # another ReadableSpan implementation: the public view
                resource, scope = span.resource, span.instrumentation_scope
            if resource is not last_resource or scope is not last_scope:
                last_resource, last_scope = resource, scope
                entry = groups.get(id(resource))
                if entry is None:
                    entry = groups[id(resource)] = (resource, {})
                scope_body, schema_field = self._scope(scope)
                group = entry[1].get(scope_body)
                if group is None:
                    group = entry[1][scope_body] = (schema_field, [])
                bodies = group[1]
            bodies.append(span_field(span))
        extra: list[bytes] = []
        if scope_attributes:  # they change between batches (drop counters): not cached
            self._scope_attributes.encode_into(extra, scope_attributes)
        extra_bytes = b"".join(extra)
        out = []
        for resource, scopes in groups.values():
            resource_field, resource_schema = self._resource(resource)
            parts = [resource_field]
            for scope_body, (schema_field, spans_fields) in scopes.items():
                scope_field = _field(b"\x0a", scope_body + extra_bytes)  # ScopeSpans.scope = 1
                parts.append(_field(b"\x12", scope_field + b"".join(spans_fields) + schema_field))
            parts.append(resource_schema)
            out.append(_field(b"\x0a", b"".join(parts)))  # ExportTraceServiceRequest.resource_spans = 1
        return b"".join(out)

    def _resource(self, resource: Any) -> tuple[bytes, bytes]:
        """(ResourceSpans.resource field, ResourceSpans.schema_url field)."""
        cached = self._resources.get(id(resource))
        if cached is not None and cached[0] is resource:
            return cached[1], cached[2]
        body: list[bytes] = []
        schema = b""
        if resource is not None:
            attributes, dropped = _raw_attributes(resource.attributes)
            dropped += self._other_attributes.encode_into(body, attributes)
            if dropped:
                body.append(b"\x10" + varint(dropped))  # Resource.dropped_attributes_count = 2
            if resource.schema_url:
                schema = _field(b"\x1a", _utf8(resource.schema_url))  # ResourceSpans.schema_url = 3
        encoded = _field(b"\x0a", b"".join(body))  # ResourceSpans.resource = 1
        self._resources[id(resource)] = (resource, encoded, schema)
        return encoded, schema

    def _scope(self, scope: Any) -> tuple[bytes, bytes]:
        """(InstrumentationScope body, ScopeSpans.schema_url field), cached per scope object."""
        cached = self._scopes.get(id(scope))
        if cached is not None and cached[0] is scope:
            return cached[1]
        body: list[bytes] = []
        schema = b""
        if scope is not None:
            if scope.name:
                body.append(_field(b"\x0a", _utf8(scope.name)))
            if scope.version:
                body.append(_field(b"\x12", _utf8(scope.version)))
            attributes, dropped = _raw_attributes(getattr(scope, "attributes", None))
            dropped += self._scope_attributes.encode_into(body, attributes)
            if dropped:
                body.append(b"\x20" + varint(dropped))  # InstrumentationScope.dropped_attributes_count = 4
            if scope.schema_url:
                schema = _field(b"\x1a", _utf8(scope.schema_url))  # ScopeSpans.schema_url = 3
        result = (b"".join(body), schema)
        if len(self._scopes) >= _CACHE_MAX_ENTRIES:
            self._scopes.clear()
        self._scopes[id(scope)] = (scope, result)
        return result

    def _span(self, span: ReadableSpan) -> bytes:
        """One `ScopeSpans.spans` field."""
        try:
            # The SDK span's own fields and the plain dict / deque inside its BoundedAttributes / BoundedLists:
            # the public properties copy events and links on every read, and those containers' __len__ and
            # iterators are Python-level (the iterator copies under a lock).
            context, parent, name, kind = span._context, span._parent, span._name, span._kind
            start_time, end_time, status = span._start_time, span._end_time, span._status
            attributes: Any = span._attributes
            events: Any = span._events
            links: Any = span._links
            raw_attributes, dropped_attributes = attributes._dict, attributes.dropped
            event_items, dropped_events = events._dq, events.dropped
            link_items, dropped_links = links._dq, links.dropped
        except AttributeError:  # another ReadableSpan implementation, or one built by hand: the public view
            context, parent, name, kind = span.context, span.parent, span.name, span.kind
            start_time, end_time, status = span.start_time, span.end_time, span.status
            raw_attributes, event_items, link_items = span.attributes or {}, span.events, span.links
            dropped_attributes = getattr(span, "dropped_attributes", 0)
            dropped_events = getattr(span, "dropped_events", 0)
            dropped_links = getattr(span, "dropped_links", 0)
        assert context is not None
        trace_id, span_id, _, trace_flags, trace_state, _ = context  # SpanContext is a tuple
        if trace_id != self._last_trace_id:  # a request's spans arrive together: encode its id once
            self._last_trace_id = trace_id
            self._last_trace_field = b"\x0a\x10" + trace_id.to_bytes(16, "big")  # Span.trace_id = 1
        # Bits 0-7 carry the W3C trace flags (the OTLP spec asks for them; the stock Python encoder omits them).
        flags = (trace_flags & 0xFF) | _FLAG_HAS_IS_REMOTE
        has_trace_state = trace_state is not DEFAULT_TRACE_STATE and trace_state
        if parent is None:
            parts = [self._last_trace_field, _pack_id_field(_TAG_SPAN_ID, 8, span_id)]
            if has_trace_state:
                parts.append(_field(_SPAN_TRACE_STATE, _utf8(trace_state.to_header())))
        else:
            if parent[2]:  # is_remote
                flags |= _FLAG_IS_REMOTE
            if has_trace_state:  # keep field order: trace_state (3) sits between span id (2) and parent (4)
                parts = [
                    self._last_trace_field,
                    _pack_id_field(_TAG_SPAN_ID, 8, span_id),
                    _field(_SPAN_TRACE_STATE, _utf8(trace_state.to_header())),
                    _pack_id_field(_TAG_PARENT_ID, 8, parent[1]),
                ]
            else:
                parts = [
                    self._last_trace_field,
                    _pack_two_id_fields(_TAG_SPAN_ID, 8, span_id, _TAG_PARENT_ID, 8, parent[1]),
                ]
        name_field = self._names.get(name)
        if name_field is None:  # span names repeat ("chat gpt-4o-mini"): encode each once
            name_field = _field(_SPAN_NAME, _utf8(name))
            if len(self._names) >= _CACHE_MAX_ENTRIES:
                self._names.clear()
            self._names[name] = name_field
        parts.append(name_field)
        parts.append(_KIND_FIELDS[kind._value_])
        parts.append(_pack_time_fields(_TAG_START, start_time or 0, _TAG_END, end_time or 0))
        if raw_attributes:
            dropped_attributes += self._span_attributes.encode_into(parts, raw_attributes)
        if dropped_attributes:
            parts.append(_SPAN_DROPPED_ATTRIBUTES + varint(dropped_attributes))
        if event_items:
            for event in event_items:
                parts.append(_field(_SPAN_EVENT, self._event(event)))
        if dropped_events:
            parts.append(_SPAN_DROPPED_EVENTS + varint(dropped_events))
        if link_items:
            for link in link_items:
                parts.append(_field(_SPAN_LINK, self._link(link)))
        if dropped_links:
            parts.append(_SPAN_DROPPED_LINKS + varint(dropped_links))
        code = status._status_code._value_
        description = status._description
        if code or description:
            body = _field(b"\x12", _utf8(description)) if description else b""  # Status.message = 2
            parts.append(_field(_SPAN_STATUS, body + b"\x18" + varint(code)))  # Status.code = 3
            parts.append(_pack_fixed32_field(*_FLAGS_TAG, flags))
        else:
            tail = self._tails.get(flags)
            if tail is None:
                tail = self._tails[flags] = _EMPTY_STATUS + _pack_fixed32_field(*_FLAGS_TAG, flags)
            parts.append(tail)
        body = b"".join(parts)
        return b"\x12" + varint(len(body)) + body  # ScopeSpans.spans = 2

    def _event(self, event: Any) -> bytes:
        parts = [_pack_event_time(0x09, event.timestamp), _field(b"\x12", _utf8(event.name))]  # time = 1, name = 2
        attributes, dropped = _raw_attributes(event.attributes)
        dropped += self._event_attributes.encode_into(parts, attributes)
        if dropped:
            parts.append(b"\x20" + varint(dropped))  # Event.dropped_attributes_count = 4
        return b"".join(parts)

    def _link(self, link: Any) -> bytes:
        context = link.context
        parts = [b"\x0a\x10", context.trace_id.to_bytes(16, "big"), _pack_id_field(0x12, 8, context.span_id)]
        if context.trace_state:
            parts.append(_field(b"\x1a", _utf8(context.trace_state.to_header())))
        attributes, dropped = _raw_attributes(link.attributes)
        dropped += self._link_attributes.encode_into(parts, attributes)
        if dropped:
            parts.append(b"\x28" + varint(dropped))  # Link.dropped_attributes_count = 5
        flags = _FLAG_HAS_IS_REMOTE | (_FLAG_IS_REMOTE if context.is_remote else 0)
        parts.append(b"\x35" + struct.pack("<I", flags))  # Link.flags = 6, fixed32
        return b"".join(parts)


def encode_spans(spans: Iterable[ReadableSpan]) -> bytes:
    """One-shot helper (tests, tools): a serialised ExportTraceServiceRequest for `spans`."""
    return SpanEncoder().encode(list(spans))
