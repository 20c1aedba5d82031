"""The server backend: a ClickHouse server or cluster over HTTP through clickhouse-connect.

Same SQL as the embedded backend. Parameters go as `param_*` (server-side binding), results come back as Arrow
(`query_arrow`) and inserts go as Arrow (`insert_arrow`), so both backends hand the store identical types.
Sessions are off (`autogenerate_session_id=False`): the store is used from several threads and a server rejects
concurrent queries in one session.

Callers' reads (`read`) go through a bounded `ReadPool` of `read_connections` slots (the client's HTTP pool holds
8 connections, so reads never take the last ones from the writer). Each carries its tag as its `query_id`, which
`cancel` kills with `KILL QUERY WHERE query_id = …`, and `cancel_http_readonly_queries_on_client_close`, so a
read whose client hung up is cancelled by the server too.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from ragmon.sinks.backend import Params, ReadPool, Settings, checked_read_tag
from ragmon.sinks.errors import StoreError, classify

READ_CONNECTIONS = 4
CLOSE_WAIT_S = 5.0


def _map_error(exc: Exception) -> StoreError:
    # clickhouse_connect is imported only with a server store (slow to import): the embedded default never loads it
    from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

    code = getattr(exc, "code", None)
    if isinstance(exc, OperationalError) and code is None:
        return StoreError(f"ClickHouse unreachable: {exc}", retryable=True)  # connection refused, timeout, 5xx
    if isinstance(exc, DatabaseError):
        return classify(str(exc), code)
    return StoreError(str(exc), retryable=False)


class ClickHouseServerBackend:
    kind = "clickhouse"

    def __init__(
        self, url: str, *, read_connections: int = READ_CONNECTIONS, read_wait_s: float = 5.0, **client_kwargs: Any
    ) -> None:
        import clickhouse_connect

        client_kwargs.setdefault("autogenerate_session_id", False)
        client_kwargs.setdefault("connect_timeout", 5)
        client_kwargs.setdefault("send_receive_timeout", 60)
        try:
            self._client = clickhouse_connect.get_client(dsn=url, **client_kwargs)
        except Exception as exc:
            raise _map_error(exc) from exc
        self._read_pool: ReadPool[int] = ReadPool(read_connections, lambda: 0)  # slots only: the client's pool
        self.read_wait_s = read_wait_s
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("store is closed", retryable=False)

    def execute(self, sql: str, params: Params | None = None, settings: Settings | None = None) -> None:
        self._check_open()
        try:
            self._client.command(sql, parameters=dict(params or {}), settings=dict(settings or {}))
        except Exception as exc:
            raise _map_error(exc) from exc

    def select(
        self, sql: str, params: Params | None = None, settings: Settings | None = None, *, readonly: bool = False
    ) -> pa.Table:
        self._check_open()
        merged: dict[str, Any] = dict(settings or {})
        if readonly:
            merged["readonly"] = 2  # 2: the engine refuses writes, our per-query settings still apply
        try:
            return self._client.query_arrow(sql, parameters=dict(params or {}), settings=merged, use_strings=True)
        except Exception as exc:
            raise _map_error(exc) from exc

    def read(self, sql: str, params: Params | None = None, settings: Settings | None = None, *, tag: str) -> pa.Table:
        self._check_open()
        merged: dict[str, Any] = {
            **(settings or {}),
            "readonly": 2,
            "query_id": checked_read_tag(tag),
            "cancel_http_readonly_queries_on_client_close": 1,
        }
        with self._read_pool.slot(tag, self.read_wait_s):
            try:
                return self._client.query_arrow(sql, parameters=dict(params or {}), settings=merged, use_strings=True)
            except Exception as exc:
                raise _map_error(exc) from exc

    def cancel(self, tag: str) -> bool:
        return self._read_pool.cancel(tag, self._kill)

    def _kill(self, tag: str) -> None:
        try:
            self._client.command(f"KILL QUERY WHERE query_id = '{checked_read_tag(tag)}' SYNC")
        except Exception as exc:
            raise _map_error(exc) from exc

    def insert(self, table: str, data: pa.Table, settings: Settings | None = None) -> int:
        self._check_open()
        try:
            self._client.insert_arrow(table, data, settings=dict(settings or {}))
        except Exception as exc:
            raise _map_error(exc) from exc
        return int(data.num_rows)

    def insert_raw(self, table: str, fmt: str, data: bytes, settings: Settings | None = None) -> None:
        self._check_open()
        try:
            self._client.raw_insert(table, insert_block=data, settings=dict(settings or {}), fmt=fmt)
        except Exception as exc:
            raise _map_error(exc) from exc

    def use_database(self, database: str) -> None:
        self._check_open()
        self._client.database = database  # sent as the `database` parameter of every request

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._read_pool.close(self._kill, CLOSE_WAIT_S)
            self._client.close()
