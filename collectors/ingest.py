"""One export request → decoded, normalised, handed to the consumer, counted: shared by both receivers.

`Ingest` is transport-neutral: the HTTP receiver gives it a body, its encoding and compression; the gRPC
receiver gives it the already-parsed message. It raises the `collectors.errors` tree for the receiver to map to
a status, and returns an `ExportOutcome` (accepted / rejected spans) for the response's partial_success.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Final, Literal

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collectors.consumer import SpanConsumer
from collectors.counters import CollectorCounters
from collectors.decode import decompress, parse_json, parse_protobuf
from collectors.errors import (
    Backpressure,
    CollectorError,
    ConsumerUnavailable,
    DecodeError,
    PayloadTooLargeError,
)
from collectors.normalise import NormaliseOptions, NormaliseResult, normalise_json, normalise_protobuf

__all__ = ["BodyEncoding", "ExportOutcome", "Ingest"]

_log = logging.getLogger(__name__)
_LOG_INTERVAL_S: Final = 60.0  # consumer failures are logged at most once a minute, and counted always

BodyEncoding = Literal["protobuf", "json"]


@dataclass(frozen=True, slots=True)
class ExportOutcome:
    accepted_spans: int
    rejected_spans: int
    error_message: str  # '' unless spans were rejected


class Ingest:
    """Decode → normalise → consume, with the counters; thread-safe (called from receiver worker threads)."""

    def __init__(
        self,
        consumer: SpanConsumer,
        *,
        counters: CollectorCounters | None = None,
        options: NormaliseOptions | None = None,
        max_body_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        self.consumer = consumer
        self.counters = counters if counters is not None else CollectorCounters()
        self.options = options or NormaliseOptions()
        self.max_body_bytes = max_body_bytes
        self._log_lock = threading.Lock()
        self._last_log_s = -_LOG_INTERVAL_S

    def export_body(
        self,
        body: bytes,
        *,
        encoding: BodyEncoding,
        content_encoding: str = "",
        tenant: str,
        transport: str = "http",
    ) -> ExportOutcome:
        """Handle one OTLP/HTTP body. Raises DecodeError, PayloadTooLargeError or Backpressure."""
        counters = self.counters
        counters.add("ragmon_receiver_bytes_total", len(body), transport=transport)
        try:
            if len(body) > self.max_body_bytes:
                limit = self.max_body_bytes
                raise PayloadTooLargeError(f"body exceeds the limit of {limit} bytes", limit)
            raw = decompress(body, content_encoding, self.max_body_bytes)
            if encoding == "json":
                result = normalise_json(parse_json(raw), tenant, self.options)
            else:
                result = normalise_protobuf(parse_protobuf(raw), tenant, self.options)
        except DecodeError:
            counters.add("ragmon_receiver_requests_total", transport=transport, outcome="bad_request")
            raise
        except PayloadTooLargeError:
            counters.add("ragmon_receiver_requests_total", transport=transport, outcome="too_large")
            raise
        return self._deliver(result, transport)

    def export_message(
        self, request: ExportTraceServiceRequest, *, tenant: str, transport: str = "grpc", wire_bytes: int = 0
    ) -> ExportOutcome:
        """Handle one already-parsed request (gRPC). Raises Backpressure."""
        self.counters.add("ragmon_receiver_bytes_total", wire_bytes, transport=transport)
        return self._deliver(normalise_protobuf(request, tenant, self.options), transport)

    def _deliver(self, result: NormaliseResult, transport: str) -> ExportOutcome:
        counters = self.counters
        batch = result.batch
        counters.add("ragmon_receiver_spans_received_total", result.received_spans, transport=transport)
        counters.add_many("ragmon_receiver_spans_rejected_total", result.rejected, "reason", transport=transport)
        counters.add("ragmon_receiver_values_truncated_total", result.truncated_values, transport=transport)
        counters.add("ragmon_receiver_tenant_attributes_dropped_total", result.tenant_attributes_dropped)
        if len(batch):
            try:
                self.consumer.consume(batch)
            except Backpressure as exc:
                outcome = "unavailable" if isinstance(exc, ConsumerUnavailable) else "throttled"
                self._refused(len(batch), transport, outcome)
                raise
            except CollectorError:
                self._refused(len(batch), transport, "consumer_error")
                raise
            except Exception as exc:
                # A consumer bug must not kill the receiver; the client retries (503) and we count it.
                self._refused(len(batch), transport, "consumer_error")
                self._log_consumer_failure(exc)
                raise ConsumerUnavailable(1.0, f"consumer failed: {type(exc).__name__}") from exc
        rejected = result.rejected_spans
        counters.add("ragmon_receiver_spans_accepted_total", len(batch), transport=transport)
        counters.add("ragmon_receiver_requests_total", transport=transport, outcome="partial" if rejected else "ok")
        return ExportOutcome(len(batch), rejected, result.error_message())

    def _refused(self, spans: int, transport: str, reason: str) -> None:
        self.counters.add("ragmon_receiver_spans_refused_total", spans, transport=transport, reason=reason)
        self.counters.add("ragmon_receiver_requests_total", transport=transport, outcome=reason)

    def _log_consumer_failure(self, exc: Exception) -> None:
        now = time.monotonic()
        with self._log_lock:
            if now - self._last_log_s < _LOG_INTERVAL_S:
                return
            self._last_log_s = now
        _log.error("span consumer failed; answering 503 / UNAVAILABLE", exc_info=exc)
