"""Writing labels over the agent's API (real server, real store): who may write (a reviewer key of the trace's
tenant, in a header), what is refused (a read key, no key, a wrong key, another tenant's trace, a cookie, bad or
oversized input) with a clear 4xx, and that a refusal writes nothing — the audit log included."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from ragmon.collectors.auth import ApiKeyAuth
from ragmon.sinks import Store
from ragmon.sinks.named_reads import run_read

from ragmon.agent.api import ApiServer
from ragmon.dashboard import create_dashboard, create_review
from ragmon.dashboard.keys import ReadKeys, ReviewerKeys
from ragmon.dashboard.label_input import MAX_BODY_BYTES, MAX_NOTE_CHARS
from tests.labels.known_labels import JUDGE, keep, score, trace_id

READ_KEYS = {"acme": "acme-read-key", "globex": "globex-read-key"}
REVIEWERS = {"acme": {"alice": "alice-writes-acme"}, "globex": {"gina": "gina-writes-globex"}}
OURS, THEIRS = trace_id(501), trace_id(502)


class Client:
    def __init__(self, server: ApiServer) -> None:
        self.host, port = server.url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)

    def call(
        self, method: str, path: str, body: bytes | None = None, headers: Mapping[str, str] | None = None
    ) -> tuple[int, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def label(self, body: Any, key: str | None = None, **headers: str) -> tuple[int, Any]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent = {"x-api-key": key, **headers} if key else dict(headers)
        return self.call("POST", "/api/dashboard/labels", raw, sent)


def _labels(trace: str, **extra: Any) -> dict[str, Any]:
    label = {"metric": "faithfulness", "label": False, "note": "the answer adds a date", **extra}
    return {"trace_id": trace, "labels": [label]}


@pytest.fixture
def filled(store: Store) -> Store:
    keep(store, "acme", [OURS])
    keep(store, "globex", [THEIRS])
    score(store, "acme", {OURS: 0.9})
    return store


def _serve(store: Store, api_keys: dict[str, str], reviewers: dict[str, dict[str, str]]) -> ApiServer:
    keys = ReadKeys(ApiKeyAuth(api_keys), ReviewerKeys(reviewers))
    dashboard = create_dashboard(store, keys, review=create_review(store, keys.reviewers))
    return ApiServer(
        "127.0.0.1",
        0,
        lambda name, values, tenant: run_read(store, name, values, tenant=tenant),
        lambda *a: [],
        keys,
        dashboard,
    ).start()


@pytest.fixture
def client(filled: Store) -> Iterator[Client]:
    server = _serve(filled, READ_KEYS, REVIEWERS)
    yield Client(server)
    server.stop()


def _written(store: Store) -> int:
    return int(store.query("SELECT count() AS n FROM label_writes")[0]["n"]) + int(
        store.query("SELECT count() AS n FROM labels")[0]["n"]
    )


def test_a_reviewer_key_writes_and_the_label_names_its_reviewer(client: Client, filled: Store) -> None:
    status, answer = client.label(_labels(OURS, judge_versions=[JUDGE]), REVIEWERS["acme"]["alice"])
    assert (status, answer) == (200, {"written": 1, "reviewer": "alice", "trace_id": OURS})
    # Bearer works too; the reviewer's key also reads (the page needs one key), its own tenant only
    status, labels = client.call(
        "GET", f"/api/dashboard/labels?id={OURS}", headers={"Authorization": "Bearer alice-writes-acme"}
    )
    assert status == 200
    assert [(x["reviewer"], x["label"], x["note"], x["judge_versions"]) for x in labels] == [
        ("alice", False, "the answer adds a date", [JUDGE])
    ]
    assert client.call("GET", f"/api/dashboard/labels?id={OURS}", headers={"x-api-key": "gina-writes-globex"}) == (
        200,
        [],
    )
    status, scored = client.call("GET", "/api/labels/scored?since_s=3600", headers={"x-api-key": "acme-read-key"})
    assert status == 200 and [(r["trace_id"], r["label"], r["score"]) for r in scored] == [(OURS, False, 0.9)]
    assert client.call("GET", "/api/labels/scored", headers={"x-api-key": "globex-read-key"}) == (200, [])


@pytest.mark.parametrize(
    ("key", "status", "says"),
    [
        (READ_KEYS["acme"], 403, "may read but not write"),
        (None, 401, "reviewer key is required"),
        ("not-a-key", 401, "reviewer key is required"),
        (REVIEWERS["globex"]["gina"], 404, "no kept trace"),  # another tenant's reviewer: not theirs to label
    ],
)
def test_refused_writes_say_why_and_write_nothing(
    client: Client, filled: Store, key: str | None, status: int, says: str
) -> None:
    answer = client.label(_labels(OURS), key)
    assert answer[0] == status and says in answer[1]["error"]
    assert _written(filled) == 0


def test_a_tenant_cannot_label_another_tenants_trace(client: Client, filled: Store) -> None:
    status, answer = client.label(_labels(THEIRS), REVIEWERS["acme"]["alice"])
    assert status == 404 and THEIRS in answer["error"]
    assert _written(filled) == 0


def test_a_key_in_a_cookie_is_not_a_key(client: Client, filled: Store) -> None:
    status, _ = client.label(_labels(OURS), Cookie=f"x-api-key={REVIEWERS['acme']['alice']}")
    assert status == 401 and _written(filled) == 0


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{not json", "not JSON"),
        (_labels(OURS, metric="tone"), "'tone' is not a judge metric"),
        (_labels(OURS, note="x" * (MAX_NOTE_CHARS + 1)), f"note is {MAX_NOTE_CHARS + 1:,} characters"),
        (_labels(OURS, label="no"), "label must be true or false"),
        (_labels(OURS, claims=[{"claim": "a", "label": 1}]), "claims[0].label must be true or false"),
        ({"trace_id": "ABC", "labels": []}, "trace_id must be 32 lowercase hex"),
        ({"trace_id": OURS, "labels": []}, "labels must be a non-empty list"),
        ({"trace_id": OURS, "labels": [{"metric": "faithfulness", "label": True}] * 2}, "each metric at most once"),
        ({**_labels(OURS), "reviewer": "mallory"}, "unknown fields ['reviewer']"),
    ],
)
def test_bad_input_is_a_clear_400_and_writes_nothing(client: Client, filled: Store, body: Any, says: str) -> None:
    status, answer = client.label(body, REVIEWERS["acme"]["alice"])
    assert status == 400 and says in answer["error"], answer
    assert _written(filled) == 0


def test_an_oversized_body_is_413_and_a_good_label_still_lands_after_it(client: Client, filled: Store) -> None:
    huge = json.dumps(_labels(OURS, note="x" * MAX_BODY_BYTES)).encode()
    assert client.label(huge, REVIEWERS["acme"]["alice"])[0] == 413
    assert _written(filled) == 0
    # one good and one bad label in a submission: neither is written; the good one alone is
    mixed = {"trace_id": OURS, "labels": [{"metric": "faithfulness", "label": True}, {"metric": "x", "label": True}]}
    assert client.label(mixed, REVIEWERS["acme"]["alice"])[0] == 400 and _written(filled) == 0
    assert client.label(_labels(OURS), REVIEWERS["acme"]["alice"])[0] == 200
    assert _written(filled) == 2  # the audit row and the label


def test_with_no_reviewer_keys_labelling_is_off_and_reads_are_as_before(filled: Store) -> None:
    server = _serve(filled, READ_KEYS, {})
    try:
        client = Client(server)
        status, answer = client.label(_labels(OURS), READ_KEYS["acme"])
        assert status == 403 and "agent.reviewer_keys" in answer["error"]
        assert client.call("GET", "/api/dashboard/whoami", headers={"x-api-key": READ_KEYS["acme"]}) == (
            200,
            {
                "tenant": "acme",
                "reviewer": None,
                "can_label": False,
                "labelling_configured": False,
                "metrics": sorted(
                    ["answer_relevance", "context_precision", "context_recall", "context_relevance", "faithfulness"]
                ),
            },
        )
        assert client.call("GET", "/api/dashboard/whoami")[0] == 401  # reads still need a key
    finally:
        server.stop()
    assert _written(filled) == 0


def test_a_refused_write_leaves_the_connection_usable(client: Client) -> None:
    """A browser keeps the connection alive: the refused body must have been read, not parsed as the next request."""
    conn = http.client.HTTPConnection(client.host, client.port, timeout=30)
    try:
        body = json.dumps(_labels(OURS)).encode()
        conn.request("POST", "/api/dashboard/labels", body=body, headers={"x-api-key": READ_KEYS["acme"]})
        refused = conn.getresponse()
        assert refused.status == 403
        refused.read()
        conn.request("GET", "/api/dashboard/whoami", headers={"x-api-key": READ_KEYS["acme"]})
        answer = conn.getresponse()
        assert answer.status == 200 and json.loads(answer.read())["tenant"] == "acme"
    finally:
        conn.close()


@pytest.mark.parametrize("since", ["nan", "inf", "0", "-5", "1e12", "a%20week"])
def test_labelled_scores_refuse_a_window_that_is_not_one(client: Client, since: str) -> None:
    status, answer = client.call("GET", f"/api/labels/scored?since_s={since}", headers={"x-api-key": "acme-read-key"})
    assert status == 400 and "since_s" in answer["error"]
