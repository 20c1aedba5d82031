"""The embedded backend: ClickHouse in-process through chDB, files under the agent's data directory.

chDB 4.x hosts one engine per process, bound to one path; any number of connections to that path may coexist,
each with its own session settings, and queries on different connections run at the same time. We keep three: a
writer for bulk inserts, one for other statements (so the sampler's payload copies never wait behind an insert),
and a reader opened with `readonly=2` so the `ragmon query` helper cannot write even if the parse-level guard
were bypassed. All start with
`log_queries=0` (chDB's only log table, `system.user_query_log`, lives in memory and would otherwise grow) and
`async_insert=0` (chDB defaults it to 1; we batch ourselves and rely on the deduplication token, which async
inserts would ignore). chDB has no MergeTree `system.*_log` tables to cap.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa

from sinks.arrow import to_ipc_stream
from sinks.backend import Params, Settings, escape_param, settings_clause
from sinks.errors import StoreError, classify

_SESSION = "log_queries=0&async_insert=0"


def _params(params: Params | None) -> dict[str, str]:
    return {name: escape_param(value) for name, value in (params or {}).items()}


class ChdbBackend:
    kind = "chdb"

    def __init__(self, data_dir: str | Path) -> None:
        from chdb import state  # heavy (~260 MB RSS): imported only when the embedded store is opened

        path = Path(data_dir).resolve()
        path.mkdir(parents=True, exist_ok=True)
        # Three connections to one engine, each running its statements beside the others': bulk inserts (a streaming
        # insert holds its connection for its whole length), other statements (DDL, the sampler's payload copies:
        # they must not wait behind a large insert), and read-only queries.
        try:
            self._writer = state.connect(f"{path}?{_SESSION}")
            self._statements = state.connect(f"{path}?{_SESSION}")
            self._reader = state.connect(f"{path}?{_SESSION}&readonly=2")
        except Exception as exc:  # e.g. another path already open in this process
            raise StoreError(f"cannot open chDB at {path}: {exc}", retryable=False) from exc
        self.path = path
        # chDB connections are documented thread-safe; the locks keep one statement per connection at a time,
        # which matters for send_insert (the connection accepts nothing else while an insert is open).
        self._write_lock = threading.Lock()
        self._statement_lock = threading.Lock()
        self._read_lock = threading.Lock()
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
                raise classify(str(exc)) from exc
        return table

    def insert(self, table: str, data: pa.Table, settings: Settings | None = None) -> int:
        columns = ", ".join(f"`{name}`" for name in data.column_names)
        self._send(f"INSERT INTO {table} ({columns}){settings_clause(settings)}", "ArrowStream", to_ipc_stream(data))
        return data.num_rows

    def insert_raw(self, table: str, fmt: str, data: bytes, settings: Settings | None = None) -> None:
        self._send(f"INSERT INTO {table}{settings_clause(settings)}", fmt, data)

    def _send(self, statement: str, fmt: str, payload: bytes) -> None:
        self._check_open()
        with self._write_lock:
            try:
                inserter = self._writer.send_insert(statement, fmt)
                try:
                    inserter.append(payload)
                    inserter.finish()
                except BaseException:
                    inserter.cancel()
                    raise
            except Exception as exc:
                raise classify(str(exc)) from exc

    def use_database(self, database: str) -> None:
        self._check_open()
        statement = "USE `" + database.replace("\\", "\\\\").replace("`", "\\`") + "`"
        connections = (
            (self._writer, self._write_lock),
            (self._statements, self._statement_lock),
            (self._reader, self._read_lock),
        )
        for conn, lock in connections:
            with lock:
                try:
                    conn.query(statement, "Null")
                except Exception as exc:
                    raise classify(str(exc)) from exc

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._reader.close()
        self._statements.close()
        self._writer.close()
