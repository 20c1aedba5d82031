"""Named reads (`ragmon.sinks.named_reads`): the commands' sections read by name, on the store or through the agent's
`GET /api/read/<name>`. Through a running `ragmon serve` a command prints what it prints on the store itself; a key
reads only its tenant's rows; an unknown read is a 404, a bad parameter a 400 (and the command's own error before it
asks); a named read takes its turn among the tenant's reads and is cancelled when its client goes away."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from ragmon.collectors.auth import ApiKeyAuth
from ragmon.sinks import Store, open_store
from ragmon.sinks.named_reads import READS, named_read, run_read
from ragmon.sinks.traffic import Traffic

from ragmon.agent.api import ApiServer
from ragmon.commands.common import CommandError, add_store_options, read_rows
from tests.agent import named_reads_case as case
from tests.agent.harness import REPO, AgentProcess

KEYS = {"acme": "k-acme", "globex": "k-globex"}
# Values for the reads that have no default for some parameter: the case's session (every tenant has one, "s").
REQUIRED = {
    "conversation": {"conversation": {"session": "s"}},
    "document_shift": {"release_a": "v1", "release_b": "v2"},
    "compare": {"feature": case.SHARED},
}


@pytest.fixture(scope="module")
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    opened = open_store(chdb_engine_dir, database=f"t_{uuid.uuid4().hex[:12]}")
    case.fill(opened)
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def api(store: Store) -> Iterator[str]:
    server = ApiServer(
        "127.0.0.1",
        0,
        lambda name, values, tenant: run_read(store, name, values, tenant=tenant),
        lambda *a: [],
        ApiKeyAuth(KEYS),
        cancel_query=store.cancel,
        read_scope=store.reading,
    ).start()
    yield server.url
    server.stop()


def get(
    api: str, path: str, key: str | None = KEYS["acme"], method: str = "GET", body: bytes | None = None
) -> tuple[int, Any]:
    host, port = api.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request(method, path, body=body, headers={"x-api-key": key} if key else {})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@pytest.mark.parametrize("name", list(READS))
def test_a_key_reads_only_its_tenants_rows(store: Store, api: str, name: str) -> None:
    read = named_read(name)
    defaults = read.check(REQUIRED.get(name, {}))
    everyone = run_read(store, name, defaults)
    query = urlencode(read.encode(REQUIRED.get(name, {})))
    for tenant, key in KEYS.items():
        status, answer = get(api, f"/api/read/{name}?{query}", key)
        assert (status, answer) == (200, run_read(store, name, defaults, tenant=tenant))
        assert answer != everyone  # each tenant has rows of its own in every read: the filter took some out
    if name != "production_minutes":  # a count: its answer names no one
        assert "globex" in json.dumps(everyone)
        assert "globex" not in json.dumps(get(api, f"/api/read/{name}?{query}", KEYS["acme"])[1])


def test_the_older_paths_answer_as_the_named_reads(api: str) -> None:
    assert get(api, "/api/report?since_s=3600") == get(api, "/api/read/report?since_s=3600")
    assert get(api, "/api/labels/scored") == get(api, "/api/read/labelled_scores?since_s=2592000")
    status, rows = get(api, "/api/report?since_s=3600&traffic=evaluation")
    assert (status, rows) == (200, [])  # the case's traffic is all production


def test_an_unknown_read_is_404_and_a_read_is_refused_without_a_key(api: str) -> None:
    status, answer = get(api, "/api/read/spans")
    assert status == 404 and "no such read: spans" in answer["error"] and "report" in answer["error"]
    assert get(api, "/api/read/report", key=None)[0] == 401
    assert get(api, "/api/read/report", key="k-wrong")[0] == 401
    assert get(api, "/api/read/report", method="POST")[0] == 405


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ({"since_s": "abc"}, "since_s"),
        ({"since_s": "0"}, "since_s"),
        ({"since_s": "nan"}, "since_s"),
        ({"since_s": str(11 * 366 * 86400)}, "since_s"),
        ({"traffic": "staging"}, "traffic"),
        ({"sinse_s": "3600"}, "sinse_s"),
        ({"sql": "SELECT 1"}, "sql"),
    ],
)
def test_a_bad_parameter_is_400_naming_it(api: str, query: dict[str, str], says: str) -> None:
    status, answer = get(api, f"/api/read/report?{urlencode(query)}")
    assert status == 400 and says in answer["error"]


@pytest.mark.parametrize("query", ["limit=0", "limit=-1", "limit=1e3", "limit=100001", "limit=5&limit=6"])
def test_a_bad_count_is_400(api: str, query: str) -> None:
    status, answer = get(api, f"/api/read/alerts?{query}")
    assert status == 400 and "limit" in answer["error"]


def _args(data_dir: Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_store_options(parser)
    return parser.parse_args(["--data-dir", str(data_dir)])


@pytest.mark.parametrize(
    ("name", "params", "says"),
    [
        ("alerts", {"since_s": 3600.0, "limit": 0}, "limit"),
        ("report", {"since_s": -1.0}, "since_s"),
        ("report", {"since_s": 3600.0, "traffic": "evaluation"}, "traffic"),
        ("quality", {"since_s": 3600.0, "window": 5}, "window"),
        ("spans", {}, "no such read"),
    ],
)
def test_a_command_refuses_a_bad_read_before_it_looks_for_a_store(
    tmp_path: Path, name: str, params: dict[str, Any], says: str
) -> None:
    with pytest.raises(CommandError, match=says):
        read_rows(_args(tmp_path / "no-store-here"), name, **params)


def test_the_values_a_command_sends_are_the_values_the_agent_reads() -> None:
    for name, read in READS.items():
        values = {param.name: None for param in read.params}
        required = REQUIRED.get(name, {})
        assert read.check({**values, **required}) == read.check(required), name
    sent = {"since_s": 90.0, "feature": "qa' --", "traffic": Traffic.of(eval_run="nightly&x=1")}
    assert named_read("quality").check(sent) == sent | {"release": None, "environment": None}
    released = sent | {"release": "2.3.1+build&x=1", "environment": "prod eu"}
    assert named_read("releases").check(released) == released


class HeldReads:
    """The reads' side of the API, as a class the test drives: a read waits until its tag is cancelled."""

    def __init__(self) -> None:
        self.started = threading.Semaphore(0)
        self.cancelled: list[str] = []
        self.tags: list[str] = []
        self._scope = threading.local()

    def reading(self, tag: str) -> Any:
        reads = self

        class Scope:
            def __enter__(self) -> None:
                reads._scope.tag = tag

            def __exit__(self, *exc: object) -> None:
                reads._scope.tag = None

        return Scope()

    def read(self, name: str, values: dict[str, Any], tenant: str | None) -> list[Any]:
        tag = self._scope.tag
        self.tags.append(tag)
        self.started.release()
        deadline = time.monotonic() + 30
        while tag not in self.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        return []

    def cancel(self, tag: str) -> None:
        self.cancelled.append(tag)


def test_a_named_read_takes_its_tenants_turn_and_is_cancelled_when_its_client_goes_away() -> None:
    held = HeldReads()
    server = ApiServer(
        "127.0.0.1",
        0,
        held.read,
        lambda *a: [],
        ApiKeyAuth(KEYS),
        cancel_query=held.cancel,
        read_scope=held.reading,
        max_queries_per_tenant=1,
    ).start()
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"GET /api/read/report HTTP/1.1\r\nHost: x\r\nx-api-key: k-acme\r\n\r\n")
            assert held.started.acquire(timeout=30)
            status, answer = get(server.url, "/api/read/quality", KEYS["acme"])
            assert status == 429 and "already runs 1" in answer["error"]
            status, _ = get(server.url, "/api/query", KEYS["acme"], method="POST", body=b'{"sql": "SELECT 1"}')
            assert status == 429  # queries and named reads share the tenant's turns
            sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + 30
        while held.cancelled != held.tags and time.monotonic() < deadline:
            time.sleep(0.01)
        assert held.cancelled == held.tags and len(held.tags) == 1 and held.tags[0]
    finally:
        server.stop()


# --- the commands, on the store and through a running agent ------------------------------------------------------
COMMANDS = [
    ("report", "--json", "--since", "1h"),
    ("report", "--since", "1h"),
    ("report", "--json", "--since", "1h", "--feature", "globex-qa"),
    ("alerts", "--json", "--since", "1h"),
    ("alerts", "--since", "1h"),
    ("calibrate", "--from-store", "--json", "--since", "1h"),
    ("report", "--json", "--since", "1h", "--release", "no-such-release", "--environment", "prod"),
]


def _cli(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    done = subprocess.run(
        [sys.executable, "-m", "ragmon.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_commands_print_the_same_through_a_running_agent_as_on_the_store(tmp_path: Path) -> None:
    data = tmp_path / "data"
    filled = subprocess.run(
        [sys.executable, "-m", "tests.agent.named_reads_case", str(data / "chdb")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert filled.returncode == 0, filled.stderr
    direct = [_cli(*command, "--data-dir", str(data)) for command in COMMANDS]
    # No judging in this agent: its catch-up would score the case's kept traces between the two readings.
    agent = AgentProcess(data, extra_env={"RAGMON_JUDGE__RUN_IN_AGENT": "false"}, grpc=False).start(timeout_s=300)
    try:
        through = [_cli(*command, "--data-dir", str(data)) for command in COMMANDS]
    finally:
        agent.stop()
    assert through == direct
    report = json.loads(direct[0])
    assert {row["feature"] for row in report["stages"]} == set(case.TENANTS.values())
    assert report["sampling"]["kept"] == 10 and report["quality"] and report["unavailable"] == {}
    assert {row["feature"] for row in json.loads(direct[2])["stages"]} == {"globex-qa"}
    assert {item["alert_id"] for item in json.loads(direct[3])} == {"acme-p95", "acme-old", "globex-p95"}
    versions = {v["judge_version"] for v in json.loads(direct[5])["versions"]}
    assert versions == {case.GLOBEX_JUDGE, "local:test-v1:lexical"}
    # the case's apps sent no release: one row per feature, release '', its traffic and its judged quality
    releases = report["releases"]
    assert [(row["feature"], row["release"], row["requests"]) for row in releases] == [
        ("docs-qa", "", 5),
        ("globex-qa", "", 5),
    ]
    assert all(row["quality"][0]["metric"] == "faithfulness" for row in releases)
    narrowed = json.loads(direct[6])
    assert (narrowed["stages"], narrowed["quality"], narrowed["releases"]) == ([], [], [])
    assert "not kept per release" in narrowed["unavailable"]["sampling"]
