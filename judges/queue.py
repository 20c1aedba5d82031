"""The durable queue of kept traces to judge: one SQLite file (stdlib sqlite3, WAL journal) under the data dir.

An item is keyed by (tenant, trace_id, judge_version), so enqueueing is idempotent and a trace is judged at most
once per judge version; a new judge version is a new item (a re-evaluation), never an overwrite. States:

    queued ──lease──▶ leased ──record(rows)──▶ recorded ──delivered──▶ done | failed
       ▲                 │
       └──lease expired / released (crashed or stopped worker)

- `leased`: a worker holds the item until `lease_expires_at`; it renews the lease while it works. A worker killed
  with -9 never renews, so its items come back to any worker once the lease expires. Each lease carries a fresh
  token, and `record` only succeeds for the current token: a worker whose lease was taken over cannot commit a
  second result (at most one judgement per key is ever recorded).
- `recorded`: the finished score rows are in the queue file (an outbox) but not yet confirmed written to the
  store. Judging and delivery are separate steps so a crash between "scores computed" and "scores stored" re-sends
  the same rows instead of re-judging (and re-billing) the trace. Re-sent rows are byte-identical, so the store's
  insert deduplication or its ReplacingMergeTree key makes a re-send invisible.
- `done` / `failed`: final. `failed` means the worker gave up on the item (too many attempts: it crashed or the
  payload source kept failing); its rows still carry an explicit non-ok status. `status` holds the item's summary
  status and `attempts` how many leases it took.

Time: leases, their renewals and retry delays are durations, so they are measured on the host's boot clock
(`lease_clock`: CLOCK_BOOTTIME on Linux — shared by every process on the host, never stepped by NTP or a manual
date change), not on the wall clock: a wall clock jumping forward would expire every live lease at once and hand
items still being judged to a second worker; one jumping back would pin a dead worker's items for as long as the
jump. The boot clock restarts at a reboot, so the file remembers the boot it was last opened in; opened in a new
boot, every lease and retry delay is void (the workers that held them are gone). `enqueued_at` / `updated_at` are
wall-clock timestamps, for ordering and for people only.

Durability: WAL with ``synchronous=FULL`` by default, so an enqueue that returned survives a power cut, not only
kill -9 (NORMAL survives kill -9 and is faster; pass it when that is enough).

Scale-out: several worker processes on one host may share one file — writes are short ``BEGIN IMMEDIATE``
transactions, leases make the hand-out safe, and ``busy_timeout`` absorbs lock contention. SQLite locking is not
safe over network filesystems, so across hosts the choice is one queue file per worker, sharded by trace id (the
OTel Collector's load-balancing exporter already routes a trace to one agent by trace id), not a shared file.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from ragmon.data_dir import JUDGE_QUEUE_FILE

QUEUE_FILE_NAME = JUDGE_QUEUE_FILE  # in the data directory (`ragmon.data_dir`)
DEFAULT_LEASE_S = 300.0
_BUSY_TIMEOUT_MS = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    tenant TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    judge_version TEXT NOT NULL,
    feature TEXT NOT NULL DEFAULT '',
    span_id TEXT NOT NULL DEFAULT '',
    sampling_reason TEXT NOT NULL DEFAULT '',
    inclusion_probability REAL,
    state TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT '',
    error TEXT NOT NULL DEFAULT '',
    attempts INTEGER NOT NULL DEFAULT 0,
    lease_token TEXT NOT NULL DEFAULT '',
    lease_expires_at REAL NOT NULL DEFAULT 0,
    not_before REAL NOT NULL DEFAULT 0,
    rows_json TEXT,
    enqueued_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (tenant, trace_id, judge_version)
) WITHOUT ROWID;
-- lease() walks queued items oldest first and expired leases by expiry: one index each, so a lease reads the
-- rows it hands out instead of sorting the whole backlog (the old index's lease grew with it: docs/results.md)
DROP INDEX IF EXISTS items_by_state;
CREATE INDEX IF NOT EXISTS items_by_age ON items (state, enqueued_at);
CREATE INDEX IF NOT EXISTS items_by_expiry ON items (state, lease_expires_at);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
"""
_BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def lease_clock() -> float:
    """Seconds on a clock no one can set: CLOCK_BOOTTIME (Linux; counts suspend), else `time.monotonic`."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.monotonic()


def current_boot_id() -> str:
    """This boot's id (Linux); '' where unknown, which makes every open look like the same boot."""
    try:
        return _BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


class ItemState(StrEnum):
    QUEUED = "queued"
    LEASED = "leased"
    RECORDED = "recorded"  # rows computed and kept in the queue file, not yet confirmed in the store
    DONE = "done"
    FAILED = "failed"


FINAL_STATES = frozenset({ItemState.DONE, ItemState.FAILED})


@dataclass(frozen=True, slots=True)
class Kept:
    """A kept trace to enqueue. `span_id` (the span the scores are about, e.g. the root) lets evaluation records
    join the evaluated trace; sampling fields give scores their weight (1 / inclusion_probability)."""

    tenant: str
    trace_id: str
    feature: str = ""
    span_id: str = ""
    sampling_reason: str = ""
    inclusion_probability: float | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """One leased item. `token` proves the lease is still this worker's when it records the result."""

    tenant: str
    trace_id: str
    judge_version: str
    feature: str
    span_id: str
    sampling_reason: str
    inclusion_probability: float | None
    attempts: int
    token: str
    last_error: str = ""  # why the previous attempt gave the item back
    # The `ragmon eval run` the trace belongs to ('' = production). Not queued: the worker takes it from the trace's
    # payload, so a trace whose payload is missing scores as production (its rows are `skipped`, without a value).
    eval_run: str = ""
    # The app's release the trace ran (`service.version`, '' when not sent): taken from the payload like eval_run,
    # so scores compare by release (`ragmon report`'s releases).
    release: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.tenant, self.trace_id, self.judge_version)


@dataclass(frozen=True, slots=True)
class Recording:
    """A leased item's finished rows, to be kept by `JudgeQueue.record_many` (the outbox step)."""

    lease: Lease
    rows: Sequence[Mapping[str, Any]]
    status: str
    final_state: ItemState = ItemState.DONE
    error: str = ""


@dataclass(frozen=True, slots=True)
class Recorded:
    """An item whose rows wait for delivery to the store."""

    key: tuple[str, str, str]
    rows: list[dict[str, Any]]
    final_state: ItemState  # done | failed
    token: str


@dataclass(slots=True)
class QueueCounts:
    by_state: dict[str, int] = field(default_factory=dict)
    by_status: dict[str, int] = field(default_factory=dict)  # final items only

    def __getitem__(self, state: str) -> int:
        return self.by_state.get(state, 0)


_INSERT_ITEM = (
    "INSERT INTO items (tenant, trace_id, judge_version, feature, span_id, sampling_reason,"
    " inclusion_probability, state, enqueued_at, updated_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?)"
)


def _item_values(k: Kept, judge_version: str, now: float) -> tuple[Any, ...]:
    return (
        k.tenant,
        k.trace_id,
        judge_version,
        k.feature,
        k.span_id,
        k.sampling_reason,
        k.inclusion_probability,
        now,
        now,
    )


class JudgeQueue:
    """The queue over one SQLite file. Thread-safe (one connection behind a lock); several processes may share
    the file. Lease times come from `clock` (default `lease_clock`; see the module docstring), injectable so tests
    can expire leases without sleeping; `wall_clock` stamps `enqueued_at` / `updated_at`."""

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], float] = lease_clock,
        wall_clock: Callable[[], float] = time.time,
        boot_id: Callable[[], str] = current_boot_id,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE takes the write lock up front, so two
        # processes leasing at once serialise instead of failing with "database is locked" at commit).
        self._db = sqlite3.connect(
            self.path, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
        with self._write() as db:
            for statement in _statements(_SCHEMA):
                db.execute(statement)
            self._void_leases_of_an_earlier_boot(db, boot_id())

    @staticmethod
    def _void_leases_of_an_earlier_boot(db: sqlite3.Connection, boot: str) -> None:
        """Lease and retry times of an earlier boot are on a clock that restarted: expire them all."""
        row = db.execute("SELECT value FROM meta WHERE key = 'boot_id'").fetchone()
        if row is not None and row[0] == boot:
            return
        # No row: a new file (nothing to void) or one written before leases moved off the wall clock.
        db.execute("UPDATE items SET lease_expires_at = 0 WHERE state IN ('leased', 'recorded')")
        db.execute("UPDATE items SET not_before = 0 WHERE state = 'queued'")
        db.execute(
            "INSERT INTO meta (key, value) VALUES ('boot_id', ?) ON CONFLICT (key) DO UPDATE SET value = ?",
            (boot, boot),
        )

    @classmethod
    def in_data_dir(cls, data_dir: str | Path, **options: Any) -> JudgeQueue:
        return cls(Path(data_dir) / QUEUE_FILE_NAME, **options)

    # -- plumbing ------------------------------------------------------------------------------------------
    class _Tx:
        def __init__(self, queue: JudgeQueue) -> None:
            self.queue = queue

        def __enter__(self) -> sqlite3.Connection:
            self.queue._lock.acquire()
            try:
                self.queue._db.execute("BEGIN IMMEDIATE")
            except BaseException:
                self.queue._lock.release()
                raise
            return self.queue._db

        def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
            db = self.queue._db
            try:
                # SQLite rolls a transaction back by itself on some errors (SQLITE_FULL, IOERR, NOMEM); a ROLLBACK
                # then fails with "no transaction is active", which would replace the error that says what happened
                # ("database or disk is full", a fault to retry) with one that reads like a bug.
                if not exc_type:
                    db.execute("COMMIT")
                elif db.in_transaction:
                    db.execute("ROLLBACK")
            finally:
                self.queue._lock.release()

    def _write(self) -> JudgeQueue._Tx:
        return JudgeQueue._Tx(self)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- producer side -------------------------------------------------------------------------------------
    def enqueue(self, kept: Iterable[Kept], judge_version: str) -> int:
        """Add kept traces for `judge_version`; keys already present (in any state) are left alone. Returns how
        many were new. Durable when it returns."""
        now = self._wall_clock()
        new = 0
        with self._write() as db:
            for k in kept:
                values = _item_values(k, judge_version, now)
                new += db.execute(_INSERT_ITEM + " ON CONFLICT DO NOTHING", values).rowcount
        return new

    def enqueue_unqueued(self, kept: Iterable[Kept], judge_version: str) -> int:
        """Like `enqueue`, but only traces with no item of any judge version: the start-up catch-up of traces
        kept while nothing queued them. A trace queued (or judged) for another version was not lost, and
        re-judging it for a new version is a re-evaluation (`ragmon backeval`), not a catch-up."""
        now = self._wall_clock()
        new = 0
        with self._write() as db:
            for k in kept:
                if db.execute(
                    "SELECT 1 FROM items WHERE tenant = ? AND trace_id = ? LIMIT 1", (k.tenant, k.trace_id)
                ).fetchone():
                    continue
                db.execute(_INSERT_ITEM, _item_values(k, judge_version, now))
                new += 1
        return new

    # -- worker side ---------------------------------------------------------------------------------------
    def lease(self, limit: int, lease_s: float = DEFAULT_LEASE_S, *, judge_version: str | None = None) -> list[Lease]:
        """Hand out up to `limit` items, oldest first: queued ones whose `not_before` has passed, and leased ones
        whose lease expired (their worker died). Each gets a new token and one more attempt."""
        if limit <= 0:
            return []
        now = self._clock()
        wall = self._wall_clock()
        version_filter = "" if judge_version is None else " AND judge_version = ?"
        version: tuple[Any, ...] = () if judge_version is None else (judge_version,)
        columns = (
            "tenant, trace_id, judge_version, feature, span_id, sampling_reason, inclusion_probability, attempts,"
            " error, state, enqueued_at"
        )
        out: list[Lease] = []
        with self._write() as db:
            # Two scans, each in its index's order and stopping at `limit` (one OR'ed query sorted every match).
            expired = db.execute(
                f"SELECT {columns} FROM items WHERE state = 'leased' AND lease_expires_at <= ?{version_filter}"
                f" ORDER BY lease_expires_at LIMIT {int(limit)}",
                (now, *version),
            ).fetchall()
            queued = db.execute(
                f"SELECT {columns} FROM items WHERE state = 'queued' AND not_before <= ?{version_filter}"
                f" ORDER BY enqueued_at LIMIT {int(limit)}",
                (now, *version),
            ).fetchall()
            rows = sorted(expired + queued, key=lambda row: row[10])[:limit]  # oldest first, whichever state
            for row in rows:
                token = uuid.uuid4().hex
                db.execute(
                    "UPDATE items SET state = 'leased', lease_token = ?, lease_expires_at = ?, attempts = attempts + 1,"
                    " updated_at = ? WHERE tenant = ? AND trace_id = ? AND judge_version = ?",
                    (token, now + lease_s, wall, row[0], row[1], row[2]),
                )
                expired = row[9] == ItemState.LEASED
                error = "the previous lease expired (its worker crashed or hung)" if expired else str(row[8])
                out.append(
                    Lease(
                        tenant=row[0],
                        trace_id=row[1],
                        judge_version=row[2],
                        feature=row[3],
                        span_id=row[4],
                        sampling_reason=row[5],
                        inclusion_probability=row[6],
                        attempts=int(row[7]) + 1,
                        token=token,
                        last_error=error,
                    )
                )
        return out

    def renew(self, leases: Sequence[Lease], lease_s: float = DEFAULT_LEASE_S) -> int:
        """Extend leases still held; returns how many were. A lost lease (expired and taken) is not revived."""
        now = self._clock()
        held = 0
        with self._write() as db:
            for lease in leases:
                held += db.execute(
                    "UPDATE items SET lease_expires_at = ?, updated_at = ? WHERE tenant = ? AND trace_id = ?"
                    " AND judge_version = ? AND lease_token = ? AND state IN ('leased', 'recorded')",
                    (now + lease_s, self._wall_clock(), *lease.key, lease.token),
                ).rowcount
        return held

    def release(self, lease: Lease, *, retry_in_s: float = 0.0, error: str = "", count_attempt: bool = True) -> bool:
        """Put a leased item back (a stop, or a transient failure to retry after `retry_in_s`). An attempt that
        was not the item's fault (a graceful stop) is not counted against it."""
        now = self._clock()
        with self._write() as db:
            return (
                db.execute(
                    "UPDATE items SET state = 'queued', lease_token = '', lease_expires_at = 0, not_before = ?,"
                    " error = ?, attempts = attempts - ?, updated_at = ? WHERE tenant = ? AND trace_id = ?"
                    " AND judge_version = ? AND lease_token = ? AND state = 'leased'",
                    (now + retry_in_s, error, 0 if count_attempt else 1, self._wall_clock(), *lease.key, lease.token),
                ).rowcount
                == 1
            )

    def record(
        self,
        lease: Lease,
        rows: Sequence[Mapping[str, Any]],
        *,
        status: str,
        final_state: ItemState = ItemState.DONE,
        error: str = "",
    ) -> bool:
        """Keep the item's finished rows (the outbox step). False when the lease was lost meanwhile — another
        worker owns the item now, and this result must be dropped so the trace is not scored twice."""
        return self.record_many([Recording(lease, rows, status, final_state, error)])[0]

    def record_many(self, recordings: Sequence[Recording]) -> list[bool]:
        """`record` for many items in one transaction (one commit instead of one per trace: far less CPU per
        item, docs/results.md); one answer per recording, in order."""
        for recording in recordings:
            if recording.final_state not in FINAL_STATES:
                raise ValueError(f"final_state must be done or failed, not {recording.final_state}")
        now = self._wall_clock()
        kept = []
        with self._write() as db:
            for r in recordings:
                document = json.dumps({"final_state": str(r.final_state), "rows": list(r.rows)}, sort_keys=True)
                cursor = db.execute(
                    "UPDATE items SET state = 'recorded', rows_json = ?, status = ?, error = ?, updated_at = ?"
                    " WHERE tenant = ? AND trace_id = ? AND judge_version = ? AND lease_token = ?"
                    " AND state = 'leased'",
                    (document, r.status, r.error, now, *r.lease.key, r.lease.token),
                )
                kept.append(cursor.rowcount == 1)
        return kept

    def take_recorded(
        self, limit: int, lease_s: float = DEFAULT_LEASE_S, *, tokens: set[str] | None = None
    ) -> list[Recorded]:
        """Recorded items to deliver: those whose token is in `tokens` (this worker's), and any whose lease
        expired (left behind by a dead worker). Taking one renews its lease under a new token."""
        now = self._clock()
        out: list[Recorded] = []
        mine = sorted(tokens or ())
        placeholders = ",".join("?" * len(mine))
        own = f" OR lease_token IN ({placeholders})" if mine else ""
        with self._write() as db:
            rows = db.execute(
                "SELECT tenant, trace_id, judge_version, rows_json FROM items WHERE state = 'recorded'"
                f" AND (lease_expires_at <= ?{own}) ORDER BY updated_at LIMIT {int(limit)}",
                (now, *mine),
            ).fetchall()
            for tenant, trace_id, version, document in rows:
                token = uuid.uuid4().hex
                db.execute(
                    "UPDATE items SET lease_token = ?, lease_expires_at = ?, updated_at = ?"
                    " WHERE tenant = ? AND trace_id = ? AND judge_version = ?",
                    (token, now + lease_s, self._wall_clock(), tenant, trace_id, version),
                )
                parsed = json.loads(document)
                final = ItemState.FAILED if parsed["final_state"] == ItemState.FAILED else ItemState.DONE
                out.append(Recorded((tenant, trace_id, version), parsed["rows"], final, token))
        return out

    def delivered(self, items: Sequence[Recorded]) -> int:
        """The items' rows are in the store: make them final and drop the kept rows."""
        now = self._wall_clock()
        done = 0
        with self._write() as db:
            for item in items:
                done += db.execute(
                    "UPDATE items SET state = ?, rows_json = NULL, lease_token = '', lease_expires_at = 0,"
                    " updated_at = ? WHERE tenant = ? AND trace_id = ? AND judge_version = ? AND state = 'recorded'",
                    (str(item.final_state), now, *item.key),
                ).rowcount
        return done

    def return_recorded(self, items: Sequence[Recorded]) -> None:
        """Delivery failed (store down): let any worker try again at once."""
        with self._write() as db:
            for item in items:
                db.execute(
                    "UPDATE items SET lease_expires_at = 0 WHERE tenant = ? AND trace_id = ? AND judge_version = ?"
                    " AND lease_token = ? AND state = 'recorded'",
                    (*item.key, item.token),
                )

    # -- inspection ----------------------------------------------------------------------------------------
    def counts(self) -> QueueCounts:
        with self._lock:
            states = self._db.execute("SELECT state, count(*) FROM items GROUP BY state").fetchall()
            statuses = self._db.execute(
                "SELECT status, count(*) FROM items WHERE state IN ('done', 'failed') GROUP BY status"
            ).fetchall()
        return QueueCounts({s: int(n) for s, n in states}, {s: int(n) for s, n in statuses})

    def items(self) -> list[dict[str, Any]]:
        """Every item as a dict (small queues, tests and `ragmon judge --status`)."""
        with self._lock:
            cursor = self._db.execute(
                "SELECT tenant, trace_id, judge_version, feature, state, status, error, attempts FROM items"
                " ORDER BY enqueued_at, trace_id"
            )
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def pending(self, judge_version: str | None = None) -> int:
        """Items not final yet (queued, leased or recorded), of `judge_version` or of every version."""
        return sum(n for version, n in self.pending_by_version().items() if judge_version in (None, version))

    def pending_by_version(self) -> dict[str, int]:
        """Items not final yet, per judge version: a worker tells its operator about items no worker of its
        version will take (the agent enqueued for another judge version than the worker judges as)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT judge_version, count(*) FROM items WHERE state IN ('queued', 'leased', 'recorded')"
                " GROUP BY judge_version"
            ).fetchall()
        return {str(version): int(n) for version, n in rows}


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
