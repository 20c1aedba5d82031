"""The dashboard's Traffic selector over HTTP: production by default, an eval run or every one when asked; the
runs in the window are listed for the selector; a traffic it does not know is a clear 400."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from ragmon.collectors.auth import ApiKeyAuth
from ragmon.sinks import Store

from ragmon.agent.api import ApiServer
from ragmon.dashboard import create_dashboard
from tests.dashboard.known_rows import Trace, insert_traces, payload, request, score

NOW_S = int(time.time())


def _eval(trace: Trace, run: str) -> Trace:
    trace.eval_run = run
    return trace


PRODUCTION = [request(n, NOW_S - 600 + n) for n in range(1, 3)]
NIGHTLY = [_eval(request(n, NOW_S - 500 + n, scale=3.0), "nightly") for n in range(10, 13)]
WEEKLY = [_eval(request(20, NOW_S - 100), "weekly")]  # minutes after the nightly run


@pytest.fixture
def client(store: Store) -> Iterator[Any]:
    traces = PRODUCTION + NIGHTLY + WEEKLY
    insert_traces(store, traces)
    store.insert_payloads([payload(t, probability=1.0, reasons=["baseline"], eval_run=t.eval_run) for t in traces])
    store.insert_scores([score(t, "faithfulness", 1.0 if not t.eval_run else 0.0, at_s=NOW_S - 60) for t in traces])
    auth = ApiKeyAuth()
    server = ApiServer("127.0.0.1", 0, lambda *a: [], lambda *a: [], auth, create_dashboard(store, auth)).start()
    host, port = server.url.removeprefix("http://").rsplit(":", 1)

    def get(path: str) -> tuple[int, Any]:
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    yield get
    server.stop()


def _ok(client: Any, path: str) -> Any:
    status, body = client(path)
    assert status == 200, body
    return body


@pytest.mark.parametrize(
    ("query", "expected"),
    [("", PRODUCTION), ("&traffic=production", PRODUCTION), ("&traffic=evaluation", NIGHTLY + WEEKLY),
     ("&eval_run=nightly", NIGHTLY), ("&eval_run=weekly", WEEKLY), ("&eval_run=no-such-run", [])],
)  # fmt: skip
def test_every_view_reads_the_chosen_traffic(client: Any, query: str, expected: list[Trace]) -> None:
    window = "?since_s=3600" + query
    overview = _ok(client, "/api/dashboard/overview" + window)
    assert overview["totals"]["requests"] == len(expected)
    assert overview["sampling"]["decided"] == 0  # no sampler ran: nothing counted, in any traffic
    latency = _ok(client, "/api/dashboard/latency" + window)
    assert sum(sum(s["spans"]) for s in latency["series"] if s["stage"] == "request") == len(expected)
    traces = _ok(client, "/api/dashboard/traces" + window)
    assert sorted(t["trace_id"] for t in traces) == sorted(t.trace_id for t in expected)
    assert {t["eval_run"] for t in traces} == {t.eval_run for t in expected}
    quality = _ok(client, "/api/dashboard/quality" + window)
    judged = [n for s in quality["series"] for n in s["n"]]
    assert sum(judged) == len(expected)
    means = {v for s in quality["series"] for v in s["plain"] if v is not None}
    assert means == ({0.0} if expected and expected[0].eval_run else {1.0} if expected else set())


def test_the_selector_lists_the_windows_eval_runs_latest_first(client: Any) -> None:
    runs = _ok(client, "/api/dashboard/eval_runs?since_s=3600")
    assert [(r["eval_run"], r["spans"]) for r in runs] == [("weekly", 4), ("nightly", 12)]


def test_an_unknown_traffic_is_a_clear_error(client: Any) -> None:
    status, body = client("/api/dashboard/overview?traffic=staging")
    assert status == 400 and "traffic must be production or evaluation" in body["error"]


def test_an_opened_trace_says_which_eval_run_it_belongs_to(client: Any) -> None:
    assert _ok(client, f"/api/dashboard/trace?id={NIGHTLY[0].trace_id}")["eval_run"] == "nightly"
    assert _ok(client, f"/api/dashboard/trace?id={PRODUCTION[0].trace_id}")["eval_run"] == ""
