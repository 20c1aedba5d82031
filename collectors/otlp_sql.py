"""The store's side of ingestion, in one place: the protobuf schema, the input table and the normalising SQL.

The store creates ``otlp_in`` (`INPUT_COLUMNS`, ``ENGINE = Null``), a materialized view ``TO otlp_norm AS
normalise_select('otlp_in')`` into a second Null table, views ``TO spans AS spans_select('otlp_norm')`` and ``TO
<content table> AS content_select('otlp_norm')``, writes `PROTO_SCHEMA` to a file, and inserts `seal`-ed request
bodies in the ``Protobuf`` format (length-delimited, schema ``<file>:Envelope``). ClickHouse parses and normalises;
Python does per-request work only."""

from collections.abc import Callable, Sequence
from functools import partial
from typing import Protocol

from ragmon.collectors.envelope import seal
from ragmon.collectors.otlp_schema import INPUT_COLUMNS, PROTO_MESSAGE, PROTO_SCHEMA
from ragmon.collectors.sql_normalise import content_select, normalise_select, spans_select
from ragmon.collectors.sql_redaction import DEFAULT as DEFAULT_REDACTION
from ragmon.collectors.sql_redaction import Redaction

__all__ = [
    "INPUT_COLUMNS",
    "PROTO_MESSAGE",
    "PROTO_SCHEMA",
    "content_select",
    "install",
    "normalise_select",
    "seal",
    "spans_select",
]


class _PipelineStore(Protocol):
    def install_otlp_ingest(
        self,
        proto_schema: str,
        message: str,
        input_columns: Sequence[tuple[str, str]],
        normalise_select: Callable[[str], str],
        spans_select: Callable[[str], str],
        content_select: Callable[[str], str],
    ) -> None: ...


def install(store: _PipelineStore, *, redaction: Redaction = DEFAULT_REDACTION) -> None:
    """Install this pipeline in `store` with the shipped price table: what tests, benchmarks and simulations run
    (the agent installs it with the prices and redaction of its settings)."""
    normalise = partial(normalise_select, redaction=redaction)
    store.install_otlp_ingest(PROTO_SCHEMA, PROTO_MESSAGE, INPUT_COLUMNS, normalise, spans_select, content_select)
