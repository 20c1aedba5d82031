"""The store's envelope: an OTLP request as the agent logged it, sealed with its tenant and sequence number; the
protobuf schema ClickHouse parses it with; and the columns of the Null input table that mirror that schema.

An `Envelope` is an OTLP ``ExportTraceServiceRequest`` body with two fields appended by the agent (`seal`):
``tenant = 15`` and ``ingest_seq = 16``; because protobuf messages concatenate field by field, the bytes of a
request followed by those fields parse as one `Envelope`. Field numbers are the OTLP spec's
(opentelemetry-proto ``trace/v1/trace.proto``, ``common/v1/common.proto``); only the fields normalisation reads
are declared — ClickHouse skips undeclared fields on the wire like any protobuf reader does.

Why this shape:

- OTLP's ``AnyValue`` is recursive (array → AnyValue → array …); ClickHouse types are not. Arrays and kvlists
  are declared one level deep with scalar elements (`Scalar`); deeper values are skipped as unknown fields.
- Every scalar of a value is ``Nullable`` in `INPUT_COLUMNS`: ClickHouse maps an absent field to NULL, so
  ``int_value = 0`` (present) and "not an int" (absent) stay distinguishable without the oneof-presence setting.
- Column names match field names (ClickHouse matches them case-insensitively, ``.`` and ``_`` alike), nested
  messages become ``Tuple``, repeated messages ``Array(Tuple(...))``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ragmon.otlp_encoding import varint

__all__ = ["INPUT_COLUMNS", "PROTO_MESSAGE", "PROTO_SCHEMA", "frame", "seal"]

PROTO_MESSAGE: Final = "Envelope"

PROTO_SCHEMA: Final = """\
syntax = "proto3";
package ragmon.ingest;

// One level of AnyValue: what an array element or a kvlist value may hold here.
message Scalar {
  oneof value {
    string string_value = 1;
    bool bool_value = 2;
    int64 int_value = 3;
    double double_value = 4;
    bytes bytes_value = 7;
  }
}
message ScalarArray { repeated Scalar values = 1; }
message ScalarKeyValue { string key = 1; Scalar value = 2; }
message ScalarKeyValueList { repeated ScalarKeyValue values = 1; }

// opentelemetry.proto.common.v1.AnyValue, arrays and kvlists flattened to scalars.
message AnyValue {
  oneof value {
    string string_value = 1;
    bool bool_value = 2;
    int64 int_value = 3;
    double double_value = 4;
    ScalarArray array_value = 5;
    ScalarKeyValueList kvlist_value = 6;
    bytes bytes_value = 7;
  }
}
message KeyValue { string key = 1; AnyValue value = 2; }

message Resource { repeated KeyValue attributes = 1; }
message Event { string name = 2; repeated KeyValue attributes = 3; }
message Status { string message = 2; int32 code = 3; }
message Span {
  bytes trace_id = 1;
  bytes span_id = 2;
  bytes parent_span_id = 4;
  string name = 5;
  fixed64 start_time_unix_nano = 7;
  fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9;
  repeated Event events = 11;
  Status status = 15;
}
message ScopeSpans { repeated Span spans = 2; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; }

// ExportTraceServiceRequest + what the agent appends (seal).
message Envelope {
  repeated ResourceSpans resource_spans = 1;
  string tenant = 15;
  uint64 ingest_seq = 16;
}
"""

_SCALAR_FIELDS: Final = (
    "string_value Nullable(String), bool_value Nullable(Bool), int_value Nullable(Int64), "
    "double_value Nullable(Float64), bytes_value Nullable(String)"
)
SCALAR_TYPE: Final = f"Tuple({_SCALAR_FIELDS})"
ANY_VALUE_TYPE: Final = (
    f"Tuple({_SCALAR_FIELDS}, array_value Tuple(values Array({SCALAR_TYPE})), "
    f"kvlist_value Tuple(values Array(Tuple(key String, value {SCALAR_TYPE}))))"
)
KEY_VALUES_TYPE: Final = f"Array(Tuple(key String, value {ANY_VALUE_TYPE}))"
_SPAN_TYPE: Final = (
    "Tuple(trace_id String, span_id String, parent_span_id String, name String, "
    "start_time_unix_nano UInt64, end_time_unix_nano UInt64, "
    f"attributes {KEY_VALUES_TYPE}, "
    f"events Array(Tuple(name String, attributes {KEY_VALUES_TYPE})), "
    "status Tuple(message String, code Int32))"
)

# (name, ClickHouse type) of the Null-engine input table; one row per Envelope.
INPUT_COLUMNS: Final[tuple[tuple[str, str], ...]] = (
    (
        "resource_spans",
        f"Array(Tuple(resource Tuple(attributes {KEY_VALUES_TYPE}), "
        f"scope_spans Array(Tuple(spans Array({_SPAN_TYPE})))))",
    ),
    ("tenant", "LowCardinality(String)"),
    ("ingest_seq", "UInt64"),
)

_TENANT_TAG: Final = bytes([15 << 3 | 2])  # field 15, length-delimited
_SEQ_TAG: Final = b"\x80\x01"  # field 16, varint wire type: tag 128, itself written as a varint


def seal(body: bytes, tenant: str, ingest_seq: int) -> bytes:
    """OTLP request bytes → `Envelope` bytes: `body` + tenant (field 15) + ingest_seq (field 16)."""
    if ingest_seq < 0:
        raise ValueError(f"ingest_seq must be non-negative, got {ingest_seq}")
    name = tenant.encode("utf-8")
    return b"".join((body, _TENANT_TAG, varint(len(name)), name, _SEQ_TAG, varint(ingest_seq)))


def frame(envelopes: Sequence[bytes]) -> bytes:
    """The length-delimited Protobuf stream ClickHouse's `Protobuf` input format reads: varint length, message."""
    return b"".join(varint(len(m)) + m for m in envelopes)
