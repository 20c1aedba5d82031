"""The dashboard over HTTP on the agent's API server: keys and tenants, security headers, static files, bad input."""

from __future__ import annotations

import gzip
import http.client
import json
import re
import time
from collections.abc import Iterator, Mapping
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from ragmon.collectors.auth import ApiKeyAuth
from ragmon.judges.metrics import METRICS, REGISTRY
from ragmon.sinks import Store
from ragmon.sinks.errors import StoreError

from ragmon.agent.api import ApiServer
from ragmon.attributes import STAGES
from ragmon.dashboard import Dashboard, DashboardQueries, create_dashboard, meta
from ragmon.dashboard.assets import STATIC_DIR, plotly_js_file
from tests.dashboard.known_rows import insert_traces, payload, request

NOW_S = int(time.time())
KEYS = {"acme": "key-for-acme", "globex": "key-for-globex"}


class Client:
    def __init__(self, server: ApiServer) -> None:
        self.host, self.port = server.url.removeprefix("http://").rsplit(":", 1)

    def get(self, path: str, headers: Mapping[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(self.host, int(self.port), timeout=30)
        try:
            conn.request("GET", path, headers=dict(headers or {}))
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()

    def json(self, path: str, key: str | None = None) -> tuple[int, Any]:
        status, _, body = self.get(path, {"x-api-key": key} if key else None)
        return status, json.loads(body)


def _serve(dashboard: Dashboard, auth: ApiKeyAuth) -> ApiServer:
    return ApiServer("127.0.0.1", 0, lambda *a: [], lambda *a: [], auth, dashboard).start()


@pytest.fixture
def filled(store: Store) -> Store:
    ours, theirs = request(1, NOW_S - 300, tenant="acme"), request(2, NOW_S - 200, tenant="globex")
    insert_traces(store, [ours, theirs])
    store.insert_payloads(
        [payload(ours, probability=1.0, reasons=["slow"]), payload(theirs, probability=1.0, reasons=["error"])]
    )
    return store


@pytest.fixture
def keyed(filled: Store) -> Iterator[Client]:
    auth = ApiKeyAuth(KEYS)
    server = _serve(create_dashboard(filled, auth), auth)
    yield Client(server)
    server.stop()


@pytest.fixture
def open_agent(filled: Store) -> Iterator[Client]:
    auth = ApiKeyAuth()
    server = _serve(create_dashboard(filled, auth), auth)
    yield Client(server)
    server.stop()


def test_data_needs_a_key_and_a_key_reads_only_its_tenant(keyed: Client) -> None:
    assert keyed.json("/api/dashboard/traces")[0] == 401
    assert keyed.json("/api/dashboard/traces", key="not-a-key")[0] == 401
    status, acme = keyed.json("/api/dashboard/traces", key=KEYS["acme"])
    assert status == 200 and [t["trace_id"] for t in acme] == [f"{1:032x}"]
    status, _, body = keyed.get("/api/dashboard/traces", {"Authorization": f"Bearer {KEYS['globex']}"})
    assert status == 200 and [t["trace_id"] for t in json.loads(body)] == [f"{2:032x}"]
    # another tenant's trace, asked for by id, is not there
    status, answer = keyed.json(f"/api/dashboard/trace?id={2:032x}", key=KEYS["acme"])
    assert status == 404 and "no trace" in answer["error"]
    assert keyed.json(f"/api/dashboard/trace?id={2:032x}", key=KEYS["globex"])[0] == 200
    status, overview = keyed.json("/api/dashboard/overview", key=KEYS["acme"])
    assert status == 200 and overview["totals"]["requests"] == 1


def test_without_keys_every_tenant_is_read(open_agent: Client) -> None:
    status, traces = open_agent.json("/api/dashboard/traces")
    assert status == 200 and len(traces) == 2


def test_every_endpoint_answers(keyed: Client) -> None:
    for name in ("overview", "latency", "quality", "alerts", "traces"):
        status, _ = keyed.json(f"/api/dashboard/{name}?since_s=86400", key=KEYS["acme"])
        assert status == 200, name


def test_meta_tells_the_page_the_sdks_stages_and_the_judges_metrics(keyed: Client) -> None:
    assert keyed.json("/api/dashboard/meta")[0] == 401
    status, answer = keyed.json("/api/dashboard/meta", key=KEYS["acme"])
    assert status == 200
    stages = [s["name"] for s in answer["stages"]]
    assert stages == ["request", "embed", "search", "rerank", "tool", "generate", "other"]  # as the page listed them
    assert sorted(stages) == sorted(STAGES) == sorted(meta.STAGE_COLORS)  # every SDK stage, each with a colour
    colours = [s["color"] for s in answer["stages"]]
    assert len(set(colours)) == len(colours)
    assert [m["name"] for m in answer["metrics"]] == [m.name for m in REGISTRY]
    labels = {m["name"]: m["review_labels"] for m in answer["metrics"]}
    assert labels == {m.name: list(m.review_labels) if m.review_labels else None for m in REGISTRY}
    assert labels["faithfulness"] == ["faithful", "not faithful"] and labels["context_recall"] is None
    needs = {m["name"]: m["needs"] for m in answer["metrics"]}
    assert needs["context_recall"] == ["passages", "reference"]


def test_a_stage_the_sdk_gains_is_listed_before_the_unclassified_one() -> None:
    listed = sorted([*STAGES, "plan"], key=meta._stage_rank)
    assert listed[-2:] == ["plan", "other"] and listed[0] == "request"


@pytest.mark.parametrize("name", ["app.js", "review.js", "index.html"])
def test_the_page_names_no_metric_and_lists_no_stages(name: str) -> None:
    """Stages and metrics reach the page through /api/dashboard/meta: a copy kept in the page goes stale unseen."""
    page = (STATIC_DIR / name).read_text()
    assert [metric for metric in METRICS if metric in page] == []
    for line in page.splitlines():
        assert len({s for s in STAGES if re.search(rf"\b{s}\b", line)}) < 2, line


class _PageAudit(HTMLParser):
    """Collects what a strict CSP would refuse: inline scripts, style attributes, inline event handlers."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.inline_script_text = ""
        self.offending_attributes: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {name for name, _ in attrs}
        self.offending_attributes += [n for n in names if n == "style" or n.startswith("on")]
        if tag == "script":
            self.scripts.append(dict(attrs))
            self._in_script = True
        if tag == "style":
            self.offending_attributes.append("<style>")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = tag != "script" and self._in_script

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.inline_script_text += data.strip()


def test_page_is_public_and_carries_strict_security_headers(keyed: Client) -> None:
    status, headers, body = keyed.get("/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    policy = dict(part.strip().split(" ", 1) for part in headers["content-security-policy"].split(";"))
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == "'self'"  # no inline script, no eval
    assert "'unsafe-inline'" not in headers["content-security-policy"]
    assert "'unsafe-eval'" not in headers["content-security-policy"]
    assert policy["frame-ancestors"] == "'none'" and policy["base-uri"] == "'none'"
    assert headers["x-frame-options"] == "DENY"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    audit = _PageAudit()
    audit.feed(body.decode())
    assert [s.get("src") for s in audit.scripts] == [
        "/static/vendor/plotly.min.js",
        "/static/app.js",
        "/static/review.js",
        "/static/conversation.js",
        "/static/releases.js",
        "/static/compare.js",
        "/static/feedback.js",
        "/static/documents.js",
        "/static/questions.js",
    ]
    assert audit.inline_script_text == "" and audit.offending_attributes == []


def test_data_is_never_cached_and_has_the_same_headers(keyed: Client) -> None:
    for path in ("/api/dashboard/traces", "/api/dashboard/nope"):
        _, headers, _ = keyed.get(path, {"x-api-key": KEYS["acme"]})
        assert headers["cache-control"] == "no-store"
        assert headers["content-type"] == "application/json"
        assert headers["x-frame-options"] == "DENY" and "content-security-policy" in headers


@pytest.mark.parametrize(
    "name",
    [
        "app.js",
        "review.js",
        "conversation.js",
        "releases.js",
        "compare.js",
        "feedback.js",
        "documents.js",
        "questions.js",
    ],
)
def test_the_scripts_never_turn_data_into_html(name: str) -> None:
    """The page's scripts build the DOM with textContent; none of the HTML-parsing sinks appear in them."""
    lines = (STATIC_DIR / name).read_text().splitlines()
    script = "\n".join(line for line in lines if not line.strip().startswith("//"))  # code, not comments
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "srcdoc"):
        assert sink not in script, sink
    # text goes in as text: directly, or through app.js's `el`, which sets textContent
    assert "textContent" in script or "el(" in script


def test_static_files_revalidate_compress_and_never_leave_the_folder(keyed: Client) -> None:
    status, headers, body = keyed.get("/static/app.js")
    assert status == 200 and headers["content-type"].startswith("text/javascript")
    assert body == (STATIC_DIR / "app.js").read_bytes()
    assert keyed.get("/static/app.js", {"If-None-Match": headers["etag"]})[0] == 304
    status, zipped_headers, zipped = keyed.get("/static/style.css", {"Accept-Encoding": "gzip"})
    assert (
        zipped_headers["content-encoding"] == "gzip"
        and gzip.decompress(zipped) == (STATIC_DIR / "style.css").read_bytes()
    )
    for path in ("/static/../queries.py", "/static/%2e%2e/routes.py", "/static/vendor/../../assets.py", "/static/"):
        assert keyed.get(path)[0] == 404, path


@pytest.mark.skipif(plotly_js_file() is None, reason="plotly (the agent extra) is not installed")
def test_plotly_is_served_from_the_installed_package(keyed: Client) -> None:
    status, headers, body = keyed.get("/static/vendor/plotly.min.js")
    plotly_js = plotly_js_file()
    assert plotly_js is not None
    assert status == 200 and headers["content-type"].startswith("text/javascript")
    assert body == plotly_js.read_bytes()


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/api/dashboard/traces?since_s=abc", 400, "since_s must be a number"),
        ("/api/dashboard/traces?since_s=1", 400, "since_s must be between"),
        ("/api/dashboard/latency?since_s=nan", 400, "since_s must be between"),
        ("/api/dashboard/traces?limit=0", 400, "limit must be"),
        ("/api/dashboard/traces?limit=many", 400, "limit must be"),
        ("/api/dashboard/trace?id=1%27%20OR%201=1", 400, "32 lowercase hex"),
        ("/api/dashboard/trace", 400, "32 lowercase hex"),
        (f"/api/dashboard/trace?id={9:032x}", 404, "no trace"),
        ("/api/dashboard/drop-tables", 404, "no such dashboard endpoint"),
    ],
)
def test_bad_requests_get_clear_errors_and_the_server_keeps_running(
    keyed: Client, path: str, status: int, message: str
) -> None:
    got, answer = keyed.json(path, key=KEYS["acme"])
    assert got == status and message in answer["error"]
    assert keyed.get("/health")[0] == 200


def test_without_keys_only_this_machines_names_are_answered(open_agent: Client) -> None:
    """No keys: a page on another site must not read the data through a DNS name rebound to 127.0.0.1."""
    for host in ("evil.example", f"evil.example:{open_agent.port}", "10.0.0.5"):
        status, _, body = open_agent.get("/api/dashboard/traces", {"Host": host})
        assert status == 421, host
        assert b"trace_id" not in body
    for host in (f"127.0.0.1:{open_agent.port}", f"localhost:{open_agent.port}", "[::1]"):
        assert open_agent.get("/api/dashboard/traces", {"Host": host})[0] == 200, host


def test_with_keys_the_host_is_not_checked(keyed: Client) -> None:
    status, _, _ = keyed.get("/api/dashboard/traces", {"Host": "ragmon.internal:4320", "x-api-key": KEYS["acme"]})
    assert status == 200


class FailingStore:
    """A store whose reads fail as a store outage does (retryable) or as a broken one does (not retryable)."""

    def __init__(self, retryable: bool) -> None:
        self.retryable = retryable

    def report(self, since_s: float, **kwargs: Any) -> list[dict[str, Any]]:
        raise StoreError("store unavailable", retryable=self.retryable)

    def query(self, sql: str, params: Any = None, **kwargs: Any) -> list[dict[str, Any]]:
        raise StoreError("store unavailable", retryable=self.retryable)


@pytest.mark.parametrize(("retryable", "status"), [(True, 503), (False, 500)])
def test_a_failing_store_is_reported_not_fatal(retryable: bool, status: int) -> None:
    auth = ApiKeyAuth()
    server = _serve(Dashboard(DashboardQueries(FailingStore(retryable)), auth), auth)
    try:
        client = Client(server)
        got, answer = client.json("/api/dashboard/overview")
        assert got == status and "store unavailable" in answer["error"]
        assert client.get("/")[0] == 200 and client.get("/health")[0] == 200
    finally:
        server.stop()


def test_static_dir_holds_the_page_files() -> None:
    assert {p.name for p in Path(STATIC_DIR).iterdir()} >= {"index.html", "app.js", "style.css", "favicon.svg"}
