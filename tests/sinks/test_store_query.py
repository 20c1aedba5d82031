"""The read-only query helper: what it refuses, what it allows, and the engine-enforced tenant filter."""

from __future__ import annotations

import pytest
from ragmon.sinks import QueryRejected, Store, StoreError

from tests.support.span_rows import insert_spans
from tests.support.synth import make_batch

REFUSED = [
    "INSERT INTO {db}.spans (span_id) VALUES ('x')",
    "DROP TABLE {db}.spans",
    "SELECT 1; DROP TABLE {db}.spans",
    "SELECT * FROM file('/etc/passwd', 'LineAsString')",
    "SELECT file('/etc/hostname')",
    "SELECT * FROM url('http://127.0.0.1:9/x', 'CSV')",
    "SELECT * FROM s3('http://127.0.0.1:9/b/x.csv')",
    "SELECT * FROM remote('127.0.0.1:9', 'system.one')",
    "SELECT * FROM mysql('127.0.0.1:9', 'db', 't', 'u', 'p')",
    "SELECT count() FROM (SELECT * FROM url('http://127.0.0.1:9/x', 'CSV'))",
    "SELECT 1 INTO OUTFILE '/tmp/ragmon-guard-test.txt'",
    "SELECT 1 FORMAT JSON",
    "SELECT count() FROM {db}.spans SETTINGS additional_table_filters = {{}}",
    "ALTER TABLE {db}.spans DELETE WHERE 1",
    "SET readonly = 0",
    "SELECT ",
]


@pytest.mark.parametrize("sql", REFUSED)
def test_refused(store: Store, sql: str) -> None:
    insert_spans(store, make_batch(2, seed=21))
    with pytest.raises(QueryRejected):
        store.query(sql.format(db=store.topology.database))
    assert store.query(f"SELECT count() AS n FROM {store.topology.database}.spans") == [{"n": 10}]


def test_allowed_shapes(store: Store) -> None:
    db = store.topology.database
    insert_spans(store, make_batch(3, seed=22))
    assert store.query("SELECT number AS n FROM numbers(3) ORDER BY n") == [{"n": 0}, {"n": 1}, {"n": 2}]
    rows = store.query(
        f"WITH s AS (SELECT stage FROM {db}.spans) SELECT stage, count() AS n FROM s GROUP BY stage ORDER BY stage;"
    )
    assert sum(r["n"] for r in rows) == 15
    union = store.query("SELECT 1 AS x UNION ALL SELECT {y:UInt8} AS x", {"y": 2})
    assert sorted(r["x"] for r in union) == [1, 2]


def test_row_cap(store: Store) -> None:
    with pytest.raises(StoreError):
        store.query("SELECT number FROM numbers(100)", max_rows=10)


def test_row_cap_can_cut_and_say_there_were_more(store: Store) -> None:
    # The engine stops a block past the cap (up to ~65k rows); the store hands back the cap and one row more.
    assert len(store.query("SELECT number FROM numbers(200000)", max_rows=10, cut_at_max_rows=True)) == 11
    assert len(store.query("SELECT number FROM numbers(10)", max_rows=10, cut_at_max_rows=True)) == 10


def test_describe_and_show_tables_read_as_their_selects(store: Store) -> None:
    db = store.topology.database
    tables = [row["name"] for row in store.query("SHOW TABLES")]
    assert {"spans", "scores", "payloads", "spans_1m"} <= set(tables)
    for statement in ("DESCRIBE scores", f"desc table {db}.scores;", "DESCRIBE `scores`"):
        columns = {row["name"]: row for row in store.query(statement)}
        assert "value" in columns and "score" not in columns
        assert columns["value"]["type"].startswith(("Float", "Nullable(Float"))
    spans = {row["name"]: row["note"] for row in store.query("DESCRIBE spans")}
    assert spans["parent_span_id"] == "'' for a root"  # the note from the schema source, as `ragmon schema` has it
    with pytest.raises(QueryRejected, match="no table 'nosuch'"):
        store.query("DESCRIBE nosuch")
    with pytest.raises(QueryRejected):
        store.query("DESCRIBE spans; DROP TABLE spans")


def test_tenant_filter_reaches_every_table_and_subquery(store: Store) -> None:
    db = store.topology.database
    insert_spans(store, make_batch(10, seed=23, tenants=("acme", "globex")))
    store.roll_up(0, 0)
    store.insert_payloads([{"tenant": "acme", "trace_id": "1"}, {"tenant": "globex", "trace_id": "2"}])
    sql = (
        f"SELECT (SELECT count() FROM {db}.spans) AS spans, (SELECT count() FROM {db}.payloads) AS payloads,"
        f" (SELECT sum(spans) FROM {db}.spans_1m) AS rollup, (SELECT uniqExact(tenant) FROM {db}.spans AS x) AS t"
    )
    assert store.query(sql, tenant="acme") == [{"spans": 25, "payloads": 1, "rollup": 25, "t": 1}]
    assert store.query(sql) == [{"spans": 50, "payloads": 2, "rollup": 50, "t": 2}]
    # The filter is a setting, so its tenant is quoted, not bound (`queries.tenant_filter_settings`): a name
    # written to close the quotes early is still one tenant's name, and that tenant has nothing.
    for odd in ("acme' OR 1 = 1 OR tenant = '", "acme\\' OR '1", "acme\\", "x'}, 'spans': '1"):
        assert store.query(sql, tenant=odd) == [{"spans": 0, "payloads": 0, "rollup": 0, "t": 0}], odd


def test_engine_refuses_writes_on_the_read_path(store: Store) -> None:
    """Defence in depth: even without the guard, the read connection cannot write."""
    db = store.topology.database
    with pytest.raises(StoreError) as info:
        store.backend.select(f"INSERT INTO {db}.alerts (alert_id) VALUES ('x')", readonly=True)
    assert info.value.code == 164  # READONLY


def test_unqualified_tables_are_the_stores(store: Store) -> None:
    insert_spans(store, make_batch(2, seed=24))
    store.roll_up(0, 0)
    assert store.query("SELECT count() AS n FROM spans") == [{"n": 10}]
    assert store.query("SELECT sum(spans) AS n FROM spans_1m", tenant="acme") == [{"n": 10}]
    assert store.query("SELECT count() AS n FROM spans", tenant="nobody") == [{"n": 0}]
