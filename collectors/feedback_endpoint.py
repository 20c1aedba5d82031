"""`POST /v1/feedback` on the receiver port: end users' feedback from the app's backend (the SDK, with the tenant's
API key) or straight from a browser or mobile client (with a write-only feedback key, `feedback_keys.py`).

Order of checks, all on the request's head before a body byte is read: CORS (an `Origin` not in `origins` is 403;
`OPTIONS` is the preflight: 204 for a listed origin) → method (405) → key (401: the tenant's API key or one of its
feedback keys; a feedback key writes nothing else, and this is the only route that takes one) → the key's rate limit
(429 + Retry-After) → framing (411) → content type (415: `application/json`) → then the server's: body size (413),
memory guard (429), in-flight bytes (503). The body is then parsed in the server's pool (`feedback_items.py`: 400
malformed JSON or unknown field, 413 too many items or a field too long, 422 a bad value) and its rows handed to the
group commit (`feedback_commit.py`); every refusal is JSON, `{"error": code, "message": text}`. CORS answers echo a
listed origin (never `*`) with `Vary: Origin`; credentials are not allowed — the key travels in a header the page
sets, not in a cookie.

Acknowledged means stored: the handler answers 200 only after the store took the rows. Concurrent requests share
one INSERT (the committer's writer takes every request waiting), and a request waits for it on the server's loop,
not in a pool thread, so feedback never holds the threads spans are decoded on. The answers past parsing: 429
`busy` + Retry-After when too much feedback already waits (rows, bytes or requests: the committer's caps), 503
`store_unavailable` + Retry-After when the store refused the batch, the wait passed its deadline or the agent is
stopping — nothing acknowledged is lost, and the sender's retry is counted once. Why not the spans' write-ahead
log: feedback is a few rows per user action, not a stream; waiting for the store costs less than a log, a writer
and a cursor, and group commit makes it cheap enough (docs/feedback.md).
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import math
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final, Protocol

from ragmon.collectors.auth import ApiKeyAuth
from ragmon.collectors.counters import CollectorCounters
from ragmon.collectors.feedback_commit import FeedbackCommitter, Outcome
from ragmon.collectors.feedback_items import FeedbackRefused, parse_feedback
from ragmon.collectors.feedback_keys import FeedbackKeys
from ragmon.collectors.http_server import Handle, Reply, RequestHead
from ragmon.collectors.rate_limit import RateLimiter

__all__ = ["FEEDBACK_PATH", "FeedbackEndpoint", "FeedbackWriter"]

_log = logging.getLogger(__name__)

FEEDBACK_PATH: Final = "/v1/feedback"
_JSON: Final = "application/json"
_ALLOWED_HEADERS: Final = "authorization, content-type, x-api-key"
_PREFLIGHT_MAX_AGE_S: Final = "600"


class FeedbackWriter(Protocol):
    """Stores rows before returning (one INSERT); raises `Backpressure`/`ConsumerUnavailable` when it cannot."""

    def __call__(self, rows: list[dict[str, Any]]) -> None: ...


class FeedbackEndpoint:
    def __init__(
        self,
        write: FeedbackWriter,
        *,
        api_keys: ApiKeyAuth,
        feedback_keys: FeedbackKeys,
        origins: Collection[str] = (),
        rate_per_s: float = 10.0,
        burst: int = 20,
        max_body_bytes: int = 64 * 1024,
        max_items: int = 100,
        max_waiting_rows: int = 50_000,
        max_waiting_bytes: int = 16 * 1024 * 1024,
        max_waiting_requests: int = 4096,
        wait_s: float = 10.0,
        counters: CollectorCounters | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.committer = FeedbackCommitter(
            write,
            max_waiting_rows=max_waiting_rows,
            max_waiting_bytes=max_waiting_bytes,
            max_waiting_requests=max_waiting_requests,
            max_batch_rows=max(max_items, 10_000),
            wait_s=wait_s,
        )
        self.api_keys = api_keys
        self.feedback_keys = feedback_keys
        self.origins = frozenset(origin.rstrip("/") for origin in origins)
        self.rate_limiter = RateLimiter(rate_per_s, burst)
        self.max_body_bytes = max_body_bytes
        self.max_items = max_items
        self.counters = counters if counters is not None else CollectorCounters()
        self._clock = clock

    def start(self) -> FeedbackEndpoint:
        self.committer.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Store what waits (within `timeout_s`) and answer every request still waiting."""
        self.committer.stop(timeout_s)

    def count(self, outcome: str) -> None:
        self.counters.add("ragmon_feedback_requests_total", outcome=outcome)

    # --- on the loop thread: everything decided on the head -------------------------------------------------
    def route(self, head: RequestHead) -> Reply | Handle:
        origin = head.headers.get("origin")
        cors = self._cors(origin)
        if origin is not None and cors is None:
            self.count("origin_not_allowed")
            return _refusal(403, "origin_not_allowed", f"origin {origin!r} may not send feedback here", {})
        headers = cors or {}
        if head.method == "OPTIONS":
            if cors is None:  # a preflight without an Origin is no preflight
                return _refusal(400, "not_a_preflight", "OPTIONS is the CORS preflight: send an Origin", {})
            preflight = {
                **headers,
                "Access-Control-Allow-Methods": "POST",
                "Access-Control-Allow-Headers": _ALLOWED_HEADERS,
                "Access-Control-Max-Age": _PREFLIGHT_MAX_AGE_S,
            }
            return Reply(204, b"", _JSON, preflight)
        if head.method != "POST":
            return _refusal(405, "method_not_allowed", "use POST", {**headers, "Allow": "POST, OPTIONS"})
        who = self._who(head.headers.get("authorization"), head.headers.get("x-api-key"))
        if who is None:
            self.count("unauthenticated")
            message = "missing or invalid key (Authorization: Bearer <key> or x-api-key): an API key or a feedback key"
            return _refusal(401, "unauthenticated", message, {**headers, "WWW-Authenticate": "Bearer"})
        tenant, source, bucket = who
        wait_s = self.rate_limiter.take(bucket)
        if wait_s is not None:
            self.count("rate_limited")
            retry = {**headers, "Retry-After": str(max(1, math.ceil(wait_s)))}
            return _refusal(429, "rate_limited", "too many feedback requests for this key; retry later", retry)
        if not head.framed:
            self.count("length_required")
            return _refusal(411, "length_required", "Content-Length or Transfer-Encoding: chunked required", headers)
        media_type = head.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type != _JSON:
            self.count("unsupported_media_type")
            return _refusal(415, "unsupported_media_type", f"Content-Type must be {_JSON}", headers)

        def refusal(status: int, message: str) -> Reply:  # the server's own refusals (413, 429, 503, 500)
            if status == 413:
                self.count("too_large")
            return _refusal(status, _SERVER_CODES.get(status, "refused"), message, headers)

        def run(body: bytes) -> Reply | concurrent.futures.Future[Reply]:
            return self._store(body, tenant, source, headers)

        return Handle(run=run, refusal=refusal, max_body_bytes=self.max_body_bytes, abandon=None)

    def _cors(self, origin: str | None) -> dict[str, str] | None:
        if origin is None or origin.rstrip("/") not in self.origins:
            return None
        return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}

    def _who(self, authorization: str | None, api_key: str | None) -> tuple[str, str, str] | None:
        """(tenant, source, rate-limit bucket) of the key presented; None to refuse."""
        presented = _presented(authorization, api_key)
        key = self.feedback_keys.key_for(presented)
        if key is not None:
            return key.tenant, "feedback_key", f"feedback:{key.name}"
        tenant = self.api_keys.tenant_for(authorization, api_key)
        if tenant is None:
            return None
        return tenant, "api", f"api:{tenant}"

    # --- in the server's pool: parse and store -------------------------------------------------------------
    def _store(
        self, body: bytes, tenant: str, source: str, headers: Mapping[str, str]
    ) -> Reply | concurrent.futures.Future[Reply]:
        """Parse here (a pool thread, briefly); the answer comes when the committer has stored the rows."""
        try:
            rows = parse_feedback(body, tenant=tenant, source=source, max_items=self.max_items, now_s=self._clock())
        except FeedbackRefused as exc:
            self.count(exc.code)
            return _refusal(exc.status, exc.code, str(exc), headers)
        answered: concurrent.futures.Future[Reply] = concurrent.futures.Future()

        def answer(outcome: Outcome) -> None:
            reply = self._reply(outcome, len(rows), source, headers)
            if answered.set_running_or_notify_cancel():  # False: the server gave up on it (stopping)
                answered.set_result(reply)

        refused = self.committer.submit(rows, len(body), answer)
        if refused is not None:
            return self._reply(refused, len(rows), source, headers)
        return answered

    def _reply(self, outcome: Outcome, items: int, source: str, headers: Mapping[str, str]) -> Reply:
        if outcome.stored:
            self.count("stored")
            self.counters.add("ragmon_feedback_items_total", items, source=source)
            return _json(200, {"accepted": items}, headers)
        self.count(_OUTCOME_COUNTED[outcome.kind])
        if outcome.kind == "failed":
            return _refusal(500, "internal_error", outcome.message, headers)
        retry = {**headers, "Retry-After": str(max(1, math.ceil(outcome.retry_after_s)))}
        if outcome.kind == "busy":
            return _refusal(429, "busy", outcome.message, retry)
        return _refusal(503, "store_unavailable", outcome.message, retry)


# The committer's outcome -> the `outcome` label of ragmon_feedback_requests_total.
_OUTCOME_COUNTED: Final = {
    "busy": "busy",
    "unavailable": "store_unavailable",
    "timeout": "store_timeout",
    "stopping": "stopping",
    "failed": "internal_error",
}
_SERVER_CODES: Final = {413: "body_too_large", 429: "memory", 500: "internal_error", 503: "busy"}


def _presented(authorization: str | None, api_key: str | None) -> str | None:
    if authorization:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return api_key.strip() if api_key and api_key.strip() else None


def _json(status: int, payload: Any, headers: Mapping[str, str]) -> Reply:
    return Reply(status, json.dumps(payload).encode() + b"\n", _JSON, dict(headers))


def _refusal(status: int, code: str, message: str, headers: Mapping[str, str]) -> Reply:
    return _json(status, {"error": code, "message": message}, headers)
