"""A bounded queue with one sending thread: the part the SDK's span export and the judge's evaluation events share.

`offer` is the only part on the caller's path: one bounded-deque append, no lock, no I/O; an item that does not fit
is counted as dropped (`queue_full`, or `shutdown` once closed) and never blocks the caller. The thread hands
batches to `send`:

- a full batch (`batch_max` items) goes out as soon as it is queued;
- a partial batch only when `flush` asks for it or when nothing went out for `flush_interval_s`. Every send has a
  fixed cost (a request, the receiver's answer), so under a steady stream only full batches go out, and a quiet
  stream's items still leave within one interval. (Sending the few items that arrived during a full batch's export
  as their own request, as the span exporter once did, doubled its requests under load.)

`flush` waits for a ticket: the thread takes the newest ticket before it drains and marks it done after, so a flush
returns once everything queued before it was handed to `send`. `close` flushes within its budget, stops the
thread and counts what is left as `shutdown`.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from ragmon.diagnostics import logger

Item = TypeVar("Item")

# send(batch, stop): hand a batch on and count its fate. `stop` is set when the queue is closing (a retry backoff
# should wait on it). A raise is a bug in the owner: the batch is counted as `send_error` and the thread goes on.
Send = Callable[[list[Item], threading.Event], None]


class BatchQueue(Generic[Item]):
    """Bounded queue + one sending thread. `offer` never blocks or raises."""

    def __init__(
        self,
        send: Send[Item],
        *,
        on_drop: Callable[[str, int], None],
        queue_max: int,
        batch_max: int,
        flush_interval_s: float,
        thread_name: str,
    ) -> None:
        if queue_max < 1 or batch_max < 1 or flush_interval_s <= 0:
            raise ValueError("queue_max and batch_max must be >= 1 and flush_interval_s > 0")
        self._send = send
        self._on_drop = on_drop
        self._queue: collections.deque[Item] = collections.deque()
        self._queue_max = queue_max
        self._batch_max = batch_max
        self._interval_s = flush_interval_s
        self._wake = threading.Event()
        self.stop = threading.Event()  # set once closing: senders' retry waits and the owner's counting read it
        self._idle = threading.Condition()
        self._flush_requested = 0
        self._flush_done = 0
        self.closed = False
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    def __len__(self) -> int:
        return len(self._queue)

    # -- the caller's side ---------------------------------------------------------------------------------
    def offer(self, item: Item) -> bool:
        """Queue `item`; False (and counted) when the queue is full or closed."""
        queue = self._queue
        if self.closed or len(queue) >= self._queue_max:
            self._on_drop("shutdown" if self.closed else "queue_full", 1)
            return False
        queue.append(item)
        if len(queue) >= self._batch_max and not self._wake.is_set():  # set() takes a lock: only when needed
            self._wake.set()
        return True

    def flush(self, timeout_s: float) -> bool:
        """Hand everything queued now to `send`; False if that took longer than `timeout_s` (the thread goes on)."""
        if self.closed or not self._thread.is_alive():
            return not self._queue
        deadline = time.monotonic() + timeout_s
        with self._idle:
            self._flush_requested += 1
            ticket = self._flush_requested
            self._wake.set()
            while self._flush_done < ticket:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def close(self, timeout_s: float, interrupt: Callable[[], None] | None = None) -> None:
        """Flush within `timeout_s`, then stop the thread; what is still queued is counted as `shutdown`.
        `interrupt` runs after the stop is signalled and before the join (to cut short a send stuck in retries)."""
        if self.closed:
            return
        deadline = time.monotonic() + timeout_s
        self.flush(timeout_s)
        self.closed = True
        self.stop.set()
        self._wake.set()
        if interrupt is not None:
            interrupt()
        self._thread.join(max(0.1, deadline - time.monotonic()))
        leftover = len(self._queue)
        if leftover:
            self._queue.clear()
            self._on_drop("shutdown", leftover)

    # -- the sending thread --------------------------------------------------------------------------------
    def _run(self) -> None:
        interval_s = self._interval_s
        partial_due = time.monotonic() + interval_s
        while not self.stop.is_set():
            self._wake.wait(max(0.0, partial_due - time.monotonic()))
            self._wake.clear()
            with self._idle:
                ticket = self._flush_requested
            flushing = ticket > self._flush_done
            sent = self._drain(send_partial=flushing or time.monotonic() >= partial_due)
            now = time.monotonic()
            if sent or now >= partial_due:
                partial_due = now + interval_s
            if flushing:
                with self._idle:
                    self._flush_done = ticket
                    self._idle.notify_all()

    def _drain(self, send_partial: bool) -> int:
        """Send full batches, then the rest if `send_partial`; return how many batches were sent."""
        queue = self._queue
        batch_max = self._batch_max
        sent = 0
        while not self.stop.is_set():
            count = len(queue)
            if count >= batch_max:
                count = batch_max
            elif not count or not send_partial:
                break
            batch = [queue.popleft() for _ in range(count)]
            try:
                self._send(batch, self.stop)
            except Exception:  # a bug in `send` must not take the thread down
                logger.exception("%s: sending a batch of %d failed", self._thread.name, count)
                self._on_drop("send_error", count)
            sent += 1
        return sent
