"""What every reader's methods ride on: the backend and where the tables are, and the callers' reads.

Callers' reads — `query` (a user's SQL, the dashboard's), the report's and the review queue's reads — run on the
backend's read pool under the caller's query budget (`query_budgets`, `read_budget.py`), each cancellable
(`reading(tag)`, `cancel(tag)`, `cancel_reads()`; `close()` cancels what runs before it closes). The store's own
reads (the sampler's, the writer's, drift's `read`) keep their own connection and carry no caller's budget.

Errors surface as `StoreError` with `retryable` set; nothing is swallowed.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import pyarrow as pa
from ragmon.sinks.arrow import to_rows, to_table
from ragmon.sinks.backend import Backend
from ragmon.sinks.errors import QueryBudgetExceeded, QueryCancelled, QueryRejected, ReadersBusy, StoreError
from ragmon.sinks.inserts import INSERT_SETTINGS, MIN_INSERT_PART_BYTES, rows_to_columns, rows_token
from ragmon.sinks.queries import tenant_filter_settings
from ragmon.sinks.read_budget import (
    QUERY_WAS_CANCELLED,
    QueryBudgets,
    budget_limit,
    budget_settings,
    exceeded,
    scrubbed,
)
from ragmon.sinks.schema import Ddl, Retention, Topology
from ragmon.sinks.schema_doc import described_with_notes
from ragmon.sinks.sqlguard import metadata_select, normalise_and_check


class StoreBase:
    """ragmon's ClickHouse store over one backend (chDB embedded or a ClickHouse server): the state and the
    reads every group of `Store`'s methods shares (`ragmon.sinks.store`)."""

    def __init__(self, backend: Backend, topology: Topology | None = None, retention: Retention | None = None) -> None:
        self.backend = backend
        self.topology = topology or Topology()
        self.retention = retention or Retention()
        self._ddl = Ddl(self.topology)
        self._otlp_settings: dict[str, str] | None = None  # set by install_otlp_views
        self.insert_streams = 2  # concurrent INSERTs per large OTLP batch (`insert_otlp`)
        self.min_insert_part_bytes = MIN_INSERT_PART_BYTES
        self._insert_pool: ThreadPoolExecutor | None = None
        # Callers' reads (`_caller_read`): their budgets, and what runs now — read tag → its `reading` scope.
        self.query_budgets = QueryBudgets()
        self._reads_changed = threading.Condition()
        self._running: dict[str, _ReadScope | None] = {}
        self._scopes: dict[str, list[_ReadScope]] = {}
        self._closing = False

    def _select(self, sql: str, params: Mapping[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
        return to_rows(self.backend.select(sql, params, **kwargs))

    def _insert_rows(
        self, name: str, columns: tuple[tuple[str, str], ...], rows: Iterable[Mapping[str, Any]], token: str | None
    ) -> str:
        rows = list(rows)
        if not rows:
            return ""
        token = token or rows_token(name, rows)
        table = to_table(rows_to_columns(rows, columns), columns)
        self.backend.insert(self._ddl.table(name), table, {**INSERT_SETTINGS, "insert_deduplication_token": token})
        return token

    def _tenant_settings(self, tenant: str | None) -> dict[str, Any] | None:
        return tenant_filter_settings(self.topology, tenant) if tenant is not None else None

    def query(
        self,
        sql: str,
        params: Mapping[str, Any] | None = None,
        *,
        tenant: str | None = None,
        max_rows: int = 10_000,
        cut_at_max_rows: bool = False,
        query_tag: str | None = None,
    ) -> list[dict[str, Any]]:
        """Run a user's read-only SELECT (`ragmon query`; `DESCRIBE t` and `SHOW TABLES` read as their SELECTs
        over `system`). Raises QueryRejected for anything else.

        Past `max_rows` result rows (or the budget's `max_result_rows`, if fewer) the engine stops: an error by
        default, or with `cut_at_max_rows` the first `max_rows + 1` rows, the extra one telling the caller there
        were more. With `tenant`, the engine filters every tenant-bearing table to that tenant
        (`additional_table_filters`), and the query may name only this store's tables (no `system.*`).
        Runs under the tenant's query budget; `query_tag` is `reading(query_tag)` for this one read.
        """
        if query_tag is not None:
            with self.reading(query_tag):
                return self.query(
                    sql, params, tenant=tenant, max_rows=max_rows, cut_at_max_rows=cut_at_max_rows, query_tag=None
                )
        metadata = metadata_select(sql)
        allowed_database = self.topology.database if tenant is not None else None
        if metadata is not None:
            if tenant is not None and metadata.database not in (None, self.topology.database):
                raise QueryRejected(f"database {metadata.database} is not allowed: this store's is {allowed_database}")
            sql = metadata.sql
            allowed_database = None  # ragmon's own SELECT over system.tables/columns, of one database (above)
        params = dict(params or {})

        def run_text(text: str, text_params: dict[str, Any]) -> str:
            # No settings on these two: `EXPLAIN AST <text> SETTINGS …` would explain them as the user's own.
            table = self._caller_read(text, text_params, tenant=tenant, budgeted=False)
            return "\n".join(str(v) for v in table.column(0).to_pylist())

        checked = normalise_and_check(sql, run_text, params, allowed_database=allowed_database)
        budget = self.query_budgets.for_tenant(tenant)
        cap_rows = min(max_rows, budget.max_result_rows)
        settings: dict[str, Any] = {"max_result_rows": cap_rows}
        if cut_at_max_rows:
            # `limit` is an outer LIMIT (subqueries keep their rows); the cap's extra row says there were more.
            settings = {"limit": cap_rows + 1, "max_result_rows": cap_rows + 1}
        rows = to_rows(
            self._caller_read(checked, params, tenant=tenant, tenant_filter=True, settings=settings, max_rows=max_rows)
        )
        if cut_at_max_rows and len(rows) > cap_rows and cap_rows < max_rows:
            raise exceeded("max_result_rows", self.query_budgets, tenant)  # a cut at the budget would look whole
        if metadata is not None and metadata.table is not None:
            rows = described_with_notes(metadata.table, rows)
        return rows

    @contextmanager
    def reading(self, tag: str | None = None) -> Iterator[str]:
        """Run the reads inside the block (in this thread) as one cancellable unit: `cancel(tag)` from any thread
        stops the one running and fails the ones after it (`QueryCancelled`). Yields the tag (a new one if None).
        For a request that makes several reads (a dashboard view), or one read (`query(..., query_tag=…)`)."""
        scope = _ReadScope(tag if tag is not None else uuid.uuid4().hex, self)
        with self._reads_changed:
            self._scopes.setdefault(scope.tag, []).append(scope)
        token = _CURRENT_SCOPE.set(scope)
        try:
            yield scope.tag
        finally:
            _CURRENT_SCOPE.reset(token)
            with self._reads_changed:
                scopes = self._scopes[scope.tag]
                scopes.remove(scope)
                if not scopes:
                    del self._scopes[scope.tag]

    def cancel(self, tag: str, timeout_s: float = 5.0) -> bool:
        """Cancel the reads of `reading(tag)`: the running one in the engine, later ones before they start.
        Returns once the running read has ended (True) or after `timeout_s` (False). Safe from any thread; a tag
        with no reads is a no-op (True)."""
        with self._reads_changed:
            scopes = list(self._scopes.get(tag, ()))
            for scope in scopes:
                scope.cancelled = True
            reads = [read for read, scope in self._running.items() if scope is not None and scope in scopes]
        return self._stop(reads, timeout_s)

    def cancel_reads(self, timeout_s: float = 5.0) -> bool:
        """Cancel every caller's read running now (at shutdown; `close` does it first). True when all ended."""
        with self._reads_changed:
            reads = list(self._running)
        return self._stop(reads, timeout_s)

    def running_reads(self) -> int:
        """Callers' reads out now (waiting for a connection or running): a gauge for `/metrics`."""
        with self._reads_changed:
            return len(self._running)

    def _stop(self, reads: list[str], timeout_s: float) -> bool:
        """Cancel the engine reads `reads` until they have all returned: a kill can reach the engine before the
        read does (it then finds nothing), so it is sent again every 0.1 s while the read is still out."""
        deadline_s = time.monotonic() + timeout_s
        while True:
            with self._reads_changed:
                live = [read for read in reads if read in self._running]
            if not live:
                return True
            if time.monotonic() >= deadline_s:
                return False
            for read in live:
                with contextlib.suppress(StoreError):  # the store closing under us: the loop's deadline decides
                    self.backend.cancel(read)
            with self._reads_changed:
                if any(read in self._running for read in live):
                    self._reads_changed.wait(0.1)

    def _caller_rows(
        self, sql: str, params: Mapping[str, Any] | None, *, tenant: str | None, tenant_filter: bool = False
    ) -> list[dict[str, Any]]:
        return to_rows(self._caller_read(sql, params, tenant=tenant, tenant_filter=tenant_filter))

    def _caller_read(
        self,
        sql: str,
        params: Mapping[str, Any] | None,
        *,
        tenant: str | None,
        tenant_filter: bool = False,
        settings: Mapping[str, Any] | None = None,
        budgeted: bool = True,
        max_rows: int | None = None,
    ) -> pa.Table:
        """One read for a caller: on the backend's read pool, under `tenant`'s budget (unless not `budgeted`: the
        guard's parse-only reads), with the tenant filter if asked, cancellable (`reading`, `cancel_reads`).
        Errors come back scrubbed of the settings sent, budget hits as QueryBudgetExceeded."""
        scope = _CURRENT_SCOPE.get()
        if scope is not None and scope.store is not self:
            scope = None
        sent: dict[str, Any] = budget_settings(self.query_budgets.for_tenant(tenant)) if budgeted else {}
        sent.update(settings or {})
        if tenant_filter and tenant is not None:
            sent.update(tenant_filter_settings(self.topology, tenant))
        read = uuid.uuid4().hex
        with self._reads_changed:
            if self._closing:
                raise QueryCancelled("the read was not run: the store is closing", retryable=True, code=394)
            if scope is not None and scope.cancelled:
                raise QueryCancelled("the read was cancelled", retryable=False, code=394)
            self._running[read] = scope
        try:
            return self.backend.read(sql, params, sent, tag=read)
        except StoreError as exc:
            raise self._read_error(exc, sent, tenant, scope, max_rows) from exc
        finally:
            with self._reads_changed:
                del self._running[read]
                self._reads_changed.notify_all()

    def _read_error(
        self,
        exc: StoreError,
        sent: Mapping[str, Any],
        tenant: str | None,
        scope: _ReadScope | None,
        max_rows: int | None,
    ) -> StoreError:
        if isinstance(exc, QueryRejected | ReadersBusy):
            return exc
        if exc.code == QUERY_WAS_CANCELLED:
            if self._closing:
                return QueryCancelled("the read was cancelled: the store is closing", retryable=True, code=exc.code)
            why = "by its caller" if scope is not None and scope.cancelled else "in the engine"
            return QueryCancelled(f"the read was cancelled {why}", retryable=False, code=exc.code)
        limit = budget_limit(exc.code, str(exc))
        if (
            limit == "max_result_rows"
            and max_rows is not None
            and max_rows < self.query_budgets.for_tenant(tenant).max_result_rows
        ):
            return QueryBudgetExceeded(
                f"query stopped: its result has more than {max_rows:,} rows (the request's max_rows)",
                limit="max_rows",
                setting="max_rows",
                code=exc.code,
            )
        if limit is not None and "max_execution_time" in sent:
            return exceeded(limit, self.query_budgets, tenant, exc.code)
        return scrubbed(exc, sent)

    def close(self, timeout_s: float = 5.0) -> None:
        """Refuse new reads, cancel the running ones (waiting at most `timeout_s` for them to end), then close."""
        with self._reads_changed:
            self._closing = True
        self.cancel_reads(timeout_s)
        if self._insert_pool is not None:
            self._insert_pool.shutdown(wait=True)
        self.backend.close()


class _ReadScope:
    """The reads of one `Store.reading` block: its tag, whether it was cancelled."""

    __slots__ = ("cancelled", "store", "tag")

    def __init__(self, tag: str, store: StoreBase) -> None:
        self.tag = tag
        self.store = store
        self.cancelled = False


# The `Store.reading` block this thread (or task) is in: how a read learns its caller's tag without every read
# method taking one.
_CURRENT_SCOPE: ContextVar[_ReadScope | None] = ContextVar("ragmon_read_scope", default=None)
