"""One export request → decoded, validated, handed to the consumer, counted: shared by both receivers.

`ExportHandler` is transport-neutral: each receiver gives it a body, its encoding and compression. Per request it
decompresses (capped), parses, counts invalid spans (`ragmon.collectors.validate.validate`) and hands the consumer the
body — as received when every span is valid. Normalisation happens later, in ClickHouse
(`ragmon.sinks.normalise_sql`). It raises the `ragmon.collectors.errors` tree for the receiver to map to a status, and
returns
an `ExportOutcome` (accepted / rejected spans) for the response's partial_success.

Not counted here: attribute values over the size limit. They are cut in SQL, and finding them in Python would
mean walking every attribute of every span, which the receive path exists to avoid.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Final, Literal

from ragmon.collectors.consumer import SpanConsumer
from ragmon.collectors.counters import CollectorCounters
from ragmon.collectors.decode import decompress, parse_json, parse_protobuf
from ragmon.collectors.errors import (
    Backpressure,
    CollectorError,
    ConsumerUnavailable,
    DecodeError,
    PayloadTooLargeError,
)
from ragmon.collectors.otlp_json import request_from_json
from ragmon.collectors.validate import Validation, validate

__all__ = ["BodyEncoding", "ExportHandler", "ExportOutcome"]

_log = logging.getLogger(__name__)
_LOG_INTERVAL_S: Final = 60.0  # consumer failures are logged at most once a minute, and counted always
# A `ragmon.tenant` attribute key as protobuf encodes it (KeyValue.key: field 1, length 13). Counting these bytes
# is a C-speed scan of the body instead of a walk over every attribute; a string value holding exactly these
# 15 bytes would be miscounted, which a counter can afford.
_TENANT_KEY_BYTES: Final = b"\x0a\x0dragmon.tenant"

BodyEncoding = Literal["protobuf", "json"]


@dataclass(frozen=True, slots=True)
class ExportOutcome:
    accepted_spans: int
    rejected_spans: int
    error_message: str  # '' unless spans were rejected


class ExportHandler:
    """Decode → validate → consume, with the counters; thread-safe (called from receiver worker threads)."""

    def __init__(
        self,
        consumer: SpanConsumer,
        *,
        counters: CollectorCounters | None = None,
        max_body_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        self.consumer = consumer
        self.counters = counters if counters is not None else CollectorCounters()
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
        """Handle one OTLP body. Raises DecodeError, PayloadTooLargeError or Backpressure."""
        counters = self.counters
        counters.add("ragmon_receiver_bytes_total", len(body), transport=transport)
        try:
            if len(body) > self.max_body_bytes:
                limit = self.max_body_bytes
                raise PayloadTooLargeError(f"body exceeds the limit of {limit} bytes", limit)
            raw = decompress(body, content_encoding, self.max_body_bytes)
            if encoding == "json":
                request, malformed = request_from_json(parse_json(raw))
                validation = validate(request, malformed_spans=malformed)
            else:
                validation = validate(parse_protobuf(raw), raw)
        except DecodeError:
            counters.add("ragmon_receiver_requests_total", transport=transport, outcome="bad_request")
            raise
        except PayloadTooLargeError:
            counters.add("ragmon_receiver_requests_total", transport=transport, outcome="too_large")
            raise
        return self._deliver(tenant, validation, transport)

    def _deliver(self, tenant: str, validation: Validation, transport: str) -> ExportOutcome:
        counters = self.counters
        accepted = validation.spans_accepted
        counters.add("ragmon_receiver_spans_received_total", validation.spans_total, transport=transport)
        counters.add_many(
            "ragmon_receiver_spans_rejected_total", validation.rejected_by_reason, "reason", transport=transport
        )
        if accepted:
            counters.add("ragmon_receiver_tenant_attributes_dropped_total", validation.body.count(_TENANT_KEY_BYTES))
            try:
                self.consumer.consume(tenant, validation.body, accepted)
            except Backpressure as exc:
                outcome = "unavailable" if isinstance(exc, ConsumerUnavailable) else "throttled"
                self._refused(accepted, transport, outcome)
                raise
            except CollectorError:
                self._refused(accepted, transport, "consumer_error")
                raise
            except Exception as exc:
                # A consumer bug must not kill the receiver; the client retries (503) and we count it.
                self._refused(accepted, transport, "consumer_error")
                self._log_consumer_failure(exc)
                raise ConsumerUnavailable(1.0, f"consumer failed: {type(exc).__name__}") from exc
        rejected = validation.spans_rejected
        counters.add("ragmon_receiver_spans_accepted_total", accepted, transport=transport)
        counters.add("ragmon_receiver_requests_total", transport=transport, outcome="partial" if rejected else "ok")
        return ExportOutcome(accepted, rejected, validation.error_message())

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
