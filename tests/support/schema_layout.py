"""A database's schema as the engine states it, to compare two stores' schemas (`layout`)."""

from __future__ import annotations

from typing import Any

from ragmon.sinks.backend import Backend


def layout(backend: Backend, database: str) -> dict[str, Any]:
    """Everything a database's schema says, with the database's name taken out: each table's and view's CREATE as
    the engine states it, its engine and keys, its columns in order with their types, defaults and codecs, and its
    data-skipping indexes."""

    def rows(sql: str) -> list[dict[str, Any]]:
        found = backend.select(sql, {"db": database}).to_pylist()
        return [{k: v.replace(database, "<db>") if isinstance(v, str) else v for k, v in r.items()} for r in found]

    return {
        "tables": rows(
            "SELECT name, engine, engine_full, create_table_query, sorting_key, primary_key, partition_key"
            " FROM system.tables WHERE database = {db:String} ORDER BY name"
        ),
        "columns": rows(
            "SELECT table, position, name, type, default_kind, default_expression, comment, compression_codec,"
            " is_in_sorting_key, is_in_primary_key FROM system.columns WHERE database = {db:String}"
            " ORDER BY table, position"
        ),
        "indexes": rows(
            "SELECT table, name, type_full, expr, granularity FROM system.data_skipping_indices"
            " WHERE database = {db:String} ORDER BY table, name"
        ),
    }
