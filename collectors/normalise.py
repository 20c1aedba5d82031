"""OTLP spans (protobuf message or OTLP/JSON document) → one columnar `SpanBatch`, validating span by span.

Two thin walkers, one per encoding, iterate the request once and hand each span's fields and attribute dict
to one `_Builder`, which routes attributes (dialect functions in `collectors.dialects`, content, the rest),
computes cost and retrieval scores, and appends one row tuple; rows are transposed into columns at the end.
A span with invalid ids or timestamps is rejected alone, counted by reason (OTLP ``partial_success``).

Decisions worth knowing:

- feature: span ``ragmon.feature``, else resource ``ragmon.feature``, else the service name — so spans from apps
  that do not name features still group per service, consistently across batches. (Feature is *not* copied from
  other spans of the trace: they may arrive in another batch, and a column must not depend on batching.)
- stage: ``ragmon.stage`` > ``gen_ai.operation.name`` > ``openinference.span.kind`` > OpenLLMetry kinds; a root
  span without one is ``request``, any other ``other``.
- cost: ``ragmon.cost_usd`` or ``llm.cost.total`` when given; else from the price table when the span has a
  model and usage; NULL when the model is unknown or there is no usage.
- similarity_gap: rank-1 minus rank-10 score (or the last one when fewer); NULL with fewer than two scores.
- error_type: ``error.type``, else the first exception event's ``exception.type``; ``_OTHER`` (the OTel
  fallback value) for an error status without either.
- attributes: unmapped span attributes, strings verbatim, other values JSON; plus ``service.version`` and
  ``deployment.environment[.name]`` from the resource, ``exception.message`` and ``otel.status_description``.
  Bytes values become base64 text. ``ragmon.tenant`` is dropped and counted: the tenant comes from the API key.
- content: captured text (see `dialects.CONTENT_KEYS`) plus exception stack traces.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from typing import Any, Final

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collectors import dialects as D
from collectors.errors import JsonDecodeError
from ragmon import attributes as A
from ragmon.model import SPAN_COLUMNS, SpanBatch
from ragmon.pricing import PriceTable, default_price_table

__all__ = [
    "REJECT_REASONS",
    "NormaliseOptions",
    "NormaliseResult",
    "normalise_json",
    "normalise_protobuf",
]

# Reasons a single span is rejected (counter label values; stable, documented).
INVALID_TRACE_ID: Final = "invalid_trace_id"
INVALID_SPAN_ID: Final = "invalid_span_id"
INVALID_PARENT_SPAN_ID: Final = "invalid_parent_span_id"
MISSING_START_TIME: Final = "missing_start_time"
END_BEFORE_START: Final = "end_before_start"
MALFORMED_SPAN: Final = "malformed_span"  # OTLP/JSON only: a span object with wrongly typed fields
REJECT_REASONS: Final = (
    INVALID_TRACE_ID,
    INVALID_SPAN_ID,
    INVALID_PARENT_SPAN_ID,
    MISSING_START_TIME,
    END_BEFORE_START,
    MALFORMED_SPAN,
)

_STATUS: Final = ("unset", "ok", "error")
_ZERO_TRACE: Final = bytes(16)
_ZERO_SPAN: Final = bytes(8)
_UINT32_MAX: Final = 2**32 - 1
_RESOURCE_KEPT: Final = ("service.version", "deployment.environment.name", "deployment.environment")
_RERANK_INPUT_PREFIX: Final = A.OI_RERANKER_INPUT_DOCUMENTS + "."
_DOC_ID_SCORE_SUFFIXES: Final = (".document.id", ".document.score")
_MAX_VALUE_DEPTH: Final = 32  # nested arrays/kvlists in OTLP/JSON; protobuf enforces its own limit


@lru_cache(maxsize=1)
def _shipped_prices() -> PriceTable:
    return default_price_table()


@dataclass(frozen=True, slots=True)
class NormaliseOptions:
    """Limits and tables for normalisation; `price_table=None` means ragmon's shipped table."""

    max_attribute_chars: int = 4096
    max_content_chars: int = 65_536
    price_table: PriceTable | None = None
    default_service: str = "unknown_service"

    def prices(self) -> PriceTable:
        return self.price_table if self.price_table is not None else _shipped_prices()


@dataclass(slots=True)
class NormaliseResult:
    batch: SpanBatch
    received_spans: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> spans
    truncated_values: int = 0
    tenant_attributes_dropped: int = 0

    @property
    def rejected_spans(self) -> int:
        return sum(self.rejected.values())

    def error_message(self) -> str:
        """A human-readable reason for OTLP partial_success; '' when nothing was rejected."""
        if not self.rejected:
            return ""
        reasons = ", ".join(f"{reason}={count}" for reason, count in sorted(self.rejected.items()))
        return f"rejected {self.rejected_spans} of {self.received_spans} spans ({reasons})"


@dataclass(frozen=True, slots=True)
class _Resource:
    service: str
    feature: str
    kept: dict[str, str]  # resource attributes copied onto every span's attributes


class _Builder:
    """Accumulates row tuples (column order of SPAN_COLUMNS without tenant, then content)."""

    def __init__(self, options: NormaliseOptions) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.result = NormaliseResult(SpanBatch())
        self.max_attribute_chars = options.max_attribute_chars
        self.max_content_chars = options.max_content_chars
        self.prices = options.prices()
        self.default_service = options.default_service

    def reject(self, reason: str) -> None:
        rejected = self.result.rejected
        rejected[reason] = rejected.get(reason, 0) + 1

    def resource(self, attrs: dict[str, Any]) -> _Resource:
        service = attrs.get("service.name")
        service = service if type(service) is str and service else self.default_service
        feature = attrs.get(A.RAGMON_FEATURE)
        kept: dict[str, str] = {key: self._attribute(attrs[key]) for key in _RESOURCE_KEPT if key in attrs}
        return _Resource(service, feature if type(feature) is str and feature else service, kept)

    def _attribute(self, value: Any) -> str:
        text = value if type(value) is str else _encode(value)
        if len(text) > self.max_attribute_chars:
            self.result.truncated_values += 1
            return text[: self.max_attribute_chars]
        return text

    def _content(self, value: Any) -> str:
        text = value if type(value) is str else _encode(value)
        if len(text) > self.max_content_chars:
            self.result.truncated_values += 1
            return text[: self.max_content_chars]
        return text

    def add(
        self,
        trace_id: str,
        span_id: str,
        parent_span_id: str,
        name: str,
        start_ns: int,
        end_ns: int,
        status_code: int,
        status_message: str,
        attrs: dict[str, Any],
        exception: tuple[str, str, str] | None,
        resource: _Resource,
    ) -> None:
        other: dict[str, str] = dict(resource.kept) if resource.kept else {}
        content: dict[str, str] = {}
        documents: dict[str, Any] | None = None
        mask = 0
        key_dialect = D.KEY_DIALECT
        for key, value in attrs.items():
            bit = key_dialect.get(key)
            if bit is not None:
                mask |= bit
            elif key in D.CONTENT_KEYS or key.startswith(D.CONTENT_PREFIXES):
                content[key] = self._content(value)
            elif key.startswith(D.DOCUMENT_PREFIXES):
                if key.endswith(_DOC_ID_SCORE_SUFFIXES):
                    if key.startswith(_RERANK_INPUT_PREFIX):
                        other[key] = self._attribute(value)  # reranker inputs: kept, not "retrieved"
                    else:
                        if documents is None:
                            documents = {}
                        documents[key] = value
                        mask |= D.OI_DOCUMENTS
                else:
                    content[key] = self._content(value)  # document text and metadata
            elif key == A.RAGMON_TENANT:
                self.result.tenant_attributes_dropped += 1
            else:
                other[key] = value if type(value) is str and len(value) <= 256 else self._attribute(value)

        fields: dict[str, Any] = {}
        if mask & D.OPENLLMETRY:
            D.from_openllmetry(attrs, fields)
        if mask & D.OPENINFERENCE:
            D.from_openinference(attrs, fields)
        if documents is not None:
            D.from_openinference_documents(documents, fields)
        if mask & D.OTEL:
            D.from_otel(attrs, fields)
            if "ids" not in fields and A.GEN_AI_RETRIEVAL_DOCUMENTS in attrs:
                other[A.GEN_AI_RETRIEVAL_DOCUMENTS] = self._attribute(attrs[A.GEN_AI_RETRIEVAL_DOCUMENTS])
        if mask & D.RAGMON:
            D.from_ragmon(attrs, fields)
        get = fields.get

        stage = get("stage")
        if stage is None:
            stage = "other" if parent_span_id else "request"
        status = _STATUS[status_code] if 0 <= status_code <= 2 else "unset"
        error_type = get("error_type")
        if exception is not None:
            if error_type is None and exception[0]:
                error_type = exception[0]
            if exception[1] and "exception.message" not in other:
                other["exception.message"] = self._attribute(exception[1])
            if exception[2]:
                content["exception.stacktrace"] = self._content(exception[2])
        if error_type is None:
            error_type = "_OTHER" if status_code == 2 else ""
        if status_message:
            other["otel.status_description"] = self._attribute(status_message)

        model = get("model", "")
        input_tokens = _clamp(get("input_tokens", 0))
        output_tokens = _clamp(get("output_tokens", 0))
        cached_tokens = _clamp(get("cached_input_tokens", 0))
        cost = get("cost_usd")
        if cost is None and model:
            search_units = get("search_units", 0)
            if input_tokens or output_tokens or search_units:
                cost = self.prices.cost_usd(model, input_tokens, output_tokens, cached_tokens, search_units)

        ids: list[str] = get("ids", [])
        scores: list[float] = get("scores", [])
        top1 = get("top1_score")
        gap = get("similarity_gap")
        if scores:
            if top1 is None:
                top1 = scores[0]
            if gap is None and len(scores) > 1:
                gap = scores[0] - scores[min(9, len(scores) - 1)]

        self.rows.append(
            (
                trace_id,
                span_id,
                parent_span_id,
                name,
                stage,
                get("feature") or resource.feature,
                get("user", ""),
                get("session", ""),
                resource.service,
                start_ns,
                (end_ns - start_ns) / 1e6,
                status,
                error_type,
                model,
                get("provider", ""),
                input_tokens,
                output_tokens,
                cached_tokens,
                cost,
                top1,
                gap,
                get("norm_deviation"),
                get("ttft_ms"),
                ids,
                scores,
                other,
                content,
            )
        )

    def finish(self, tenant: str) -> NormaliseResult:
        batch = self.result.batch
        if self.rows:
            columns = list(zip(*self.rows, strict=True))
            names = [name for name, _ in SPAN_COLUMNS[1:]] + ["content"]
            for name, column in zip(names, columns, strict=True):
                setattr(batch, name, list(column))
            batch.tenant = [tenant] * len(self.rows)
        return self.result


def _clamp(value: int) -> int:
    return value if 0 <= value <= _UINT32_MAX else (0 if value < 0 else _UINT32_MAX)


def _encode(value: Any) -> str:
    kind = type(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


# --- protobuf walker ---------------------------------------------------------------------------------------
def normalise_protobuf(
    request: ExportTraceServiceRequest, tenant: str, options: NormaliseOptions | None = None
) -> NormaliseResult:
    """Normalise a decoded ExportTraceServiceRequest; the tenant is the receiver's, never a span's."""
    builder = _Builder(options or NormaliseOptions())
    add = builder.add
    reject = builder.reject
    received = 0
    last_trace = b""
    last_trace_hex = ""
    for resource_spans in request.resource_spans:
        resource = builder.resource(_pb_attributes(resource_spans.resource.attributes))
        for scope_spans in resource_spans.scope_spans:
            spans = scope_spans.spans
            received += len(spans)
            for span in spans:
                trace = span.trace_id
                if trace != last_trace:  # spans of a trace are usually adjacent: hex once per trace
                    if len(trace) != 16 or trace == _ZERO_TRACE:
                        reject(INVALID_TRACE_ID)
                        continue
                    last_trace = trace
                    last_trace_hex = trace.hex()
                span_id = span.span_id
                if len(span_id) != 8 or span_id == _ZERO_SPAN:
                    reject(INVALID_SPAN_ID)
                    continue
                parent = span.parent_span_id
                if parent:
                    if len(parent) != 8:
                        reject(INVALID_PARENT_SPAN_ID)
                        continue
                    parent_hex = "" if parent == _ZERO_SPAN else parent.hex()
                else:
                    parent_hex = ""
                start = span.start_time_unix_nano
                end = span.end_time_unix_nano
                if not start:
                    reject(MISSING_START_TIME)
                    continue
                if end < start:
                    reject(END_BEFORE_START)
                    continue
                status = span.status
                events = span.events
                add(
                    last_trace_hex,
                    span_id.hex(),
                    parent_hex,
                    span.name,
                    start,
                    end,
                    status.code,
                    status.message,
                    _pb_attributes(span.attributes),
                    _pb_exception(events) if events else None,
                    resource,
                )
    result = builder.finish(tenant)
    result.received_spans = received
    return result


def _pb_attributes(key_values: Iterable[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in key_values:
        value = kv.value
        text = value.string_value  # most attributes are non-empty strings: one access instead of two
        if text:
            out[kv.key] = text
            continue
        kind = value.WhichOneof("value")
        if kind is not None:
            out[kv.key] = _pb_value(value, kind)
    return out


_GETTERS: Final = {kind: attrgetter(kind) for kind in ("string_value", "int_value", "double_value", "bool_value")}


def _pb_value(value: Any, kind: str | None) -> Any:
    getter = _GETTERS.get(kind)  # type: ignore[arg-type]
    if getter is not None:
        return getter(value)
    if kind == "array_value":
        values = value.array_value.values
        if not values:
            return []
        # OTel arrays are homogeneous: one getter mapped in C beats a Python loop over upb wrappers.
        first = values[0].WhichOneof("value")
        getter = _GETTERS.get(first)
        if getter is not None and all(v.WhichOneof("value") == first for v in values[1:]):
            return list(map(getter, values))
        return [_pb_value(v, v.WhichOneof("value")) for v in values]
    if kind == "kvlist_value":
        return {kv.key: _pb_value(kv.value, kv.value.WhichOneof("value")) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return None


def _pb_exception(events: Iterable[Any]) -> tuple[str, str, str] | None:
    for event in events:
        if event.name == "exception":
            attrs = _pb_attributes(event.attributes)
            return (
                _as_text(attrs.get("exception.type")),
                _as_text(attrs.get("exception.message")),
                _as_text(attrs.get("exception.stacktrace")),
            )
    return None


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if type(value) is str else _encode(value)


# --- OTLP/JSON walker ----------------------------------------------------------------------------------------
class _BadSpan(Exception):
    """A span object of an OTLP/JSON document whose fields have the wrong type or shape."""


def normalise_json(document: Any, tenant: str, options: NormaliseOptions | None = None) -> NormaliseResult:
    """Normalise a parsed OTLP/JSON ExportTraceServiceRequest (lowerCamelCase keys, hex ids).

    A document whose structure is wrong outside spans raises JsonDecodeError (the whole request is bad);
    a span object with wrongly typed fields is rejected alone as ``malformed_span``.
    """
    if not isinstance(document, dict):
        raise JsonDecodeError("expected a JSON object (ExportTraceServiceRequest)")
    builder = _Builder(options or NormaliseOptions())
    add = builder.add
    reject = builder.reject
    received = 0
    for r_index, resource_spans in enumerate(_json_list(document.get("resourceSpans"), "resourceSpans")):
        where = f"resourceSpans[{r_index}]"
        if not isinstance(resource_spans, dict):
            raise JsonDecodeError(f"{where}: expected an object")
        resource = resource_spans.get("resource") or {}
        if not isinstance(resource, dict):
            raise JsonDecodeError(f"{where}.resource: expected an object")
        try:
            resource_attrs = _json_attributes(resource.get("attributes"))
        except _BadSpan as exc:
            raise JsonDecodeError(f"{where}.resource.attributes: {exc}") from exc
        context = builder.resource(resource_attrs)
        scopes = _json_list(resource_spans.get("scopeSpans"), f"{where}.scopeSpans")
        for s_index, scope_spans in enumerate(scopes):
            if not isinstance(scope_spans, dict):
                raise JsonDecodeError(f"{where}.scopeSpans[{s_index}]: expected an object")
            spans = _json_list(scope_spans.get("spans"), f"{where}.scopeSpans[{s_index}].spans")
            received += len(spans)
            for span in spans:
                try:
                    _json_span(span, context, add, reject)
                except (_BadSpan, ValueError, TypeError, AttributeError, RecursionError):
                    reject(MALFORMED_SPAN)
    result = builder.finish(tenant)
    result.received_spans = received
    return result


def _json_span(span: Any, resource: _Resource, add: Any, reject: Any) -> None:
    if not isinstance(span, dict):
        raise _BadSpan("span: expected an object")
    trace_id = _json_id(span.get("traceId"), 16)
    if trace_id is None:
        reject(INVALID_TRACE_ID)
        return
    span_id = _json_id(span.get("spanId"), 8)
    if span_id is None:
        reject(INVALID_SPAN_ID)
        return
    parent = span.get("parentSpanId")
    if parent:
        parent_id = _json_id(parent, 8, zero_ok=True)
        if parent_id is None:
            reject(INVALID_PARENT_SPAN_ID)
            return
        if parent_id == "0" * 16:
            parent_id = ""
    else:
        parent_id = ""
    start = _json_uint64(span.get("startTimeUnixNano"))
    end = _json_uint64(span.get("endTimeUnixNano"))
    if not start:
        reject(MISSING_START_TIME)
        return
    if end < start:
        reject(END_BEFORE_START)
        return
    name = span.get("name", "")
    if not isinstance(name, str):
        raise _BadSpan("name: expected a string")
    status = span.get("status") or {}
    if not isinstance(status, dict):
        raise _BadSpan("status: expected an object")
    code = _json_status_code(status.get("code", 0))
    message = status.get("message", "")
    if not isinstance(message, str):
        raise _BadSpan("status.message: expected a string")
    exception = None
    events = span.get("events")
    if events:
        for event in _json_list_in_span(events):
            if isinstance(event, dict) and event.get("name") == "exception":
                attrs = _json_attributes(event.get("attributes"))
                exception = (
                    _as_text(attrs.get("exception.type")),
                    _as_text(attrs.get("exception.message")),
                    _as_text(attrs.get("exception.stacktrace")),
                )
                break
    add(
        trace_id,
        span_id,
        parent_id,
        name,
        start,
        end,
        code,
        message,
        _json_attributes(span.get("attributes")),
        exception,
        resource,
    )


def _json_list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise JsonDecodeError(f"{where}: expected an array")
    return value


def _json_list_in_span(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _BadSpan("expected an array")
    return value


def _json_id(value: Any, size: int, zero_ok: bool = False) -> str | None:
    """Hex id (case-insensitive, per the OTLP/JSON spec) → lowercase hex; base64 tolerated; None if invalid."""
    if not isinstance(value, str):
        return None
    if len(value) == 2 * size:
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            return None
    else:
        # Some exporters use protobuf's standard JSON mapping (base64) by mistake; accept it rather than lose data.
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
    if len(raw) != size or (not zero_ok and not any(raw)):
        return None
    return raw.hex()


def _json_uint64(value: Any) -> int:
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
    if number < 0:
        raise _BadSpan("expected a non-negative integer")
    return number


_STATUS_NAMES: Final = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


def _json_status_code(value: Any) -> int:
    if type(value) is int:
        return int(value)
    if isinstance(value, str):  # enum names are invalid OTLP/JSON, but unambiguous: accept them
        if value in _STATUS_NAMES:
            return _STATUS_NAMES[value]
        return int(value)
    raise _BadSpan("status.code: expected an integer")


def _json_attributes(values: Any) -> dict[str, Any]:
    if not values:
        return {}
    if not isinstance(values, list):
        raise _BadSpan("attributes: expected an array")
    out: dict[str, Any] = {}
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
        text = value.get("stringValue")
        if type(text) is str:
            out[key] = text
            continue
        converted = _json_value(value, 0)
        if converted is not None:
            out[key] = converted
    return out


def _json_value(value: dict[str, Any], depth: int) -> Any:
    if depth > _MAX_VALUE_DEPTH:
        raise _BadSpan("attribute value nested too deeply")
    if "stringValue" in value:
        text = value["stringValue"]
        if not isinstance(text, str):
            raise _BadSpan("stringValue: expected a string")
        return text
    if "intValue" in value:
        number = value["intValue"]
        if type(number) is bool or not isinstance(number, int | str | float):
            raise _BadSpan("intValue: expected an integer")
        if isinstance(number, float):
            if not number.is_integer():
                raise _BadSpan("intValue: expected an integer")
            return int(number)
        return int(number)
    if "doubleValue" in value:
        number = value["doubleValue"]
        if type(number) is bool or not isinstance(number, int | float | str):
            raise _BadSpan("doubleValue: expected a number")
        return float(number)  # "NaN", "Infinity" are valid proto3 JSON
    if "boolValue" in value:
        flag = value["boolValue"]
        if type(flag) is not bool:
            raise _BadSpan("boolValue: expected true or false")
        return flag
    if "arrayValue" in value:
        values = (value["arrayValue"] or {}).get("values") or []
        return [_json_value(_as_dict(v), depth + 1) for v in _json_list_in_span(values)]
    if "kvlistValue" in value:
        pairs = (value["kvlistValue"] or {}).get("values") or []
        out: dict[str, Any] = {}
        for kv in _json_list_in_span(pairs):
            kv = _as_dict(kv)
            key = kv.get("key")
            if not isinstance(key, str):
                raise _BadSpan("kvlist key: expected a string")
            out[key] = _json_value(_as_dict(kv.get("value") or {}), depth + 1)
        return out
    if "bytesValue" in value:
        data = value["bytesValue"]
        if not isinstance(data, str):
            raise _BadSpan("bytesValue: expected base64 text")
        base64.b64decode(data, validate=True)  # binascii.Error is a ValueError → malformed span
        return data
    return None  # an empty AnyValue


def _as_dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _BadSpan("expected an object")
    return value
