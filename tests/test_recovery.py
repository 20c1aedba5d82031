"""`ragmon.retry.Recovery`, the retry state of a loop that must never stop: transient faults told from bugs, each
distinct problem logged once (not once per try), delays jittered, growing and capped, and a recovery said."""

from __future__ import annotations

import logging
import random
import sqlite3
from pathlib import Path

import pytest
from ragmon.sinks.errors import StoreError

from ragmon.retry import FOREVER, Recovery, is_transient


def _full_database(tmp_path: Path) -> sqlite3.OperationalError:
    """The real SQLITE_FULL: a database capped at a few pages, filled past the cap."""
    db = sqlite3.connect(tmp_path / "tiny.sqlite")
    db.execute("PRAGMA max_page_count = 4")
    db.execute("CREATE TABLE t (x TEXT)")
    try:
        with pytest.raises(sqlite3.OperationalError) as raised:
            for _ in range(100):
                db.execute("INSERT INTO t VALUES (?)", ("x" * 4000,))
        return raised.value
    finally:
        db.close()


def test_transient_faults_are_told_from_bugs(tmp_path: Path) -> None:
    full = _full_database(tmp_path)
    assert "database or disk is full" in str(full)
    assert is_transient(full)
    assert is_transient(sqlite3.OperationalError("database is locked"))
    assert is_transient(StoreError("server down", retryable=True))
    assert not is_transient(StoreError("unknown table", retryable=False))
    assert is_transient(OSError(28, "No space left on device"))
    assert is_transient(ConnectionRefusedError())
    assert not is_transient(sqlite3.OperationalError("no such table: items"))
    assert not is_transient(KeyError("tenant"))


def _raise_bug(n: int) -> None:
    raise KeyError(f"trace-{n}")  # the message varies with the data; the place does not


def test_each_distinct_problem_is_logged_once_and_recovery_is_said(caplog: pytest.LogCaptureFixture) -> None:
    recovery = Recovery("judge worker", logging.getLogger("test.recovery"), rng=random.Random(1))
    caplog.set_level(logging.WARNING, "test.recovery")
    for n in range(50):
        try:
            _raise_bug(n)
        except KeyError as exc:
            recovery.failed(exc)
        recovery.failed(sqlite3.OperationalError("database or disk is full"))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "a bug" in lines[0] and caplog.records[0].exc_info is not None
    assert "database or disk is full" in lines[1]
    assert recovery.failing and recovery.failures == 100
    recovery.succeeded()
    assert "judge worker resumed after 100 failure(s)" in caplog.records[-1].getMessage()
    assert not recovery.failing
    recovery.failed(sqlite3.OperationalError("database or disk is full"))  # a new streak: said again
    assert len(caplog.records) == 4


def test_delays_grow_with_jitter_and_stay_capped() -> None:
    recovery = Recovery("x", logging.getLogger("test.recovery"), rng=random.Random(7))
    delays = [recovery.failed(OSError("down")) for _ in range(2000)]
    assert all(0.0 <= d <= FOREVER.max_backoff_s for d in delays)
    assert max(delays[:3]) <= 0.8  # 0.2, 0.4, 0.8 ceilings at first
    assert max(delays[-100:]) > FOREVER.max_backoff_s / 2  # later, up to the cap
    assert len(set(delays[-100:])) > 90  # jittered, not in lockstep
