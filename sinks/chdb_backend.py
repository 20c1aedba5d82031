"""The embedded backend: ClickHouse in-process through chDB, files under the agent's data directory.

chDB 4.x hosts one engine per process, bound to one path; any number of connections to that path may coexist,
each with its own session settings, and queries on different connections run at the same time. We keep four: two
writers for bulk inserts (one INSERT runs its parsing and normalising views on one core: the store sends a large
batch as two inserts at once, see `ragmon.sinks.store.Store.insert_otlp`), one for other statements (so the sampler's
payload copies never wait behind an insert), and a reader opened with `readonly=2` so the `ragmon query` helper
cannot write even if the parse-level guard were bypassed. All start with
`log_queries=0` (chDB's only log table, `system.user_query_log`, lives in memory and would otherwise grow) and
`async_insert=0` (chDB defaults it to 1; we batch ourselves and rely on the deduplication token, which async
inserts would ignore). chDB has no MergeTree `system.*_log` tables to cap.

`max_server_memory_bytes` caps the engine's own memory (ClickHouse's `max_server_memory_usage`, the total over all
queries): chDB takes it as a start-up argument in the first connection's string, and a query past it fails with
MEMORY_LIMIT_EXCEEDED (retryable: the writer retries the batch) instead of the process growing until it is killed.
It applies only if this backend starts the engine: a process's engine is started once, by its first connection.

Inserts go as `INSERT … SELECT * FROM file(…)` of a file written under the data directory, not through chDB's
streaming insert (`send_insert`): in chDB 4.4 (engine 26.9) the streaming insert returned success when one of the
views it fed failed — MEMORY_LIMIT_EXCEEDED under the memory cap left whole batches out of `spans` while
`span_content` had them, the error visible only in `system.errors` (reproduced at caps of 80-150 MiB, several
batches in 30). A statement run by `query` raises its views' errors, so the writer retries the batch with its
deduplication token and what the failed attempt had stored is not stored twice. The file costs a write of the
batch to the page cache; tests/sinks/test_chdb_insert_errors.py holds the case.

Callers' reads (`read`: the query API, the dashboard, reports) run on a pool of `read_connections` more read-only
connections, so one slow read never stalls another (the sampler's reads keep the reader above, behind no caller).
chDB has no `query_id` setting, so a read is marked by a comment in front of its text, `/* ragmon-q:<tag> */`,
which the engine keeps in `system.processes.query`; `cancel(tag)` runs `KILL QUERY WHERE query LIKE … SYNC` on a
connection of its own (measured: the read raises QUERY_WAS_CANCELLED ~0.1 s later). The kill must not match
itself (its own text holds the tag too): `query_id != queryID()`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
from ragmon.sinks.arrow import to_ipc_stream
from ragmon.sinks.backend import (
    Params,
    ReadPool,
    Settings,
    checked_read_tag,
    escape_param,
    quote_string,
    settings_clause,
)
from ragmon.sinks.errors import StoreError, classify

_SESSION = "log_queries=0&async_insert=0"
WRITERS = 2  # connections for inserts: how many run at the same time
READ_CONNECTIONS = 4  # callers' reads at the same time (AgentSettings.read_connections)
CLOSE_WAIT_S = 5.0  # how long `close` waits for cancelled reads to leave their connections


def _params(params: Params | None) -> dict[str, str]:
    return {name: escape_param(value) for name, value in (params or {}).items()}


def _clear(conn: Any) -> None:
    """Leave `conn` fit for its next query after one failed on it.

    chDB 4.4 (engine 26.9): after a query fails while it runs (a limit, throwIf, a kill; not a parse error), the
    next query on the same connection fails too — "Invalid flatbuffers message" or "Message metadata too long" —
    reading what the failed one left behind (measured for MEMORY_LIMIT_EXCEEDED, TOO_MANY_ROWS, TIMEOUT_EXCEEDED,
    TOO_MANY_ROWS_OR_BYTES, QUERY_WAS_CANCELLED); the one after that is fine. So a tiny query takes the hit: on
    a pooled read connection the hit would otherwise land on the next caller, another tenant perhaps."""
    for _ in range(3):
        try:
            conn.query("SELECT 1", "ArrowTable")
            return
        except Exception:
            continue


def _query_failure(conn: Any, exc: Exception) -> StoreError:
    """What a query that failed on `conn` raises; `conn` is cleared for its next query (`_clear`)."""
    _clear(conn)
    if _unreadable_result(exc):
        # No result, or not a whole one: the query failed inside the engine without saying so (seen under the
        # memory cap, MEMORY_LIMIT_EXCEEDED in system.errors). Worth retrying.
        return StoreError(f"the engine returned no readable result, an error it did not report ({exc})", retryable=True)
    return classify(str(exc))


def _unreadable_result(exc: Exception) -> bool:
    """The engine's Arrow result was missing or cut short: pyarrow says so (no schema at all), or chDB's reader
    does ("Invalid flatbuffers message", seen once in CI under the memory cap on a count query)."""
    return isinstance(exc, pa.ArrowException) or "flatbuffers message" in str(exc)


class ChdbBackend:
    kind = "chdb"

    def __init__(
        self,
        data_dir: str | Path,
        *,
        max_server_memory_bytes: int | None = None,
        read_connections: int = READ_CONNECTIONS,
        read_wait_s: float = 5.0,
    ) -> None:
        from chdb import state  # heavy in resident memory: imported only when the embedded store is opened

        path = Path(data_dir).resolve()
        path.mkdir(parents=True, exist_ok=True)
        # Connections to one engine, each running its statements beside the others': bulk inserts (a streaming
        # insert holds its connection for its whole length), other statements (DDL, the sampler's payload copies:
        # they must not wait behind a large insert), and read-only queries.
        session = _SESSION
        if max_server_memory_bytes is not None:
            session += f"&max_server_memory_usage={int(max_server_memory_bytes)}"
        try:
            self._writer_list = [state.connect(f"{path}?{session}") for _ in range(WRITERS)]
            self._statements = state.connect(f"{path}?{session}")
            self._reader = state.connect(f"{path}?{session}&readonly=2")
        except Exception as exc:  # e.g. another path already open in this process
            raise StoreError(f"cannot open chDB at {path}: {exc}", retryable=False) from exc
        self.path = path
        # The files inserts are read from (see the module docstring); one left by a crash is never read again.
        self._inserts = path / "inserts"
        self._inserts.mkdir(exist_ok=True)
        for leftover in self._inserts.iterdir():
            leftover.unlink(missing_ok=True)
        self._insert_numbers = itertools.count()
        # chDB connections are documented thread-safe; one statement per connection at a time matters for
        # send_insert (the connection accepts nothing else while an insert is open): an insert takes a writer from
        # this queue and gives it back, the other connections have a lock each.
        self._writers: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for writer in self._writer_list:
            self._writers.put(writer)
        self._statement_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._read_session = f"{path}?{session}&readonly=2"
        self._database: str | None = None
        self._read_pool: ReadPool[Any] = ReadPool(read_connections, self._open_reader)
        self.read_wait_s = read_wait_s
        self._kill_lock = threading.Lock()
        self._killer: Any = None  # the connection KILL QUERY runs on, opened with the first kill
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("store is closed", retryable=False)

    def execute(self, sql: str, params: Params | None = None, settings: Settings | None = None) -> None:
        self._check_open()
        with self._statement_lock:
            try:
                self._statements.query(sql + settings_clause(settings), "Null", params=_params(params))
            except Exception as exc:
                _clear(self._statements)
                raise classify(str(exc)) from exc

    def select(
        self, sql: str, params: Params | None = None, settings: Settings | None = None, *, readonly: bool = False
    ) -> pa.Table:
        self._check_open()
        conn, lock = (self._reader, self._read_lock) if readonly else (self._statements, self._statement_lock)
        with lock:
            try:
                table = conn.query(sql + settings_clause(settings), "ArrowTable", params=_params(params))
            except Exception as exc:
                raise _query_failure(conn, exc) from exc
        return table

    def read(self, sql: str, params: Params | None = None, settings: Settings | None = None, *, tag: str) -> pa.Table:
        self._check_open()
        text = f"/* ragmon-q:{checked_read_tag(tag)} */ {sql}{settings_clause(settings)}"
        with self._read_pool.slot(tag, self.read_wait_s) as conn:
            try:
                return conn.query(text, "ArrowTable", params=_params(params))
            except Exception as exc:
                raise _query_failure(conn, exc) from exc

    def _open_reader(self) -> Any:
        """A read-only connection for the read pool, in the store's database (`use_database`)."""
        from chdb import state

        conn = state.connect(self._read_session)
        if self._database is not None:
            self._use(conn, self._use_statement(self._database))
        return conn

    @staticmethod
    def _use_statement(database: str) -> str:
        return "USE `" + database.replace("\\", "\\\\").replace("`", "\\`") + "`"

    def cancel(self, tag: str) -> bool:
        return self._read_pool.cancel(tag, self._kill)

    def _kill(self, tag: str) -> None:
        checked_read_tag(tag)
        # one kill at a time: two at once would each list the other (both texts hold `ragmon-q:`)
        with self._kill_lock:
            try:
                if self._killer is None:
                    from chdb import state

                    self._killer = state.connect(self._read_session)
                self._killer.query(
                    f"KILL QUERY WHERE query LIKE '%/* ragmon-q:{tag} */%' AND query_id != queryID() SYNC", "Null"
                )
            except Exception as exc:
                raise classify(str(exc)) from exc

    def insert(self, table: str, data: pa.Table, settings: Settings | None = None) -> int:
        columns = ", ".join(f"`{name}`" for name in data.column_names)
        self._send(f"INSERT INTO {table} ({columns})", "ArrowStream", to_ipc_stream(data), settings)
        return int(data.num_rows)

    def insert_raw(self, table: str, fmt: str, data: bytes, settings: Settings | None = None) -> None:
        self._send(f"INSERT INTO {table}", fmt, data, settings)

    def _send(self, into: str, fmt: str, payload: bytes, settings: Settings | None) -> None:
        """`into` (an `INSERT INTO t [(columns)]`) fed `payload` in format `fmt`, through a file."""
        self._check_open()
        path = self._inserts / f"{os.getpid()}-{next(self._insert_numbers)}.{fmt.lower()}"
        sql = f"{into} SELECT * FROM file({quote_string(str(path))}, {fmt}){settings_clause(settings)}"
        writer = self._writers.get()
        try:
            path.write_bytes(payload)
            writer.query(sql, "Null")
        except Exception as exc:
            raise classify(str(exc)) from exc
        finally:
            self._writers.put(writer)
            path.unlink(missing_ok=True)

    def use_database(self, database: str) -> None:
        self._check_open()
        statement = self._use_statement(database)
        self._database = database  # for read connections opened from now on
        writers = [self._writers.get() for _ in self._writer_list]  # waits for running inserts
        try:
            for writer in writers:
                self._use(writer, statement)
        finally:
            for writer in writers:
                self._writers.put(writer)
        for conn, lock in ((self._statements, self._statement_lock), (self._reader, self._read_lock)):
            with lock:
                self._use(conn, statement)
        # the read pool's open connections: taken all at once, as the writers are (waits for running reads)
        with contextlib.ExitStack() as stack:
            opened = len(self._read_pool.opened)
            held = [stack.enter_context(self._read_pool.slot(os.urandom(16).hex(), 60.0)) for _ in range(opened)]
            for conn in held:
                self._use(conn, statement)

    @staticmethod
    def _use(conn: Any, statement: str) -> None:
        try:
            conn.query(statement, "Null")
        except Exception as exc:
            raise classify(str(exc)) from exc

    def close(self) -> None:
        """Close every connection, after cancelling the callers' running reads (a connection closed under a running
        query is not safe to close); one whose read outlived `CLOSE_WAIT_S` is left to the process's exit."""
        if self._closed:
            return
        self._closed = True
        drained = self._read_pool.close(self._kill, CLOSE_WAIT_S)
        if drained:
            for conn in self._read_pool.opened:
                conn.close()
        if self._killer is not None:
            self._killer.close()
        self._reader.close()
        self._statements.close()
        for writer in self._writer_list:
            writer.close()
