"""The store's side of ingestion, in one place: the protobuf schema, the input table and the normalising SQL.

The store creates ``otlp_in`` (`INPUT_COLUMNS`, ``ENGINE = Null``), a materialized view ``TO otlp_norm AS
normalise_select('otlp_in')`` into a second Null table, views ``TO spans AS spans_select('otlp_norm')`` and ``TO
<content table> AS content_select('otlp_norm')``, writes `PROTO_SCHEMA` to a file, and inserts `seal`-ed request
bodies in the ``Protobuf`` format (length-delimited, schema ``<file>:Envelope``). ClickHouse parses and normalises;
Python does per-request work only."""

from collectors.envelope import seal
from collectors.otlp_schema import INPUT_COLUMNS, PROTO_MESSAGE, PROTO_SCHEMA
from collectors.sql_normalise import content_select, normalise_select, spans_select

__all__ = [
    "INPUT_COLUMNS",
    "PROTO_MESSAGE",
    "PROTO_SCHEMA",
    "content_select",
    "normalise_select",
    "seal",
    "spans_select",
]
