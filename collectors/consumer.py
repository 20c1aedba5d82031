"""What a receiver hands each validated request to: the one-method `SpanConsumer` interface.

A receiver passes the tenant (from the API key), the request body as OTLP protobuf bytes — invalid spans
already removed, otherwise exactly as received — and the number of spans in it. The agent's consumer appends
the body to the write-ahead log and returns; the store later seals it (`ragmon.sinks.envelope.seal`) and lets
ClickHouse normalise it. Receivers acknowledge (HTTP 200, gRPC OK) only after `consume` returned, which gives
at-least-once delivery. A consumer that cannot take the body raises `Backpressure` (the client retries after
a delay) or `ConsumerUnavailable`; any other exception is answered as a retryable 503 / UNAVAILABLE and counted.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ragmon.collectors.errors import Backpressure, ConsumerUnavailable

__all__ = ["Backpressure", "ConsumerUnavailable", "SpanConsumer"]


@runtime_checkable
class SpanConsumer(Protocol):
    """Takes validated export requests; called from receiver worker threads, possibly concurrently."""

    def consume(self, tenant: str, body: bytes, spans: int) -> None:
        """Keep `body` (an ExportTraceServiceRequest with `spans` valid spans) for `tenant`, or raise."""
        ...
