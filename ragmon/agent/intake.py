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


def ingest_seq(position: Position) -> int:
    """A request's position as one increasing integer: the `ingest_seq` its spans carry in the store."""
    return (position.segment << 40) | position.offset


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
