"""A minimal store for the collectors' tests: the Null input table and the normalising materialized views in
chDB, created exactly as the real store does (`ragmon.sinks.otlp_views.install`), one database per test.

chDB allows one session path per process, so the session is shared (see conftest) and isolation comes from
separate databases.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from chdb import session as chdb_session
from ragmon.sinks.envelope import INPUT_COLUMNS, PROTO_MESSAGE, PROTO_SCHEMA, frame, seal
from ragmon.sinks.normalise_sql import content_select, normalise_select, spans_select

from ragmon.model import CONTENT_COLUMNS, SPAN_COLUMNS
from ragmon.pricing import PriceTable


def _columns(columns: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"`{name}` {type_}" for name, type_ in columns)


class SqlStore:
    """otlp_in (Null) → MVs → `spans` and `content` (MergeTree) in a fresh database."""

    def __init__(
        self,
        session: chdb_session.Session,
        schema_dir: Path,
        *,
        prices: PriceTable | None = None,
        max_attribute_chars: int = 4096,
        max_content_chars: int = 65536,
    ) -> None:
        self.session = session
        self.db = f"t_{uuid.uuid4().hex[:12]}"
        schema = schema_dir / "otlp_envelope.proto"
        if not schema.exists():
            schema.write_text(PROTO_SCHEMA, encoding="utf-8")
        self.format_schema = f"{schema}:{PROTO_MESSAGE}"
        db = self.db
        session.query(f"CREATE DATABASE {db}")
        session.query(f"CREATE TABLE {db}.otlp_in ({_columns(INPUT_COLUMNS)}) ENGINE = Null")
        session.query(f"CREATE TABLE {db}.spans ({_columns(SPAN_COLUMNS)}) ENGINE = MergeTree ORDER BY tuple()")
        session.query(f"CREATE TABLE {db}.content ({_columns(CONTENT_COLUMNS)}) ENGINE = MergeTree ORDER BY tuple()")
        normalise = normalise_select(
            f"{db}.otlp_in", max_attribute_chars=max_attribute_chars, max_content_chars=max_content_chars
        )
        session.query(f"CREATE TABLE {db}.norm ENGINE = Null EMPTY AS {normalise}")
        session.query(f"CREATE MATERIALIZED VIEW {db}.norm_mv TO {db}.norm AS {normalise}")
        session.query(f"CREATE MATERIALIZED VIEW {db}.spans_mv TO {db}.spans AS {spans_select(f'{db}.norm', prices)}")
        session.query(f"CREATE MATERIALIZED VIEW {db}.content_mv TO {db}.content AS {content_select(f'{db}.norm')}")
        self._seq = 0

    def insert(self, requests: Iterable[tuple[str, bytes]]) -> None:
        """Seal and insert (tenant, OTLP request body) pairs in one batch, as the store does."""
        insert = self.session.send_insert(
            f"INSERT INTO {self.db}.otlp_in SETTINGS format_schema='{self.format_schema}'", "Protobuf"
        )
        for tenant, body in requests:
            self._seq += 1
            envelope = seal(body, tenant, self._seq)
            insert.append(frame([envelope]))
        insert.finish()

    def _rows(self, table: str) -> list[dict[str, Any]]:
        text = self.session.query(
            f"SELECT * FROM {self.db}.{table} ORDER BY start_time, span_id "
            "SETTINGS output_format_json_quote_64bit_integers = 0",
            "JSONEachRow",
        ).bytes()
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def spans(self) -> list[dict[str, Any]]:
        return self._rows("spans")

    def content(self) -> list[dict[str, Any]]:
        return self._rows("content")

    def by_name(self) -> dict[str, dict[str, Any]]:
        """Span rows by span name, each with its `content` map ({} when it has none) and `content_row`."""
        content = {row["span_id"]: row for row in self.content()}
        out: dict[str, dict[str, Any]] = {}
        for row in self.spans():
            extra = content.get(row["span_id"])
            out[row["name"]] = {**row, "content": extra["content"] if extra else {}, "content_row": extra}
        return out
