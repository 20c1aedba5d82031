"""The bounded queue the span export and the evaluation events share (ragmon/batch_queue.py)."""

from __future__ import annotations

import threading
from collections import Counter

from ragmon.batch_queue import BatchQueue


def _queue(send, **overrides) -> tuple[BatchQueue[int], Counter[str]]:
    drops: Counter[str] = Counter()

    def on_drop(reason: str, count: int) -> None:
        drops[reason] += count

    options = {"queue_max": 10, "batch_max": 4, "flush_interval_s": 30.0, "thread_name": "test-queue"}
    options.update(overrides)
    return BatchQueue(send, on_drop=on_drop, **options), drops  # type: ignore[arg-type]


def test_a_send_that_raises_is_counted_and_the_thread_goes_on() -> None:
    sent: list[list[int]] = []

    def send(batch: list[int], stop: threading.Event) -> None:
        if batch[0] == 0:
            raise RuntimeError("bug in the owner")
        sent.append(batch)

    queue, drops = _queue(send)
    for item in range(8):
        queue.offer(item)
    assert queue.flush(5.0)
    assert drops == {"send_error": 4}
    assert sent == [[4, 5, 6, 7]]
    queue.close(1.0)


def test_offers_beyond_the_bound_and_after_close_are_counted_not_blocked() -> None:
    release = threading.Event()

    def send(batch: list[int], stop: threading.Event) -> None:
        release.wait(5.0)

    queue, drops = _queue(send, batch_max=100, queue_max=3)
    accepted = [queue.offer(item) for item in range(5)]
    assert accepted == [True, True, True, False, False]
    assert drops == {"queue_full": 2}
    release.set()
    queue.close(2.0)
    assert not queue.offer(99)
    assert drops["shutdown"] == 1


def test_close_interrupts_a_stuck_send_and_counts_what_is_still_queued() -> None:
    in_send = threading.Event()
    interrupted = threading.Event()

    def send(batch: list[int], stop: threading.Event) -> None:
        in_send.set()
        interrupted.wait(10.0)  # a retry backoff the owner cuts short

    queue, drops = _queue(send, batch_max=2)
    for item in range(6):  # one batch in the stuck send, four items behind it
        queue.offer(item)
    assert in_send.wait(5.0)
    queue.close(0.3, interrupt=interrupted.set)
    assert interrupted.is_set()
    assert drops == {"shutdown": 4}
    assert len(queue) == 0
