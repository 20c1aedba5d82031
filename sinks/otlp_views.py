"""The OTLP ingest path in the engine: Protobuf envelopes → `otlp_in` → view → `otlp_norm` → views → `spans`,
`span_content`.

Normalisation is SQL (written by `normalise_sql.py`, installed by `install`), so storing a span costs no Python: the
agent frames the envelopes it has logged (`varint(len) + message`, ClickHouse's length-delimited Protobuf stream)
and sends them in one INSERT into `otlp_in`, a `Null` table. Its one materialised view normalises every span once
into `otlp_norm`, another `Null` table, whose two views write the slim span rows and the captured text. The SELECTs
embed the price table and the redaction rules, so they change between releases and settings: `install_statements`
replaces them when their digest (kept in the objects' COMMENT) differs, and does nothing when it matches, so
start-up is idempotent. Replacing drops and re-creates the views — run it at start-up, before receivers accept
traffic; an insert in between would miss a view.

Where the engine finds the Protobuf schema (`format_schema` is resolved by the server, never the client):

- embedded (chDB): the schema is written under the data directory (`format_schemas/ragmon_otlp_<digest>.proto`,
  named by content because the engine caches parsed schemas by file name) and named by absolute path;
- a ClickHouse server with `format_schema_source` (26.9 has it): the schema text travels with each INSERT
  (`format_schema_source = 'string'`), so nothing has to be deployed on the server; the loopback `chhttp`
  endpoint works the same way;
- an older server reads schemas only from its `format_schema_path` (`/var/lib/clickhouse/format_schemas/` by
  default): the deployment must copy `schema_file_name(...)` there (the agent logs the name; `ragmon` ships the
  file's text as `ragmon.sinks.envelope.PROTO_SCHEMA`). The INSERT then names it relative to that directory.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from ragmon.sinks.envelope import INPUT_COLUMNS, PROTO_MESSAGE, PROTO_SCHEMA
from ragmon.sinks.normalise_sql import content_select, normalise_select, spans_select
from ragmon.sinks.redaction import DEFAULT as DEFAULT_REDACTION
from ragmon.sinks.redaction import Redaction
from ragmon.sinks.schema import (
    CONTENT_TABLE,
    OTLP_CONTENT_VIEW,
    OTLP_NORMALISE_VIEW,
    OTLP_SPANS_VIEW,
    Ddl,
    quote_identifier,
)

from ragmon.pricing import PriceTable

if TYPE_CHECKING:
    from ragmon.sinks.store import Store  # the store imports this module

INPUT_TABLE = "otlp_in"
NORMALISED_TABLE = "otlp_norm"
NORMALISE_VIEW = OTLP_NORMALISE_VIEW
SPANS_VIEW = OTLP_SPANS_VIEW
CONTENT_VIEW = OTLP_CONTENT_VIEW
_OBJECTS = (INPUT_TABLE, NORMALISED_TABLE, NORMALISE_VIEW, SPANS_VIEW, CONTENT_VIEW)

SelectSql = str | Callable[[str], str]  # the SELECT text, or a function of the (qualified) table it reads
_UNQUALIFIED = {name: re.compile(rf"(?i)(\bFROM\s+)`?{name}`?(?![\w.`])") for name in (INPUT_TABLE, NORMALISED_TABLE)}


@dataclass(frozen=True, slots=True)
class OtlpPipeline:
    """Everything the engine needs to turn envelopes into rows; its digest names one version of it."""

    proto_schema: str
    message: str
    input_columns: tuple[tuple[str, str], ...]
    normalise_select: str  # otlp_in → otlp_norm
    spans_select: str  # otlp_norm → spans
    content_select: str  # otlp_norm → span_content

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        parts = (self.normalise_select, self.spans_select, self.content_select)
        for part in (self.proto_schema, self.message, repr(self.input_columns), *parts):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:16]


def build_pipeline(
    ddl: Ddl,
    proto_schema: str,
    message: str,
    input_columns: Sequence[tuple[str, str]],
    normalise_select: SelectSql,
    spans_select: SelectSql,
    content_select: SelectSql,
) -> OtlpPipeline:
    """`normalise_select` reads `otlp_in`; `spans_select` and `content_select` read its rows from `otlp_norm`."""

    def render(select: SelectSql, source: str) -> str:
        qualified = ddl.table(source)
        if callable(select):
            return select(qualified)
        # A view resolves an unqualified table in the *session's* database (`default`), not the view's own, so a
        # SELECT written against plain `otlp_in` (or `otlp_norm`) is pointed at the store's database here.
        return _UNQUALIFIED[source].sub(lambda m: m.group(1) + qualified, select)

    return OtlpPipeline(
        proto_schema,
        message,
        tuple(input_columns),
        render(normalise_select, INPUT_TABLE),
        render(spans_select, NORMALISED_TABLE),
        render(content_select, NORMALISED_TABLE),
    )


def installed_digests(rows: Sequence[dict[str, str]]) -> dict[str, str]:
    """{object name: comment} from `system.tables` rows, for the objects of the pipeline."""
    return {row["name"]: row["comment"] for row in rows if row["name"] in _OBJECTS}


def install_statements(ddl: Ddl, pipeline: OtlpPipeline) -> list[str]:
    """Drop and re-create the two Null tables and the three views, each commented with the pipeline's digest."""
    comment = f"COMMENT 'ragmon:{pipeline.digest}'"
    columns = ",\n    ".join(f"{quote_identifier(name)} {ch_type}" for name, ch_type in pipeline.input_columns)
    view = f"CREATE MATERIALIZED VIEW {{name}}{ddl.on_cluster} TO {{target}} AS\n{{select}}\n{comment}"
    input_table, normalised = ddl.table(INPUT_TABLE), ddl.table(NORMALISED_TABLE)
    return [
        # views first (a view must not outlive its source); Null tables keep no rows, so re-creating them loses
        # nothing, and a table from an older release (this pipeline had no otlp_norm before) goes with them
        *(f"DROP VIEW IF EXISTS {ddl.table(v)}{ddl.on_cluster}" for v in (SPANS_VIEW, CONTENT_VIEW, NORMALISE_VIEW)),
        f"DROP TABLE IF EXISTS {normalised}{ddl.on_cluster}",
        f"DROP TABLE IF EXISTS {input_table}{ddl.on_cluster}",
        f"CREATE TABLE {input_table}{ddl.on_cluster} (\n    {columns}\n) ENGINE = Null {comment}",
        # the normalised table's columns are whatever the SELECT returns: EMPTY AS creates it without running it
        f"CREATE TABLE {normalised}{ddl.on_cluster} ENGINE = Null EMPTY AS\n{pipeline.normalise_select}\n{comment}",
        view.format(name=ddl.table(NORMALISE_VIEW), target=normalised, select=pipeline.normalise_select),
        view.format(name=ddl.table(SPANS_VIEW), target=ddl.table("spans"), select=pipeline.spans_select),
        view.format(name=ddl.table(CONTENT_VIEW), target=ddl.table(CONTENT_TABLE), select=pipeline.content_select),
    ]


def is_installed(ddl_digests: dict[str, str], pipeline: OtlpPipeline) -> bool:
    want = f"ragmon:{pipeline.digest}"
    return all(ddl_digests.get(name) == want for name in _OBJECTS)


def schema_file_name(pipeline: OtlpPipeline) -> str:
    return f"ragmon_otlp_{hashlib.sha256(pipeline.proto_schema.encode()).hexdigest()[:16]}.proto"


def write_schema_file(directory: Path, pipeline: OtlpPipeline) -> Path:
    """Write the schema under `directory` once (atomically: a reader never sees half a file)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / schema_file_name(pipeline)
    if not path.exists() or path.read_text() != pipeline.proto_schema:
        partial = path.with_suffix(".tmp")
        partial.write_text(pipeline.proto_schema)
        partial.replace(path)
    return path


def file_schema_settings(path_or_name: str, message: str) -> dict[str, str]:
    return {"format_schema": f"{path_or_name}:{message}"}


def inline_schema_settings(pipeline: OtlpPipeline) -> dict[str, str]:
    return {
        "format_schema_source": "string",
        "format_schema": pipeline.proto_schema,
        "format_schema_message_name": pipeline.message,
    }


def install(store: Store, *, prices: PriceTable | None = None, redaction: Redaction = DEFAULT_REDACTION) -> None:
    """Install ragmon's normalising pipeline in `store` (`Store.install_otlp_views`): the envelope's schema, the
    SELECTs of `normalise_sql` with `prices` (default: the shipped price table) and `redaction`. The agent passes
    its settings' prices and redaction; tests, benchmarks and simulations take the defaults."""
    normalise = partial(normalise_select, redaction=redaction)
    spans = partial(spans_select, prices=prices)
    store.install_otlp_views(PROTO_SCHEMA, PROTO_MESSAGE, INPUT_COLUMNS, normalise, spans, content_select)
