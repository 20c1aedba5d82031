"""The durable judge queue: idempotent enqueue, leases that expire (time driven by hand), fencing of a lost
lease, the outbox step, and two queue handles sharing one file."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from ragmon.judges.queue import ItemState, JudgeQueue, Kept, Recording

from tests.judges.worker_fakes import FullDiskQueue


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_000_000.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def queue(tmp_path: Path, clock: Clock) -> Iterator[JudgeQueue]:
    q = JudgeQueue.in_data_dir(tmp_path, clock=clock)
    yield q
    q.close()


def kept(n: int, tenant: str = "t") -> list[Kept]:
    return [Kept(tenant, f"{i:032x}", feature="faq") for i in range(n)]


def test_enqueue_is_idempotent_per_judge_version(queue: JudgeQueue) -> None:
    assert queue.enqueue(kept(3), "v1") == 3
    assert queue.enqueue(kept(3), "v1") == 0  # same keys: nothing new
    assert queue.enqueue(kept(3), "v2") == 3  # a new judge version is a new item
    assert queue.enqueue(kept(3, tenant="other"), "v1") == 3
    assert queue.counts()[ItemState.QUEUED] == 9


def test_a_finished_item_is_not_reopened_by_enqueue(queue: JudgeQueue) -> None:
    queue.enqueue(kept(1), "v1")
    (lease,) = queue.lease(10)
    assert queue.record(lease, [{"metric": "m", "status": "ok"}], status="ok")
    (recorded,) = queue.take_recorded(10, tokens={lease.token})
    assert queue.delivered([recorded]) == 1
    assert queue.enqueue(kept(1), "v1") == 0
    assert queue.lease(10) == []
    assert queue.counts().by_status == {"ok": 1}


def test_lease_expiry_hands_the_item_to_another_worker_and_fences_the_first(queue: JudgeQueue, clock: Clock) -> None:
    queue.enqueue(kept(2), "v1")
    first = queue.lease(1, lease_s=10)
    assert [lease.attempts for lease in first] == [1]
    assert [lease.trace_id for lease in queue.lease(5, lease_s=10)] == [f"{1:032x}"]  # only the other one
    clock.now_s += 9.9
    assert queue.lease(5, lease_s=10) == []  # not expired yet
    clock.now_s += 0.2
    expired = {lease.key: lease for lease in queue.lease(5, lease_s=10)}
    assert len(expired) == 2  # both leases lapsed
    again = expired[first[0].key]
    assert again.key == first[0].key and again.attempts == 2 and again.token != first[0].token
    assert "expired" in again.last_error
    # The first worker comes back late: its result must not count, the new holder's does.
    assert not queue.record(first[0], [{"status": "ok"}], status="ok")
    assert queue.renew(first, lease_s=10) == 0
    assert queue.record(again, [{"status": "ok"}], status="ok")


def test_record_many_keeps_each_item_whose_lease_still_holds_in_one_call(queue: JudgeQueue, clock: Clock) -> None:
    queue.enqueue(kept(3), "v1")
    stale = queue.lease(1, lease_s=10)[0]
    clock.now_s += 11
    current = {lease.key: lease for lease in queue.lease(5, lease_s=10)}
    assert len(current) == 3  # the stale lease lapsed and was handed out again
    rows = [{"metric": "m", "status": "ok"}]
    recordings = [Recording(stale, rows, "ok")] + [Recording(lease, rows, "ok") for lease in current.values()]
    assert queue.record_many(recordings) == [False, True, True, True]  # the stale holder is fenced, alone
    taken = queue.take_recorded(10, tokens={lease.token for lease in current.values()})
    assert sorted(r.key for r in taken) == sorted(current)
    with pytest.raises(ValueError, match="final_state"):
        queue.record_many([Recording(current[stale.key], rows, "ok", final_state=ItemState.QUEUED)])


def test_renewed_leases_do_not_expire(queue: JudgeQueue, clock: Clock) -> None:
    queue.enqueue(kept(1), "v1")
    leases = queue.lease(1, lease_s=10)
    for _ in range(5):
        clock.now_s += 8
        assert queue.renew(leases, lease_s=10) == 1
    assert queue.lease(1, lease_s=10) == []


def test_release_on_stop_does_not_count_the_attempt(queue: JudgeQueue, clock: Clock) -> None:
    queue.enqueue(kept(1), "v1")
    (lease,) = queue.lease(1)
    assert queue.release(lease, count_attempt=False)
    (again,) = queue.lease(1)
    assert again.attempts == 1
    assert queue.release(again, retry_in_s=30, error="payload source: down")
    assert queue.lease(1) == []  # not before 30 s
    clock.now_s += 30
    (third,) = queue.lease(1)
    assert (third.attempts, third.last_error) == (2, "payload source: down")


def test_recorded_rows_left_by_a_dead_worker_are_delivered_by_another(
    tmp_path: Path, queue: JudgeQueue, clock: Clock
) -> None:
    queue.enqueue(kept(1), "v1")
    (lease,) = queue.lease(1, lease_s=10)
    rows = [{"metric": "faithfulness", "status": "ok", "value": 0.5, "scored_at": 1}]
    assert queue.record(lease, rows, status="ok")
    # The worker dies before delivering. Another handle on the same file sees nothing to deliver yet ...
    other = JudgeQueue(queue.path, clock=clock)
    assert other.take_recorded(10) == []
    assert other.lease(10) == []  # ... and never re-judges a recorded item
    clock.now_s += 11
    (orphan,) = other.take_recorded(10)
    assert orphan.rows == rows and orphan.final_state is ItemState.DONE
    assert other.delivered([orphan]) == 1
    assert queue.counts().by_state == {"done": 1}
    other.close()


def test_two_handles_leasing_at_once_never_share_an_item(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite"
    setup = JudgeQueue(path)
    setup.enqueue(kept(200), "v1")
    handles = [JudgeQueue(path), JudgeQueue(path)]
    taken: list[list[str]] = [[], []]

    def drain(i: int) -> None:
        while leases := handles[i].lease(7):
            taken[i].extend(lease.trace_id for lease in leases)

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(taken[0] + taken[1]) == sorted(k.trace_id for k in kept(200))
    assert not set(taken[0]) & set(taken[1])
    for h in (setup, *handles):
        h.close()


def test_the_file_is_in_wal_mode(queue: JudgeQueue) -> None:
    import sqlite3

    with sqlite3.connect(queue.path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_lease_hands_out_the_oldest_items_whichever_their_state(
    tmp_path: Path, queue: JudgeQueue, clock: Clock
) -> None:
    """Expired leases and queued items are read by two scans; together they still come out oldest first."""
    wall = Clock()
    q = JudgeQueue(tmp_path / "ordered.sqlite", clock=clock, wall_clock=wall)
    for i in range(4):  # enqueued one second apart: 0, 1, 2, 3
        q.enqueue([Kept("t", f"{i:032x}")], "v1")
        wall.now_s += 1
    taken = q.lease(2, lease_s=10)  # items 0 and 1, whose leases then lapse
    assert [lease.trace_id for lease in taken] == [f"{0:032x}", f"{1:032x}"]
    clock.now_s += 11
    assert [lease.trace_id for lease in q.lease(3, lease_s=10)] == [f"{i:032x}" for i in (0, 1, 2)]
    assert q.lease(3, judge_version="v2") == []  # another judge version's worker sees none of them
    q.close()


def test_lease_reads_the_backlog_through_its_indexes(queue: JudgeQueue) -> None:
    """A lease must not sort the whole backlog: with tens of thousands queued that took 40 ms per lease, and the
    worker leases every time a trace finishes. Every SELECT a lease runs reads an index and needs no sort."""
    queue.enqueue(kept(2_000), "v1")
    statements: list[str] = []
    queue._db.set_trace_callback(statements.append)  # the statements with their values bound
    assert len(queue.lease(16, judge_version="v1")) == 16
    queue._db.set_trace_callback(None)
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert selects
    for sql in selects:
        plan = " ".join(str(step[3]) for step in queue._db.execute("EXPLAIN QUERY PLAN " + sql))
        assert "INDEX" in plan and "TEMP B-TREE" not in plan, (sql, plan)


def test_a_full_queue_file_says_so_and_works_again_when_there_is_room(tmp_path: Path) -> None:
    queue = FullDiskQueue(tmp_path / "queue.sqlite")
    try:
        queue.enqueue(kept(3), "v1")
        queue.fill()
        # SQLite rolled the transaction back itself: the error the caller sees must be the one that says why (a
        # fault to retry), not "cannot rollback - no transaction is active" (which reads like a bug)
        with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
            queue.lease(3, judge_version="v1")
        with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
            queue.enqueue(kept(50, tenant="u"), "v1")
        queue.make_room()
        assert len(queue.lease(3, judge_version="v1")) == 3
        assert queue.enqueue(kept(50, tenant="u"), "v1") == 50
    finally:
        queue.close()
