"""The one small interface both store backends implement, plus helpers they share.

A backend runs ClickHouse SQL with server-side `{name:Type}` parameters (never string-formatted values), returns
results as Arrow tables, and inserts Arrow tables. Both the embedded engine (`chdb_backend.py`) and a ClickHouse
server (`server_backend.py`) run the same SQL text, so the schema and queries are written once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import pyarrow as pa

Params = Mapping[str, Any]
Settings = Mapping[str, str | int | float]


class Backend(Protocol):
    kind: str  # "chdb" | "clickhouse"

    def execute(self, sql: str, params: Params | None = None, settings: Settings | None = None) -> None:
        """Run a statement that returns nothing (DDL, ALTER, INSERT … SELECT)."""

    def select(
        self, sql: str, params: Params | None = None, settings: Settings | None = None, *, readonly: bool = False
    ) -> pa.Table:
        """Run a SELECT and return its result. `readonly` runs it where writes are refused by the engine."""

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
