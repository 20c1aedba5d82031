"""POST /v1/feedback on a real agent, driven by a plain HTTP client: what each outcome stores (duplicate, changed,
before its trace, unknown trace, by request id), every refusal and its JSON answer, what a feedback key cannot do,
CORS, and a flood and oversized bodies leaving the agent ready."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from ragmon.agent.agent import Agent
from tests.feedback.conftest import (
    ALLOWED_ORIGIN,
    API_KEYS,
    BURST,
    FEEDBACK_KEY,
    FLOOD_KEY,
    GLOBEX_FEEDBACK_KEY,
    MAX_BODY_BYTES,
    MAX_ITEMS,
    api_url,
    by_feature,
    new_trace_id,
    poll,
    post_feedback,
    receiver_url,
    send_trace,
)


def summary(agent: Agent, feature: str, tenant: str = "acme") -> dict[str, Any]:
    rows = agent.store.feedback_summary(3600, tenant=tenant)
    return by_feature(rows).get(feature, {})


def test_each_outcome_counts_as_designed(agent: Agent) -> None:
    before, changed, duplicate, anonymous = new_trace_id(), new_trace_id(), new_trace_id(), new_trace_id()
    unknown = new_trace_id()
    # Before its trace: stored, unmatched until the trace arrives, then matched by the next read.
    assert post_feedback(agent, {"trace_id": before, "thumbs": "down", "user": "u1"}).status_code == 200
    stored = agent.store.feedback_summary(3600, tenant="acme")
    assert by_feature(stored)[""]["unmatched"] >= 1
    # A user switching thumbs down to up: the later value replaces theirs.
    assert (
        post_feedback(agent, {"trace_id": changed, "thumbs": "down", "user": "u2", "at": _now() - 5}).status_code == 200
    )
    assert post_feedback(agent, {"trace_id": changed, "thumbs": "up", "user": "u2", "at": _now()}).status_code == 200
    # The same feedback sent twice (a client's retry, same id and time, as the SDK sends): once.
    item = {"trace_id": duplicate, "rating": 2, "id": "retry-1", "at": _now()}
    assert post_feedback(agent, item).status_code == 200
    assert post_feedback(agent, item).status_code == 200
    # Two anonymous verdicts with their own ids: two.
    assert (
        post_feedback(
            agent,
            [{"trace_id": anonymous, "thumbs": "up", "id": "a"}, {"trace_id": anonymous, "thumbs": "up", "id": "b"}],
        ).status_code
        == 200
    )
    # By the app's own request id, resolved through the request span that carries it.
    assert post_feedback(agent, {"request_id": "order-77", "rating": 5, "user": "u3"}).status_code == 200
    # A trace that never arrives: kept, unmatched.
    assert post_feedback(agent, {"trace_id": unknown, "thumbs": "down", "user": "u4"}).status_code == 200

    send_trace(agent, before, feature="outcome-before")
    send_trace(agent, changed, feature="outcome-changed")
    send_trace(agent, duplicate, feature="outcome-duplicate")
    send_trace(agent, anonymous, feature="outcome-anonymous")
    send_trace(agent, new_trace_id(), feature="outcome-request", request_id="order-77")
    features = ("outcome-before", "outcome-changed", "outcome-duplicate", "outcome-anonymous", "outcome-request")
    rows = poll(
        lambda: by_feature(agent.store.feedback_summary(3600, tenant="acme")),
        lambda got: all(f in got for f in features),
    )
    assert (rows["outcome-before"]["thumbs_down"], rows["outcome-before"]["matched"]) == (1, 1)
    assert (rows["outcome-changed"]["thumbs_up"], rows["outcome-changed"]["thumbs_down"]) == (1, 0)
    assert (rows["outcome-duplicate"]["ratings"], rows["outcome-duplicate"]["negative"]) == (1, 1)
    assert rows["outcome-anonymous"]["thumbs_up"] == 2
    assert (rows["outcome-request"]["ratings"], rows["outcome-request"]["mean_rating"]) == (1, 5.0)
    assert rows[""]["unmatched"] >= 1  # the unknown trace's
    # The audit keeps every write: both of u2's values, the retried duplicate once (the engine dropped the re-send).
    audit = agent.store.query(
        "SELECT trace_id, count() AS n FROM feedback_writes"
        " WHERE trace_id IN ({a:String}, {b:String}) GROUP BY trace_id",
        {"a": changed, "b": duplicate},
    )
    assert {row["trace_id"]: row["n"] for row in audit} == {changed: 2, duplicate: 1}


def test_figures_per_feature_and_release(agent: Agent) -> None:
    old, new = new_trace_id(), new_trace_id()
    send_trace(agent, old, feature="by-release", release="1.0")
    send_trace(agent, new, feature="by-release", release="2.0")
    assert (
        post_feedback(
            agent, [{"trace_id": old, "thumbs": "up", "user": "r1"}, {"trace_id": new, "rating": 1, "user": "r1"}]
        ).status_code
        == 200
    )

    def rows() -> dict[str, dict[str, Any]]:
        read = agent.store.feedback_summary(3600, feature="by-release", tenant="acme")
        return {row["release"]: row for row in read}

    got = poll(rows, lambda got: set(got) == {"1.0", "2.0"})
    assert (got["1.0"]["thumbs_up"], got["1.0"]["negative_share"]) == (1, 0.0)
    assert (got["2.0"]["ratings"], got["2.0"]["negative_share"]) == (1, 1.0)


def _now() -> float:
    import time

    return time.time()


def test_a_feedback_key_writes_its_tenants_feedback_and_nothing_else(agent: Agent) -> None:
    trace = new_trace_id()
    response = post_feedback(agent, {"trace_id": trace, "thumbs": "up", "user": "k1"}, key=FEEDBACK_KEY)
    assert response.status_code == 200 and response.json() == {"accepted": 1}
    globex = post_feedback(agent, {"trace_id": trace, "thumbs": "down", "user": "k1"}, key=GLOBEX_FEEDBACK_KEY)
    assert globex.status_code == 200
    rows = agent.store.query(
        "SELECT tenant, source, value FROM feedback FINAL WHERE trace_id = {t:String} ORDER BY tenant", {"t": trace}
    )
    assert rows == [
        {"tenant": "acme", "source": "feedback_key", "value": 1.0},
        {"tenant": "globex", "source": "feedback_key", "value": 0.0},
    ]
    bearer = {"Authorization": f"Bearer {FEEDBACK_KEY}"}
    # No spans ...
    spans = httpx.post(f"{receiver_url(agent)}/v1/traces", json={"resourceSpans": []}, headers=bearer, timeout=30)
    assert spans.status_code == 401
    # ... and no reads, on any route of the API port.
    for method, path in (("GET", "/api/read/report"), ("GET", "/api/read/feedback"), ("POST", "/api/query")):
        read = httpx.request(method, f"{api_url(agent)}{path}", headers=bearer, json={"sql": "SELECT 1"}, timeout=30)
        assert read.status_code == 401, (path, read.status_code)
    # The tenant's API key reads the same route.
    ok = httpx.get(f"{api_url(agent)}/api/read/feedback", headers={"Authorization": f"Bearer {API_KEYS['acme']}"})
    assert ok.status_code == 200 and isinstance(ok.json(), list)


def _too_long(field: str) -> dict[str, Any]:
    return {"trace_id": new_trace_id(), "thumbs": "up", field: "x" * 3000}


REFUSALS = [
    # (what, body, key, extra headers, status, code)
    ("malformed JSON", b'{"trace_id": ', API_KEYS["acme"], {}, 400, "malformed_json"),
    ("unknown field", {"trace_id": "a" * 32, "thumbs": "up", "stars": 3}, API_KEYS["acme"], {}, 400, "unknown_field"),
    ("no value", {"trace_id": "a" * 32}, API_KEYS["acme"], {}, 400, "no_value"),
    ("two values", {"trace_id": "a" * 32, "thumbs": "up", "rating": 4}, API_KEYS["acme"], {}, 400, "no_value"),
    ("bad thumbs", {"trace_id": "a" * 32, "thumbs": "sideways"}, API_KEYS["acme"], {}, 422, "bad_value"),
    ("rating out of range", {"trace_id": "a" * 32, "rating": 6}, API_KEYS["acme"], {}, 422, "bad_value"),
    ("score without name", {"trace_id": "a" * 32, "score": 1}, API_KEYS["acme"], {}, 400, "missing_field"),
    (
        "score not finite",
        b'{"trace_id": "' + b"a" * 32 + b'", "name": "x", "score": NaN}',
        API_KEYS["acme"],
        {},
        422,
        "bad_value",
    ),
    ("bad trace id", {"trace_id": "xyz", "thumbs": "up"}, API_KEYS["acme"], {}, 400, "bad_trace_id"),
    ("two targets", {"trace_id": "a" * 32, "request_id": "r", "thumbs": "up"}, API_KEYS["acme"], {}, 400, "no_target"),
    ("not an object", [1], API_KEYS["acme"], {}, 400, "not_an_object"),
    ("empty batch", [], API_KEYS["acme"], {}, 400, "empty"),
    (
        "too many items",
        [{"trace_id": "a" * 32, "thumbs": "up"}] * (MAX_ITEMS + 1),
        API_KEYS["acme"],
        {},
        413,
        "too_many_items",
    ),
    ("comment too long", _too_long("comment"), API_KEYS["acme"], {}, 413, "field_too_long"),
    ("oversized body", b"[" + b" " * MAX_BODY_BYTES + b"]", API_KEYS["acme"], {}, 413, "body_too_large"),
    ("at far in the past", {"trace_id": "a" * 32, "thumbs": "up", "at": 1}, API_KEYS["acme"], {}, 422, "bad_value"),
    ("no key", {"trace_id": "a" * 32, "thumbs": "up"}, None, {}, 401, "unauthenticated"),
    ("wrong key", {"trace_id": "a" * 32, "thumbs": "up"}, "nope", {}, 401, "unauthenticated"),
    (
        "wrong content type",
        {"trace_id": "a" * 32, "thumbs": "up"},
        API_KEYS["acme"],
        {"Content-Type": "text/plain"},
        415,
        "unsupported_media_type",
    ),
    (
        "origin not allowed",
        {"trace_id": "a" * 32, "thumbs": "up"},
        FEEDBACK_KEY,
        {"Origin": "http://evil.example"},
        403,
        "origin_not_allowed",
    ),
]


@pytest.mark.parametrize(("what", "body", "key", "headers", "status", "code"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_every_refusal_is_a_clear_json_4xx_and_stores_nothing(
    agent: Agent, what: str, body: Any, key: str | None, headers: dict[str, str], status: int, code: str
) -> None:
    before = _stored(agent)
    response = post_feedback(agent, body, key=key, **headers)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    assert answer["error"] == code and answer["message"]
    assert "access-control-allow-origin" not in response.headers  # no listed origin asked
    assert _stored(agent) == before


def _stored(agent: Agent) -> int:
    return int(agent.store.query("SELECT count() AS n FROM feedback_writes")[0]["n"])


def test_a_wrong_method_is_405(agent: Agent) -> None:
    response = httpx.get(f"{receiver_url(agent)}/v1/feedback", timeout=30)
    assert response.status_code == 405 and response.json()["error"] == "method_not_allowed"


def test_cors_answers_only_listed_origins_and_never_a_wildcard(agent: Agent) -> None:
    url = f"{receiver_url(agent)}/v1/feedback"
    asked = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
    allowed = httpx.options(url, headers={"Origin": ALLOWED_ORIGIN, **asked}, timeout=30)
    assert allowed.status_code == 204
    assert allowed.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert "authorization" in allowed.headers["access-control-allow-headers"]
    assert allowed.headers["vary"] == "Origin"
    assert "access-control-allow-credentials" not in allowed.headers
    refused = httpx.options(url, headers={"Origin": "http://evil.example", **asked}, timeout=30)
    assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers
    # A refusal to a listed origin carries the header, so the page can read why.
    bad = post_feedback(agent, {"trace_id": "a" * 32}, key=FEEDBACK_KEY, Origin=ALLOWED_ORIGIN)
    assert bad.status_code == 400 and bad.headers["access-control-allow-origin"] == ALLOWED_ORIGIN


def test_a_flood_is_rate_limited_per_key_and_leaves_the_agent_ready(agent: Agent) -> None:
    trace = new_trace_id()
    statuses: list[int] = []
    retry_after: set[str] = set()
    with httpx.Client(timeout=30) as client:
        for n in range(BURST * 3):
            response = client.post(
                f"{receiver_url(agent)}/v1/feedback",
                content=json.dumps({"trace_id": trace, "thumbs": "up", "id": f"flood-{n}"}),
                headers={"Authorization": f"Bearer {FLOOD_KEY}", "Content-Type": "application/json"},
            )
            statuses.append(response.status_code)
            if response.status_code == 429:
                retry_after.add(response.headers["retry-after"])
                assert response.json()["error"] in ("rate_limited", "busy")
        # oversized bodies, declared and chunked
        big = client.post(
            f"{receiver_url(agent)}/v1/feedback",
            content=b"x" * (MAX_BODY_BYTES * 8),
            headers={"Authorization": f"Bearer {API_KEYS['acme']}", "Content-Type": "application/json"},
        )
        assert big.status_code == 413

        def chunks() -> Any:
            for _ in range(64):
                yield b"y" * 4096

        chunked = client.post(
            f"{receiver_url(agent)}/v1/feedback",
            content=chunks(),
            headers={"Authorization": f"Bearer {API_KEYS['acme']}", "Content-Type": "application/json"},
        )
        assert chunked.status_code == 413
    assert set(statuses) <= {200, 429} and statuses.count(429) > 0 and retry_after
    accepted = statuses.count(200)
    stored = agent.store.query("SELECT count() AS n FROM feedback FINAL WHERE trace_id = {t:String}", {"t": trace})[0][
        "n"
    ]
    assert stored == accepted  # every acknowledged item is stored, every refused one is not
    # Another key of the same tenant was not slowed by the flood's bucket.
    assert (
        post_feedback(agent, {"trace_id": trace, "thumbs": "up", "user": "calm"}, key=FEEDBACK_KEY).status_code == 200
    )
    ready = httpx.get(f"{api_url(agent)}/health/ready", timeout=30)
    assert ready.status_code == 200
    counted = agent.counters.get("ragmon_feedback_requests_total", outcome="rate_limited")
    assert counted >= statuses.count(429) - agent.counters.get("ragmon_feedback_requests_total", outcome="busy")
