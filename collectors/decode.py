"""Request bodies → OTLP objects: capped decompression, protobuf parsing, JSON parsing.

Everything here raises the `ragmon.collectors.errors` tree (`DecodeError` subclasses, `PayloadTooLargeError`) and
maps third-party errors at this boundary, so receivers never see a protobuf or zlib exception.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, Final

from google.protobuf.message import DecodeError as _ProtobufError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from ragmon.collectors.errors import CompressionError, JsonDecodeError, PayloadTooLargeError, ProtobufDecodeError

__all__ = ["SUPPORTED_ENCODINGS", "decompress", "parse_json", "parse_protobuf"]

# Content-Encoding values we accept ("identity" and absent mean uncompressed).
SUPPORTED_ENCODINGS: Final = frozenset({"gzip", "x-gzip", "deflate", "identity", ""})
_CHUNK_BYTES: Final = 1 << 20


def decompress(body: bytes, encoding: str, max_bytes: int) -> bytes:
    """Undo `encoding` (gzip or deflate), never producing more than `max_bytes` (a gzip bomb stops early)."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding in ("gzip", "x-gzip"):
        return _inflate(body, 16 + zlib.MAX_WBITS, max_bytes, "gzip")
    if encoding == "deflate":
        # RFC 9110 "deflate" is zlib-wrapped, but some clients send raw deflate: accept both.
        try:
            return _inflate(body, zlib.MAX_WBITS, max_bytes, "deflate")
        except CompressionError:
            return _inflate(body, -zlib.MAX_WBITS, max_bytes, "deflate")
    raise CompressionError(f"unsupported Content-Encoding {encoding!r}")


def _inflate(body: bytes, wbits: int, max_bytes: int, name: str) -> bytes:
    out = bytearray()
    data = body
    try:
        while True:  # a gzip body may hold several members back to back
            inflater = zlib.decompressobj(wbits)
            while True:
                chunk = inflater.decompress(data, min(_CHUNK_BYTES, max_bytes + 1 - len(out)))
                out += chunk
                if len(out) > max_bytes:
                    raise PayloadTooLargeError(f"decompressed body exceeds the limit of {max_bytes} bytes", max_bytes)
                data = inflater.unconsumed_tail
                if not data or inflater.eof:
                    break
            if not inflater.eof:
                out += inflater.flush()
                raise CompressionError(f"truncated {name} body")
            data = inflater.unused_data
            if not data or name != "gzip":
                break
    except zlib.error as exc:
        raise CompressionError(f"invalid {name} body: {exc}") from exc
    return bytes(out)


def parse_protobuf(body: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (_ProtobufError, RuntimeError, ValueError) as exc:
        raise ProtobufDecodeError(f"body is not a protobuf ExportTraceServiceRequest: {exc}") from exc
    return request


def parse_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except RecursionError as exc:
        raise JsonDecodeError("JSON body nested too deeply") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise JsonDecodeError(f"body is not valid JSON: {exc}") from exc
