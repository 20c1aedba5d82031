"""The loopback ClickHouse-HTTP endpoint, driven by clickhouse-connect and by raw HTTP."""

from __future__ import annotations

import gzip
import json
from datetime import datetime

import clickhouse_connect
import httpx
import pytest

from tests.support.chhttp import ClickHouseHttpServer


@pytest.fixture
def client(http_server: ClickHouseHttpServer):
    c = clickhouse_connect.get_client(dsn=http_server.url, autogenerate_session_id=False)
    yield c
    c.close()


def test_native_query_types_and_params(client, http_server: ClickHouseHttpServer) -> None:
    assert client.server_version == http_server.version
    result = client.query(
        "SELECT {s:String} AS s, toUInt64(7) AS n, [1.5, 2.5] AS a, map('k', 'v') AS m,"
        " toDateTime64('2026-01-02 03:04:05.123456789', 9, 'UTC') AS t, CAST(NULL, 'Nullable(Int32)') AS z",
        parameters={"s": "x'); DROP TABLE spans; --\n\t\\"},
    )
    row = result.first_row
    assert row[:4] == ("x'); DROP TABLE spans; --\n\t\\", 7, [1.5, 2.5], {"k": "v"})
    assert row[4].replace(tzinfo=None) == datetime(2026, 1, 2, 3, 4, 5, 123456)
    assert row[5] is None


@pytest.mark.parametrize("compress", [False, "lz4", "zstd", "gzip"])
def test_native_insert_with_each_compression(http_server: ClickHouseHttpServer, database: str, compress) -> None:
    c = clickhouse_connect.get_client(dsn=http_server.url, autogenerate_session_id=False, compress=compress)
    try:
        c.command(f"CREATE DATABASE IF NOT EXISTS {database}")
        c.command(f"CREATE TABLE {database}.t (a UInt32, s String, l Array(String)) ENGINE = MergeTree ORDER BY a")
        c.insert(f"{database}.t", [[1, "x", ["p"]], [2, "y\nz", []]], column_names=["a", "s", "l"])
        assert c.query(f"SELECT a, s, l FROM {database}.t ORDER BY a").result_rows == [(1, "x", ["p"]), (2, "y\nz", [])]
        assert c.query(f"SELECT * FROM {database}.t ORDER BY a", settings={"max_threads": 1}).row_count == 2
    finally:
        c.close()


def test_raw_http_summary_headers_errors_and_get_readonly(http_server: ClickHouseHttpServer, database: str) -> None:
    base = http_server.url
    assert httpx.get(f"{base}/ping").text == "Ok.\n"
    created = httpx.post(base, content=f"CREATE DATABASE IF NOT EXISTS {database}")
    assert created.status_code == 200
    httpx.post(base, params={"database": database}, content="CREATE TABLE t (a UInt8) ENGINE = MergeTree ORDER BY a")
    inserted = httpx.post(
        base,
        params={"query": f"INSERT INTO {database}.t FORMAT TabSeparated"},
        content=gzip.compress(b"1\n2\n3\n"),
        headers={"Content-Encoding": "gzip"},
    )
    assert json.loads(inserted.headers["X-ClickHouse-Summary"])["written_rows"] == "3"
    selected = httpx.get(base, params={"query": f"SELECT sum(a) FROM {database}.t FORMAT JSONEachRow"})
    assert selected.json() == {"sum(a)": "6"} or selected.json() == {"sum(a)": 6}
    assert selected.headers["X-ClickHouse-Format"] == "JSONEachRow"
    assert selected.headers["X-ClickHouse-Timezone"] == http_server.timezone
    refused = httpx.get(base, params={"query": f"INSERT INTO {database}.t VALUES (4)"})
    assert refused.status_code == 403 and refused.headers["X-ClickHouse-Exception-Code"] == "164"
    missing = httpx.post(base, content="SELECT * FROM nowhere_at_all")
    assert missing.status_code == 404 and missing.text.startswith("Code: 60.")
    bad_setting = httpx.post(base, params={"no_such_setting": "1"}, content="SELECT 1")
    assert bad_setting.status_code == 400 and bad_setting.headers["X-ClickHouse-Exception-Code"] == "115"
