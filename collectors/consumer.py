"""What a receiver hands each decoded batch to: the one-method `SpanConsumer` interface.

The agent wires the sampler and the store behind it. Receivers acknowledge a request (HTTP 200, gRPC OK) only
after `consume` returned, so a consumer that makes the batch durable (write-ahead log) before returning gives
at-least-once delivery. A consumer that cannot take the batch raises `Backpressure` (client retries after a
delay) or `ConsumerUnavailable`; any other exception is answered as a retryable 503 / UNAVAILABLE and counted.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from collectors.errors import Backpressure, ConsumerUnavailable
from ragmon.model import SpanBatch

__all__ = ["Backpressure", "ConsumerUnavailable", "SpanConsumer"]


@runtime_checkable
class SpanConsumer(Protocol):
    """Takes a batch of normalised spans; called from receiver worker threads, possibly concurrently."""

    def consume(self, batch: SpanBatch) -> None:
        """Keep `batch` (or raise `Backpressure`); must not keep a reference it later mutates."""
        ...
