"""OTLP/HTTP response bodies in the request's encoding: ExportTraceServiceResponse and google.rpc.Status.

Per the OTLP spec a full success leaves `partial_success` unset, a partial one sets `rejected_spans` and an
English `error_message`, and every 4xx/5xx carries a `google.rpc.Status` whose `message` says what was wrong.
"""

from __future__ import annotations

import json
from typing import Final

from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

__all__ = ["GRPC_CODE_BY_HTTP_STATUS", "export_response", "status_response"]

PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"

# google.rpc.Code for the HTTP statuses the receiver answers (Status.code is informative only in OTLP/HTTP).
GRPC_CODE_BY_HTTP_STATUS: Final = {
    400: code_pb2.INVALID_ARGUMENT,
    401: code_pb2.UNAUTHENTICATED,
    404: code_pb2.NOT_FOUND,
    405: code_pb2.UNIMPLEMENTED,
    411: code_pb2.INVALID_ARGUMENT,
    413: code_pb2.RESOURCE_EXHAUSTED,
    415: code_pb2.INVALID_ARGUMENT,
    429: code_pb2.RESOURCE_EXHAUSTED,
    431: code_pb2.INVALID_ARGUMENT,
    500: code_pb2.INTERNAL,
    503: code_pb2.UNAVAILABLE,
    505: code_pb2.UNIMPLEMENTED,
}


def export_response(content_type: str, rejected_spans: int = 0, error_message: str = "") -> bytes:
    """The 200 body; `partial_success` only when spans were rejected (or there is a warning)."""
    if content_type == JSON:
        if not rejected_spans and not error_message:
            return b"{}"
        partial = {"rejectedSpans": str(rejected_spans), "errorMessage": error_message}  # int64 → string
        return json.dumps({"partialSuccess": partial}).encode()
    response = ExportTraceServiceResponse()
    if rejected_spans or error_message:
        response.partial_success.CopyFrom(
            ExportTracePartialSuccess(rejected_spans=rejected_spans, error_message=error_message)
        )
    return bytes(response.SerializeToString())


def status_response(content_type: str, http_status: int, message: str) -> bytes:
    """A google.rpc.Status body for an error response."""
    code = GRPC_CODE_BY_HTTP_STATUS.get(http_status, code_pb2.UNKNOWN)
    if content_type == JSON:
        return json.dumps({"code": code, "message": message}).encode()
    if content_type == PROTOBUF:
        return bytes(status_pb2.Status(code=code, message=message).SerializeToString())
    return message.encode("utf-8") + b"\n"
