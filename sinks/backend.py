"""The one small interface both store backends implement, plus helpers they share.

A backend runs ClickHouse SQL with server-side `{name:Type}` parameters (never string-formatted values), returns
results as Arrow tables, and inserts Arrow tables. Both the embedded engine (`chdb_backend.py`) and a ClickHouse
server (`server_backend.py`) run the same SQL text, so the schema and queries are written once.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Generic, Protocol, TypeVar

import pyarrow as pa
from ragmon.sinks.errors import ReadersBusy, StoreError

Params = Mapping[str, Any]
Settings = Mapping[str, str | int | float]
C = TypeVar("C")

QUERY_WAS_CANCELLED = 394  # the engine's code for a cancelled query; a read cancelled before it ran says the same
READ_TAG = re.compile(r"^[0-9a-f]{32}$")  # a read's tag (uuid4().hex): safe inside SQL comments and literals


def checked_read_tag(tag: str) -> str:
    """`tag` when it is a read's tag (`READ_TAG`), else ValueError: it goes into SQL text as it is."""
    if not READ_TAG.match(tag):
        raise ValueError(f"a read tag is 32 hex digits, got {tag!r}")
    return tag


class Backend(Protocol):
    kind: str  # "chdb" | "clickhouse"

    def execute(self, sql: str, params: Params | None = None, settings: Settings | None = None) -> None:
        """Run a statement that returns nothing (DDL, ALTER, INSERT … SELECT)."""

    def select(
        self, sql: str, params: Params | None = None, settings: Settings | None = None, *, readonly: bool = False
    ) -> pa.Table:
        """Run a SELECT and return its result. `readonly` runs it where writes are refused by the engine."""

    def read(self, sql: str, params: Params | None = None, settings: Settings | None = None, *, tag: str) -> pa.Table:
        """A caller's read: read-only, on one of a bounded set of connections (`ReadersBusy` when none frees up
        within `read_wait_s`), marked with `tag` (32 hex digits) so that `cancel(tag)` stops it in the engine."""

    def cancel(self, tag: str) -> bool:
        """Stop the read marked `tag`: a read still waiting for a connection fails without running, a running one
        is killed in the engine (it then raises StoreError code 394). True when such a read was known. Idempotent;
        a kill sent before the engine lists the query misses it, so callers repeat it until the read has ended."""

    def insert(self, table: str, data: pa.Table, settings: Settings | None = None) -> int:
        """Insert `data` into `table` (qualified, quoted) in one request; returns the rows sent."""

    def insert_raw(self, table: str, fmt: str, data: bytes, settings: Settings | None = None) -> None:
        """Insert bytes already encoded in the ClickHouse input format `fmt` into `table`, in one request."""

    def use_database(self, database: str) -> None:
        """Resolve unqualified table names in `database` from now on (`SELECT … FROM spans`)."""

    def close(self) -> None: ...


def quote_string(value: str) -> str:
    """A ClickHouse single-quoted string literal.

    For text that has to stand alone, where a bound parameter cannot go: DDL (the views' SQL and its constants,
    stored with the view), migration guards (printed by `ragmon migrate --print` as a script to read or run) and
    setting values (`queries.tenant_filter_settings`). A query's values are bound `{name:Type}` parameters."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def settings_clause(settings: Settings | None) -> str:
    """` SETTINGS k = v, …` for SQL text; names are checked, values quoted unless numeric."""
    if not settings:
        return ""
    items = []
    for name, value in settings.items():
        if not name.replace("_", "").isalnum():
            raise ValueError(f"bad setting name {name!r}")
        literal = str(value) if isinstance(value, int | float) else quote_string(str(value))
        items.append(f"{name} = {literal}")
    return " SETTINGS " + ", ".join(items)


def escape_param(value: Any) -> str:
    """A parameter value in ClickHouse's escaped text form, as the HTTP interface expects `param_*` values.

    Tab, newline and backslash must be escaped or the engine stops parsing early; arrays use literal syntax.
    """
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_array_member(v) for v in value) + "]"
    text = str(value)
    return (
        text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r").replace("\0", "\\0")
    )


def _array_member(value: Any) -> str:
    if isinstance(value, str):
        return quote_string(value)
    return escape_param(value)


class ReadPool(Generic[C]):
    """Bounded read slots (connections, or plain tokens for an HTTP client) and the reads holding or awaiting them.

    Both backends run callers' reads through one: at most `size` at a time, a read waits for a slot at most
    `wait_s` (then `ReadersBusy`), and a read can be cancelled while it waits (it fails at once) or while it runs
    (`cancel` says so, and the backend kills it in the engine). Slots are opened by `open_item` when first needed:
    a process that serves no caller (the CLI, a judge worker) opens none."""

    def __init__(self, size: int, open_item: Callable[[], C]) -> None:
        self.size = size
        self._open_item = open_item
        self.opened: list[C] = []
        self._free: list[C] = []
        self._cond = threading.Condition()
        self._waiting: set[str] = set()
        self._holding: dict[str, C] = {}
        self._cancelled: set[str] = set()
        self._closed = False

    @contextmanager
    def slot(self, tag: str, wait_s: float) -> Iterator[C]:
        deadline_s = time.monotonic() + wait_s
        with self._cond:
            if tag in self._waiting or tag in self._holding:
                raise StoreError(f"a read tagged {tag} is already running", retryable=False)
            self._waiting.add(tag)
            try:
                if not self._free and len(self.opened) < self.size:
                    self._free.append(self._open_item())
                    self.opened.append(self._free[-1])
                while not self._free and tag not in self._cancelled and not self._closed:
                    left_s = deadline_s - time.monotonic()
                    if left_s <= 0:
                        raise ReadersBusy(
                            f"all {self.size} read connections stayed busy for {wait_s:g} s: try again shortly"
                        )
                    self._cond.wait(left_s)
                if tag in self._cancelled or self._closed:
                    raise StoreError(
                        "Code: 394. the read was cancelled before it ran (QUERY_WAS_CANCELLED)",
                        retryable=False,
                        code=QUERY_WAS_CANCELLED,
                    )
                item = self._free.pop()
                self._holding[tag] = item
            finally:
                self._waiting.discard(tag)
                if tag not in self._holding:
                    self._cancelled.discard(tag)
        try:
            yield item
        finally:
            with self._cond:
                del self._holding[tag]
                self._cancelled.discard(tag)
                self._free.append(item)
                self._cond.notify_all()

    def cancel(self, tag: str, kill: Callable[[str], None]) -> bool:
        """Mark `tag` cancelled (a read still waiting fails at once) and `kill` it in the engine if it holds a
        slot. Whether the read was known."""
        with self._cond:
            known = tag in self._waiting or tag in self._holding
            if known:
                self._cancelled.add(tag)
                self._cond.notify_all()
            running = tag in self._holding
        if running:
            kill(tag)
        return known

    def close(self, kill: Callable[[str], None], timeout_s: float) -> bool:
        """Refuse new reads, fail waiting ones, kill running ones (again every 0.1 s: a kill can come before the
        engine lists its query) until all slots are free or `timeout_s` has passed. True when they all are. A kill
        that fails is let be: the read still ends at its budget's deadline, and close does not wait past
        `timeout_s`."""
        deadline_s = time.monotonic() + timeout_s
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        while True:
            with self._cond:
                holding = list(self._holding)
                if not holding:
                    return True
            if time.monotonic() >= deadline_s:
                return False
            for tag in holding:
                with contextlib.suppress(StoreError):
                    kill(tag)
            with self._cond:
                if self._holding:
                    self._cond.wait(0.1)
