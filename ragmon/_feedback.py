"""`ragmon.feedback`: an end user's verdict on an answer, sent from the app's backend to the agent.

    with ragmon.request("docs-qa", user="u-42", request_id=order_id) as req:
        ...                                                    # the app answers; req.trace_id is its trace
    ragmon.feedback(trace_id=req.trace_id, thumbs="down", comment="wrong plan", user="u-42")
    ragmon.feedback(request_id=order_id, rating=4)             # by the app's own id, set on the request span
    ragmon.feedback(name="copied", score=1)                    # inside a request: the current span's trace

The request is named by its trace id (hex text, or the int OpenTelemetry's SpanContext holds), by the app's own
request id (`ragmon.request(..., request_id=...)` sets it on the request span as `ragmon.request_id`; the agent
resolves it to the trace when it reads), or, with neither, by the trace of the span current on this thread. The value
is exactly one of `thumbs` ("up"/"down", or True/False), `rating` (1-5) or `score` with a `name`.

Like every SDK call it never blocks the app and never raises into it: bad arguments are counted
(`ragmon.stats()["problems"]["feedback_invalid"]`) and logged through `ragmon.diagnostics`, rate-limited, and
the call returns False. Valid feedback goes into a bounded queue (`ragmon.batch_queue`; overflow is counted) and one
thread posts it in batches as JSON to `{export.endpoint}/v1/feedback` with the SDK's API key, retrying 429/5xx and
connection errors with the shared policy (`ragmon.retry`, honouring Retry-After); `ragmon.shutdown` and
`ragmon.force_flush` flush it. Each item carries an id chosen here, so a batch the agent stored but whose answer was
lost, sent again, is counted once.
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace as trace_api

from ragmon import _state
from ragmon.batch_queue import BatchQueue
from ragmon.diagnostics import logger, warn_limited
from ragmon.retry import Outcome, RetryPolicy, classify_http_status, parse_retry_after

__all__ = ["FeedbackSender", "feedback"]

FEEDBACK_PATH = "/v1/feedback"
_BATCH_MAX_ITEMS = 100  # the agent's default `feedback_max_items`
_QUEUE_MAX_ITEMS = 10_000
_TEXT_LIMITS = {"request_id": 256, "user": 256, "name": 64, "comment": 2000}  # the agent's limits


@dataclass
class FeedbackStats:
    queued: int = 0
    sent: int = 0
    dropped: dict[str, int] = field(default_factory=dict)

    def drop(self, reason: str, items: int) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + items


class FeedbackSender:
    """A bounded queue and one thread posting batches of feedback items to the agent."""

    def __init__(
        self,
        endpoint: str,
        *,
        headers: dict[str, str],
        timeout_s: float = 10.0,
        policy: RetryPolicy | None = None,
        flush_interval_s: float = 0.2,
    ) -> None:
        url = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"feedback endpoint must be http(s)://host[:port], got {endpoint!r}")
        self._https = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port or (443 if self._https else 80)
        self._path = url.path.rstrip("/").removesuffix("/v1/traces") + FEEDBACK_PATH
        self._headers = {"Content-Type": "application/json", **headers}
        self._timeout_s = timeout_s
        self._policy = policy or RetryPolicy()
        self._connection: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        self.stats = FeedbackStats()
        self._queue: BatchQueue[dict[str, Any]] = BatchQueue(
            self._send,
            on_drop=self._count_drop,
            queue_max=_QUEUE_MAX_ITEMS,
            batch_max=_BATCH_MAX_ITEMS,
            flush_interval_s=flush_interval_s,
            thread_name="ragmon-feedback",
        )

    def offer(self, item: dict[str, Any]) -> bool:
        if self._queue.offer(item):
            self.stats.queued += 1
            return True
        warn_limited("feedback_queue_full", "ragmon feedback queue full or closed; dropping feedback")
        return False

    def flush(self, timeout_s: float) -> bool:
        return self._queue.flush(timeout_s)

    def close(self, timeout_s: float) -> None:
        self._queue.close(timeout_s)
        self._close_connection()

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    def _count_drop(self, reason: str, items: int) -> None:
        with self._lock:
            self.stats.drop(reason, items)

    def _send(self, batch: list[dict[str, Any]], stop: threading.Event) -> None:
        body = json.dumps(batch, ensure_ascii=False).encode()
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            status, retry_after, detail = self._post(body)
            outcome = Outcome.RETRYABLE if status == 0 else classify_http_status(status)
            if outcome is Outcome.OK:
                self.stats.sent += len(batch)
                return
            reason = f"http_{status}" if status else "connection_error"
            if outcome is Outcome.PERMANENT:
                warn_limited(reason, "feedback refused by the agent (%s): %s", reason, detail[:300])
                self._count_drop(reason, len(batch))
                return
            delay = self._policy.next_delay_s(attempt, time.monotonic() - started, retry_after)
            if delay is None:
                warn_limited("feedback_gave_up", "feedback export gave up after %d attempts (%s)", attempt, reason)
                self._count_drop(f"retries_exhausted:{reason}", len(batch))
                return
            if stop.wait(delay):
                self._count_drop("shutdown_during_retry", len(batch))
                return

    def _post(self, body: bytes) -> tuple[int, float | None, str]:
        try:
            if self._connection is None:
                factory = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
                self._connection = factory(self._host, self._port, timeout=self._timeout_s)
            self._connection.request("POST", self._path, body=body, headers=self._headers)
            response = self._connection.getresponse()
            payload = response.read()
            if response.will_close:
                self._close_connection()
            retry_after = parse_retry_after(response.getheader("Retry-After"))
            return response.status, retry_after, payload.decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            self._close_connection()
            return 0, None, repr(exc)

    def _close_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


# -- the SDK's one sender, built on first use from what `ragmon.configure` resolved ------------------------------
_lock = threading.Lock()
_config: dict[str, Any] | None = None  # FeedbackSender's arguments; None: not configured or export off
_sender: FeedbackSender | None = None


def configure(endpoint: str | None, headers: dict[str, str], timeout_s: float, policy: RetryPolicy) -> None:
    """Called by `ragmon.configure` (endpoint None: export is off); the old sender, if any, is flushed and closed."""
    global _config, _sender
    with _lock:
        old, _sender = _sender, None
        _config = (
            None
            if endpoint is None
            else {"endpoint": endpoint, "headers": headers, "timeout_s": timeout_s, "policy": policy}
        )
    if old is not None:
        old.close(5.0)


def shutdown(timeout_s: float) -> None:
    """Flush within `timeout_s` and stop; `feedback` is a no-op until the next `ragmon.configure`."""
    global _config, _sender
    with _lock:
        sender, _sender, _config = _sender, None, None
    if sender is not None:
        sender.close(timeout_s)


def flush(timeout_s: float) -> bool:
    sender = _sender
    return True if sender is None else sender.flush(timeout_s)


def stats() -> dict[str, Any]:
    sender = _sender
    if sender is None:
        return {"queued": 0, "sent": 0, "dropped": {}}
    return {"queued": sender.queue_depth, "sent": sender.stats.sent, "dropped": dict(sender.stats.dropped)}


def _active_sender() -> FeedbackSender | None:
    global _sender
    sender = _sender
    if sender is not None:
        return sender
    with _lock:
        if _sender is None and _config is not None:
            _sender = FeedbackSender(**_config)
        return _sender


# -- the app's call ---------------------------------------------------------------------------------------------
class _Invalid(ValueError):
    pass


def feedback(
    *,
    trace_id: str | int | None = None,
    request_id: str | None = None,
    thumbs: str | bool | None = None,
    rating: int | None = None,
    name: str | None = None,
    score: float | None = None,
    comment: str | None = None,
    user: str | None = None,
) -> bool:
    """Queue an end user's feedback on one request; True when queued. Never raises, never blocks (see the module)."""
    state = _state.current
    if state is None:
        return False  # not configured: a no-op, as every SDK call
    try:
        item = _item(trace_id, request_id, thumbs, rating, name, score, comment, user)
    except _Invalid as exc:
        state.count("feedback_invalid")
        warn_limited("feedback_invalid", "ragmon.feedback: %s; not sent", exc)
        return False
    except Exception as exc:  # a bug here must not reach the app
        state.count("instrumentation_errors")
        logger.debug("ragmon.feedback failed", exc_info=True)
        warn_limited("feedback_error", "ragmon.feedback could not build its item: %r", exc)
        return False
    sender = _active_sender()
    if sender is None:
        state.count("feedback_not_exported")
        return False
    return sender.offer(item)


def _item(
    trace_id: str | int | None,
    request_id: str | None,
    thumbs: str | bool | None,
    rating: int | None,
    name: str | None,
    score: float | None,
    comment: str | None,
    user: str | None,
) -> dict[str, Any]:
    item: dict[str, Any] = {"id": uuid.uuid4().hex, "at": round(time.time(), 3)}
    if trace_id is not None and request_id is not None:
        raise _Invalid("give trace_id or request_id, not both")
    if request_id is not None:
        item["request_id"] = _text("request_id", request_id)
    else:
        item["trace_id"] = _trace_hex(trace_id)
    given = [v for v in (thumbs, rating, score) if v is not None]
    if len(given) != 1:
        raise _Invalid("give exactly one of thumbs, rating, score")
    if thumbs is not None:
        if thumbs not in ("up", "down", True, False):
            raise _Invalid('thumbs must be "up", "down", True or False')
        item["thumbs"] = thumbs if isinstance(thumbs, str) else ("up" if thumbs else "down")
    elif rating is not None:
        if isinstance(rating, bool) or not isinstance(rating, int) or not 1 <= rating <= 5:
            raise _Invalid("rating must be a whole number from 1 to 5")
        item["rating"] = rating
    else:
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise _Invalid("score must be a finite number")
        if name is None or name in ("thumbs", "rating"):
            raise _Invalid("a score needs a name (not thumbs or rating)")
        item["score"] = score
        item["name"] = _text("name", name)
    if name is not None and score is None:
        raise _Invalid("name goes with score only")
    if comment is not None:
        item["comment"] = _text("comment", comment)
    if user is not None:
        item["user"] = _text("user", str(user))
    return item


def _trace_hex(trace_id: str | int | None) -> str:
    """32 lowercase hex digits from OTel's int, hex text (with or without 0x), or the current span's trace."""
    if trace_id is None:
        context = trace_api.get_current_span().get_span_context()
        if not context.is_valid:
            raise _Invalid("no trace_id or request_id, and no span is current")
        return format(context.trace_id, "032x")
    if isinstance(trace_id, bool):
        raise _Invalid("trace_id must be hex text or an int")
    if isinstance(trace_id, int):
        if not 0 < trace_id < 1 << 128:
            raise _Invalid("trace_id must be a non-zero 128-bit number")
        return format(trace_id, "032x")
    if isinstance(trace_id, str):
        text = trace_id.strip().lower().removeprefix("0x")
        if len(text) == 32 and all(c in "0123456789abcdef" for c in text) and text != "0" * 32:
            return text
    raise _Invalid("trace_id must be 32 hex digits (or OpenTelemetry's int), not all zero")


def _text(field_name: str, value: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Invalid(f"{field_name} must be non-empty text")
    if len(value) > _TEXT_LIMITS[field_name]:
        raise _Invalid(f"{field_name} is over {_TEXT_LIMITS[field_name]} characters")
    return value
