"""The collectors' exception tree; each receiver maps it to one HTTP status and one gRPC code at its boundary.

::

    CollectorError
    ├── DecodeError                the body is not a valid ExportTraceServiceRequest → 400 / INVALID_ARGUMENT
    │   ├── CompressionError       bad gzip stream or unsupported Content-Encoding
    │   ├── ProtobufDecodeError    bytes that protobuf cannot parse
    │   └── JsonDecodeError        not JSON, or JSON that is not OTLP/JSON (wrong shape or types)
    ├── PayloadTooLargeError       body, or its decompressed size, over the cap → 413 / RESOURCE_EXHAUSTED
    └── Backpressure               the consumer cannot take the batch now → 429 / RESOURCE_EXHAUSTED + RetryInfo
        └── ConsumerUnavailable    the consumer is down (store unreachable) → 503 / UNAVAILABLE

A span that is individually invalid (bad ids, bad timestamps) is not an exception: it is rejected, counted by
reason and reported in OTLP ``partial_success`` while the rest of the request is accepted.
"""

from __future__ import annotations


class CollectorError(Exception):
    """Base of every error the collectors raise on purpose."""


class DecodeError(CollectorError):
    """The request body cannot be decoded; permanent, the client must not retry."""


class CompressionError(DecodeError):
    """The body claims a compression it does not have (or one we do not support)."""


class ProtobufDecodeError(DecodeError):
    """The body is not a protobuf-encoded ExportTraceServiceRequest."""


class JsonDecodeError(DecodeError):
    """The body is not OTLP/JSON."""


class PayloadTooLargeError(CollectorError):
    """The body, compressed or decompressed, is larger than the configured cap."""

    def __init__(self, message: str, limit_bytes: int) -> None:
        super().__init__(message)
        self.limit_bytes = limit_bytes


class Backpressure(CollectorError):
    """Raised by a consumer that cannot take a batch now; the client should retry after `retry_after_s`.

    Maps to HTTP 429 and gRPC RESOURCE_EXHAUSTED with RetryInfo. Nothing of the batch was kept.
    """

    def __init__(self, retry_after_s: float = 1.0, reason: str = "consumer is full") -> None:
        super().__init__(f"{reason}; retry after {retry_after_s:g}s")
        self.retry_after_s = max(0.0, float(retry_after_s))
        self.reason = reason


class ConsumerUnavailable(Backpressure):
    """The consumer is down (e.g. the store is unreachable); maps to HTTP 503 and gRPC UNAVAILABLE."""

    def __init__(self, retry_after_s: float = 5.0, reason: str = "consumer unavailable") -> None:
        super().__init__(retry_after_s, reason)
