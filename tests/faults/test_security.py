"""Security of the agent's read API with API keys: tenant isolation on every query shape, read-only queries, 401
without a key, and no secret in the logs or the answers. An in-process Agent with an injected store on the shared
chDB engine (one engine path per process), all ports ephemeral on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ragmon.sinks import Store, open_store

from ragmon.agent.agent import Agent
from ragmon.settings import load_settings
from tests.faults.faults_support import TALLY, good_body
from tests.support.prometheus import text_of

pytestmark = pytest.mark.faults

KEYS = {"acme": "sk-acme-Zq81xJm4T0pW", "globex": "sk-globex-Ry72vKn5S9oQ"}
SPANS_EACH = 6


class Deployed:
    def __init__(self, agent: Agent, store: Store, db: str) -> None:
        self.agent, self.store, self.db = agent, store, db
        self.spans: dict[str, set[str]] = {}

    @property
    def receiver_port(self) -> int:
        return int(self.agent.receivers[0].port)

    @property
    def api(self) -> str:
        assert self.agent.api is not None
        return self.agent.api.url


def _call(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


@pytest.fixture(scope="module")
def deployed(chdb_engine_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    db = f"sec_{uuid.uuid4().hex[:8]}"
    store = open_store(chdb_engine_dir, database=db)
    settings = load_settings(
        {
            "agent": {
                "data_dir": tmp_path_factory.mktemp("sec-agent"),
                "otlp_http": "127.0.0.1:0",
                "otlp_grpc": "",
                "api": "127.0.0.1:0",
                "api_keys": KEYS,
            }
        },
        env={},
    )
    agent = Agent(settings, store=store).start()
    deployed = Deployed(agent, store, db)
    try:
        for tenant, key in KEYS.items():
            body, span_ids = good_body(SPANS_EACH, service=f"{tenant}-private-svc")
            status, _ = _call(
                "POST",
                f"http://127.0.0.1:{deployed.receiver_port}/v1/traces",
                body,
                {"Content-Type": "application/x-protobuf", "x-api-key": key},
            )
            assert status == 200
            deployed.spans[tenant] = {s.hex() for s in span_ids}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = store.query("SELECT tenant, count() AS n FROM spans GROUP BY tenant ORDER BY tenant")
            if rows == [{"tenant": "acme", "n": SPANS_EACH}, {"tenant": "globex", "n": SPANS_EACH}]:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"spans never stored: {rows}")
        yield deployed
    finally:
        agent.stop()
        store.close()


def _query(deployed: Deployed, sql: str, key: str | None = KEYS["acme"]) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["x-api-key"] = key
    status, text = _call("POST", f"{deployed.api}/api/query", json.dumps({"sql": sql}).encode(), headers)
    TALLY.security_probes += 1
    TALLY.security_refused += 400 <= status < 500
    return status, text


def _leaks_globex(deployed: Deployed, text: str) -> list[str]:
    markers = ["globex-private-svc", *deployed.spans["globex"], "globex"]
    return [m for m in markers if m in text]


# --- tenant isolation ----------------------------------------------------------------------------------------------
ISOLATION = [
    "SELECT * FROM spans",
    "SELECT * FROM {db}.spans",
    "SELECT * FROM `{db}`.`spans`",
    "SELECT tenant, count() AS n FROM spans GROUP BY tenant",
    "SELECT count() AS n FROM (SELECT * FROM {db}.spans)",
    "SELECT * FROM spans WHERE span_id IN (SELECT span_id FROM {db}.spans WHERE tenant = 'globex')",
    "SELECT a.span_id, b.tenant FROM spans AS a FULL OUTER JOIN {db}.spans AS b ON a.span_id = b.span_id",
    "WITH x AS (SELECT * FROM {db}.spans) SELECT * FROM x",
    "SELECT * FROM spans UNION ALL SELECT * FROM {db}.spans",
    "SELECT (SELECT groupArray(span_id) FROM {db}.spans) AS ids",
    "SELECT * FROM spans_1m",
    "SELECT * FROM {db}.spans_1h",
    "SELECT * FROM payloads",
]


@pytest.mark.parametrize("sql", ISOLATION)
def test_a_key_for_acme_never_reads_globex_rows(deployed: Deployed, sql: str) -> None:
    status, text = _query(deployed, sql.format(db=deployed.db))
    assert status in (200, 400), text
    assert not _leaks_globex(deployed, text), text[:500]
    if status == 200 and "count()" not in sql and "GROUP BY tenant" in sql:
        assert json.loads(text) == [{"tenant": "acme", "n": SPANS_EACH}]


def test_acme_sees_its_own_rows(deployed: Deployed) -> None:
    status, text = _query(deployed, "SELECT span_id FROM spans")
    assert status == 200
    assert {row["span_id"] for row in json.loads(text)} == deployed.spans["acme"]
    status, text = _query(deployed, "SELECT span_id FROM spans", key=KEYS["globex"])
    assert {row["span_id"] for row in json.loads(text)} == deployed.spans["globex"]


def test_every_table_of_the_store_is_filtered_or_refused(deployed: Deployed) -> None:
    """Not only the listed tenant tables: every table and view in the store's database, read with acme's key."""
    listing = deployed.store.query(f"SELECT name FROM system.tables WHERE database = '{deployed.db}'")
    tables = [row["name"] for row in listing]
    assert "spans" in tables
    leaking = {}
    for table in tables:
        status, text = _query(deployed, f"SELECT * FROM {deployed.db}.`{table}` LIMIT 1000")
        if status == 200 and _leaks_globex(deployed, text):
            leaking[table] = _leaks_globex(deployed, text)
    assert not leaking, f"tables readable across tenants: {leaking}"


# Found by this suite: selecting from a materialised view read its target table unfiltered (fixed: the views are
# in ragmon.sinks.schema.TENANT_TABLES).
@pytest.mark.parametrize("table", ["otlp_spans_mv", "{db}.otlp_spans_mv", "otlp_content_mv", "otlp_norm_mv"])
def test_materialized_views_leak_other_tenants(deployed: Deployed, table: str) -> None:
    status, text = _query(deployed, f"SELECT * FROM {table.format(db=deployed.db)} LIMIT 1000")
    assert status == 400 or not _leaks_globex(deployed, text), _leaks_globex(deployed, text)


TABLE_FUNCTIONS = [
    "SELECT * FROM merge('{db}', '^spans$')",
    "SELECT * FROM merge(currentDatabase(), 'spans')",
    "SELECT * FROM remote('127.0.0.1', '{db}', 'spans')",
    "SELECT * FROM cluster('default', '{db}', 'spans')",
    "SELECT * FROM view(SELECT * FROM {db}.spans)",
    "SELECT * FROM loop({db}, spans) LIMIT 5",
    "SELECT * FROM file('/etc/passwd', 'LineAsString')",
    "SELECT * FROM url('http://127.0.0.1:9/x', 'CSV')",
    "SELECT file('/etc/hostname') AS f",
    "SELECT count() AS n FROM (SELECT * FROM merge('{db}', 'spans'))",
    "SELECT * FROM spans WHERE span_id IN (SELECT span_id FROM remote('127.0.0.1', '{db}', 'spans'))",
]


@pytest.mark.parametrize("sql", TABLE_FUNCTIONS)
def test_table_functions_are_refused(deployed: Deployed, sql: str) -> None:
    status, text = _query(deployed, sql.format(db=deployed.db))
    assert status == 400, text[:300]
    assert not _leaks_globex(deployed, text)


WRITES = [
    "INSERT INTO {db}.spans (span_id, tenant) VALUES ('x', 'globex')",
    "INSERT INTO FUNCTION file('/tmp/ragmon-sec.txt', 'CSV') SELECT 1",
    "ALTER TABLE {db}.spans DELETE WHERE tenant = 'globex'",
    "ALTER TABLE {db}.spans UPDATE name = 'x' WHERE 1",
    "DROP TABLE {db}.spans",
    "TRUNCATE TABLE {db}.spans",
    "CREATE TABLE {db}.evil (x UInt8) ENGINE = Memory",
    "CREATE VIEW {db}.v AS SELECT * FROM {db}.spans",
    "SELECT * FROM spans SETTINGS additional_table_filters = {{}}",
    "SELECT * FROM (SELECT * FROM spans SETTINGS additional_table_filters = {{}})",
    "SET additional_table_filters = {{}}",
    "SELECT 1 INTO OUTFILE '/tmp/ragmon-sec-outfile.txt'",
    "SELECT 1; DROP TABLE {db}.spans",
    "SYSTEM DROP QUERY CACHE",
    "KILL QUERY WHERE 1",
    "OPTIMIZE TABLE {db}.spans FINAL",
    "RENAME TABLE {db}.spans TO {db}.spans_old",
    "GRANT ALL ON *.* TO default",
]


@pytest.mark.parametrize("sql", WRITES)
def test_query_path_is_read_only(deployed: Deployed, sql: str) -> None:
    status, text = _query(deployed, sql.format(db=deployed.db))
    assert status == 400, text[:300]
    assert not Path("/tmp/ragmon-sec-outfile.txt").exists() and not Path("/tmp/ragmon-sec.txt").exists()
    rows = deployed.store.query("SELECT tenant, count() AS n FROM spans GROUP BY tenant ORDER BY tenant")
    assert rows == [{"tenant": "acme", "n": SPANS_EACH}, {"tenant": "globex", "n": SPANS_EACH}]


def test_report_is_tenant_scoped(deployed: Deployed) -> None:
    for key in (KEYS["acme"], KEYS["globex"]):
        status, text = _call("GET", f"{deployed.api}/api/report?since_s=315360000", headers={"x-api-key": key})
        TALLY.security_probes += 1
        assert status == 200, text
    _, text = _call("GET", f"{deployed.api}/api/report?since_s=315360000", headers={"x-api-key": KEYS["acme"]})
    assert not _leaks_globex(deployed, text)


# --- authentication --------------------------------------------------------------------------------------------------
BAD_KEYS: list[dict[str, str]] = [
    {},
    {"x-api-key": ""},
    {"x-api-key": KEYS["acme"][:-1]},
    {"x-api-key": KEYS["acme"] + "x"},
    {"x-api-key": KEYS["acme"].upper()},
    {"Authorization": "Basic " + KEYS["acme"]},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer " + KEYS["acme"][:8]},
]


@pytest.mark.parametrize("headers", BAD_KEYS, ids=[f"bad-{i}" for i in range(len(BAD_KEYS))])
def test_no_valid_key_is_401_everywhere(deployed: Deployed, headers: dict[str, str]) -> None:
    for method, url, body in (
        ("GET", f"{deployed.api}/api/report", None),
        ("POST", f"{deployed.api}/api/query", b'{"sql": "SELECT * FROM spans"}'),
        ("POST", f"http://127.0.0.1:{deployed.receiver_port}/v1/traces", good_body(1)[0]),
    ):
        status, text = _call(method, url, body, {"Content-Type": "application/x-protobuf", **headers})
        TALLY.security_probes += 1
        TALLY.security_refused += status == 401
        assert status == 401, (url, text)
        assert not _leaks_globex(deployed, text) and "acme-private-svc" not in text


def test_secrets_are_never_logged_or_echoed(deployed: Deployed, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    answers: list[str] = []
    for key in (KEYS["acme"] + "x", KEYS["globex"][:-2], "Bearer " + KEYS["acme"]):
        answers.append(_call("GET", f"{deployed.api}/api/report", headers={"x-api-key": key})[1])
        answers.append(_call("GET", f"{deployed.api}/api/report", headers={"Authorization": key})[1])
    for sql in ("SELECT nosuchcolumn FROM spans", "DROP TABLE spans", "SELECT * FROM file('x')", "not sql"):
        answers.append(_query(deployed, sql)[1])
    answers.append(_call("GET", f"{deployed.api}/api/report?since_s=abc", headers={"x-api-key": KEYS["acme"]})[1])
    answers.append(_call("POST", f"{deployed.api}/api/query", b"{not json", {"x-api-key": KEYS["acme"]})[1])
    answers.append(
        _call(
            "POST",
            f"http://127.0.0.1:{deployed.receiver_port}/v1/traces",
            b"\xff garbage",
            {"Content-Type": "application/x-protobuf", "x-api-key": KEYS["globex"]},
        )[1]
    )
    answers.append(text_of(deployed.agent.metrics))
    text = caplog.text + "\n".join(answers) + repr(deployed.agent.settings) + str(deployed.agent.settings)
    for secret in KEYS.values():
        for fragment in (secret, secret[3:], secret[-10:]):
            assert fragment not in text, f"a key fragment {fragment[:4]}… appears in logs, answers or settings"
