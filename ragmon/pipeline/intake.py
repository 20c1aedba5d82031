"""The receivers' consumer: make each accepted request durable in the write-ahead log, then let the writer know.

A receiver acknowledges a request only after `consume` returns, so acknowledged = in the log. Requests wait in
memory for the store writer too (reading them back from disk would double the I/O), up to a cap in bytes; past the
cap a request is still accepted into the log, but only its position waits in memory ("spilled") and the writer
reads its body back from the log when its turn comes. So a slow or absent store makes the log, not memory, grow;
only when the log is full is the sender told to retry later (503 with Retry-After): back-pressure, not loss.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from ragmon.collectors.errors import Backpressure, ConsumerUnavailable
from ragmon.pipeline.wal import Position, WalError, WalFull, WriteAheadLog


@dataclass(frozen=True, slots=True)
class PendingRequest:
    position: Position
    tenant: str
    body: bytes  # b"" while spilled
    spans: int
    size: int = -1  # the body's length, kept while spilled; -1: len(body)
    spilled: bool = False

    @property
    def body_bytes(self) -> int:
        return len(self.body) if self.size < 0 else self.size

    def spill(self) -> PendingRequest:
        return PendingRequest(self.position, self.tenant, b"", self.spans, self.body_bytes, True)


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
        self.spilled_requests = 0  # over the memory cap: left in the log, read back by the writer

    # -- receivers' side -----------------------------------------------------------------------------------
    def consume(self, tenant: str, body: bytes, spans: int) -> None:
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
            if not request.spilled and self._backlog_bytes + len(request.body) > self.max_backlog_bytes:
                request = request.spill()
                self.spilled_requests += 1
            self._queue.append(request)  # in log order: the log calls us under its lock
            self._backlog_bytes += len(request.body)
            self.accepted_requests += 1
            self.accepted_spans += request.spans
            self.ready.notify()

    def take(self, max_requests: int, max_spans: int, max_bytes: int) -> list[PendingRequest]:
        """Durable requests from the head of the queue, up to the limits, without removing them (spilled ones
        still without their bodies).

        Only records the log calls durable are taken: a request is never stored before it could be acknowledged.
        """
        durable = self.wal.durable_end
        with self._lock:
            out: list[PendingRequest] = []
            spans = size = 0
            for request in self._queue:
                if request.position > durable:
                    break
                if out and (
                    len(out) >= max_requests
                    or spans + request.spans > max_spans
                    or size + request.body_bytes > max_bytes
                ):
                    break
                out.append(request)
                spans += request.spans
                size += request.body_bytes
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
