"""Columns → Apache Arrow, the one insert encoding both backends share.

Building an Arrow table from per-column Python lists of `spans` rows is cheap (pyarrow converts list-of-str/float/dict
in C; benchmarks/store_insert.py, docs/results.md), and the engine ingests Arrow
without a per-row Python step. JSONEachRow or Values would need a Python formatting pass per row, and pandas
(`Python(df)`) cannot carry `Array`/`Map` columns with NULLs faithfully. pyarrow is already a hard dependency of
chdb, so this adds no install.

Types come from the ClickHouse type strings of the schema (`SPAN_COLUMNS` and `schema.py`), parsed here once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

_SCALARS: dict[str, pa.DataType] = {
    "String": pa.string(),
    "Float64": pa.float64(),
    "Float32": pa.float32(),
    "UInt8": pa.uint8(),
    "UInt16": pa.uint16(),
    "UInt32": pa.uint32(),
    "UInt64": pa.uint64(),
    "Int32": pa.int32(),
    "Int64": pa.int64(),
    "Bool": pa.bool_(),
    "DateTime": pa.timestamp("s", tz="UTC"),
    "DateTime64(3)": pa.timestamp("ms", tz="UTC"),
    "DateTime64(6)": pa.timestamp("us", tz="UTC"),
    "DateTime64(9)": pa.timestamp("ns", tz="UTC"),
}


def _split_args(inner: str) -> list[str]:
    """Split `A, B(C, D), E` at top-level commas."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(inner):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    parts.append(inner[start:].strip())
    return parts


@cache
def arrow_type(ch_type: str) -> pa.DataType:
    """The Arrow type that ClickHouse reads into `ch_type` (nullability lives on the Arrow field)."""
    ch_type = ch_type.strip()
    if ch_type in _SCALARS:
        return _SCALARS[ch_type]
    head, _, rest = ch_type.partition("(")
    inner = rest[:-1]
    if head in ("LowCardinality", "Nullable"):
        return arrow_type(inner)
    if head == "SimpleAggregateFunction":  # stored as its value type: (function, type)
        return arrow_type(_split_args(inner)[1])
    if head == "Array":
        return pa.list_(arrow_type(inner))
    if head == "Map":
        key, value = _split_args(inner)
        return pa.map_(arrow_type(key), arrow_type(value))
    if head == "Tuple":
        fields = []
        for member in _split_args(inner):
            name, _, member_type = member.partition(" ")
            fields.append(pa.field(name, arrow_type(member_type), nullable=member_type.startswith("Nullable")))
        return pa.struct(fields)
    raise ValueError(f"no Arrow mapping for ClickHouse type {ch_type!r}")


def to_table(columns: Mapping[str, Sequence[Any]], types: Sequence[tuple[str, str]]) -> pa.Table:
    """An Arrow table with one column per (name, ClickHouse type) in `types`, taken from `columns`."""
    arrays = []
    fields = []
    for name, ch_type in types:
        data_type = arrow_type(ch_type)
        arrays.append(pa.array(columns[name], type=data_type))
        fields.append(pa.field(name, data_type, nullable=ch_type.startswith("Nullable")))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def to_ipc_stream(table: pa.Table) -> bytes:
    """The Arrow IPC *stream* encoding (ClickHouse format `ArrowStream`)."""
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def to_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows as dicts; Map columns become dicts (Arrow gives them as lists of pairs)."""
    rows: list[dict[str, Any]] = table.to_pylist()
    map_columns = [f.name for f in table.schema if pa.types.is_map(f.type)]
    for row in rows:
        for name in map_columns:
            if row[name] is not None:
                row[name] = dict(row[name])
    return rows
