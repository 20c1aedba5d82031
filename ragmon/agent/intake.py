"""The receivers' consumer: make each accepted request durable in the write-ahead log, then let the writer know.

A receiver acknowledges a request only after `consume` returns, so acknowledged = in the log. Requests wait in
memory for the store writer too (reading them back from disk would double the I/O); that backlog is capped in
bytes, and past the cap — or when the log is full — the sender is told to retry later (429/503 with Retry-After),
which is back-pressure, not loss.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from collectors.errors import Backpressure, ConsumerUnavailable
from collectors.wal import Position, WalError, WalFull, WriteAheadLog


@dataclass(frozen=True, slots=True)
class PendingRequest:
    position: Position
    tenant: str
    body: bytes
    spans: int


# `ingest_seq` = instance (12 bits) | log segment (24 bits) | byte offset in the segment (28 bits). The instance
# comes first so that several agents writing one ClickHouse database have disjoint ranges: the sampler reads back
# "my spans from seq A to seq B" with one range condition. 24 bits of segments at 64 MiB each is 1 PiB per agent;
# 28 bits of offset hold a segment of 64 MiB plus one oversized record (request bodies are capped below 256 MiB).
INSTANCE_BITS, SEGMENT_BITS, OFFSET_BITS = 12, 24, 28
MAX_INSTANCE = (1 << INSTANCE_BITS) - 1


@dataclass(frozen=True, slots=True)
class IngestSeq:
    """Maps write-ahead-log positions of one agent instance to the `ingest_seq` its spans carry, and back."""

    instance: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.instance <= MAX_INSTANCE:
            raise ValueError(f"agent instance must be in 0..{MAX_INSTANCE}, got {self.instance}")

    def of(self, position: Position) -> int:
        if position.segment >> SEGMENT_BITS or position.offset >> OFFSET_BITS:
            raise ValueError(f"log position {position} does not fit ingest_seq's {SEGMENT_BITS}/{OFFSET_BITS} bits")
        return (self.instance << (SEGMENT_BITS + OFFSET_BITS)) | (position.segment << OFFSET_BITS) | position.offset

    def position(self, seq: int) -> Position:
        return Position((seq >> OFFSET_BITS) & ((1 << SEGMENT_BITS) - 1), seq & ((1 << OFFSET_BITS) - 1))


class WalIntake:
    """Implements the collectors' SpanConsumer: append to the log, queue for the writer."""

    def __init__(self, wal: WriteAheadLog, *, max_backlog_bytes: int = 256 * 1024 * 1024) -> None:
        self.wal = wal
        self.max_backlog_bytes = max_backlog_bytes
        self._queue: deque[PendingRequest] = deque()
        self._backlog_bytes = 0
        self._lock = threading.Lock()
        self.ready = threading.Condition(self._lock)
        self.accepted_requests = 0
        self.accepted_spans = 0
        self.refused: dict[str, int] = {}

    # -- receivers' side -----------------------------------------------------------------------------------
    def consume(self, tenant: str, body: bytes, spans: int) -> None:
        with self._lock:
            if self._backlog_bytes + len(body) > self.max_backlog_bytes:
                self._refuse("backlog_full")
                raise Backpressure(1.0, "the store is behind; retry shortly")

        def queue_in_log_order(position: Position) -> None:
            self.enqueue(PendingRequest(position, tenant, body, spans))

        try:
            self.wal.append(body, tenant, on_written=queue_in_log_order)
        except WalFull as exc:
            with self._lock:
                self._refuse("wal_full")
            raise Backpressure(5.0, str(exc)) from exc
        except WalError as exc:
            with self._lock:
                self._refuse("wal_error")
            raise ConsumerUnavailable(5.0, str(exc)) from exc

    def _refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1

    # -- writer's side -------------------------------------------------------------------------------------
    def enqueue(self, request: PendingRequest) -> None:
        """Queue a request already in the log (receivers, or replay after a restart)."""
        with self.ready:
            self._queue.append(request)  # in log order: the log calls us under its lock
            self._backlog_bytes += len(request.body)
            self.accepted_requests += 1
            self.accepted_spans += request.spans
            self.ready.notify()

    def take(self, max_requests: int, max_spans: int) -> list[PendingRequest]:
        """Durable requests from the head of the queue, up to the limits, without removing them.

        Only records the log calls durable are taken: a request is never stored before it could be acknowledged.
        """
        durable = self.wal.durable_end
        with self._lock:
            out: list[PendingRequest] = []
            spans = 0
            for request in self._queue:
                if request.position > durable:
                    break
                if out and (len(out) >= max_requests or spans + request.spans > max_spans):
                    break
                out.append(request)
                spans += request.spans
            return out

    def commit(self, count: int) -> None:
        """The first `count` queued requests are stored: drop them from memory."""
        with self._lock:
            for _ in range(count):
                self._backlog_bytes -= len(self._queue.popleft().body)

    def wait(self, timeout_s: float) -> None:
        with self.ready:
            if not self._queue:
                self.ready.wait(timeout_s)

    @property
    def backlog(self) -> tuple[int, int]:
        """(requests, bytes) waiting for the store."""
        with self._lock:
            return len(self._queue), self._backlog_bytes
