"""The tables' documentation (`ragmon schema`, docs/tables.md) tells how to read a rollup's aggregate states: each
read expression it gives runs, as written, on the real table."""

from __future__ import annotations

import re

from ragmon.sinks import Store
from ragmon.sinks.schema_doc import tables


def test_every_aggregate_state_note_reads_its_column(chdb_store: Store) -> None:
    db = chdb_store.topology.database
    read = [
        (table.name, column, match[1])
        for table in tables()
        for column, note in table.notes.items()
        if (match := re.fullmatch(r"aggregate state: read with `(.+)`", note))
    ]
    assert {column for _, column, _ in read} >= {"duration_q", "ttft_q"}
    for table, column, expression in read:
        assert expression.endswith(f"({column})"), expression
        (row,) = chdb_store.query(f"SELECT {expression} AS state FROM {db}.{table}")  # raises if it does not parse
        assert "state" in row
