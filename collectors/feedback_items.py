"""Feedback as it arrives on `POST /v1/feedback`: JSON checked field by field and turned into store rows.

A body is one item (a JSON object) or a batch (an array of objects, at most `max_items`). An item:

    {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"      the trace it is about (32 hex digits), or
     "request_id": "order-123",                          the app's own id, set on its request span
     "thumbs": "up" | "down"                             exactly one value: thumbs,
     "rating": 1..5                                      a rating,
     "name": "helpful", "score": 0.8                     or a named score (any finite number)
     "comment": "...", "user": "u-42",                   optional
     "id": "client-chosen id",                           optional: makes a re-send the same feedback
     "at": 1735689600.5}                                 optional: when the user gave it (unix seconds)

Anything else is refused, whole, with a 4xx naming the item and the field (`FeedbackRefused`): unknown fields,
values of the wrong type or out of range, text over its limit. Nothing of a refused body is stored.

What a row means (`schema.FEEDBACK_COLUMNS`): `voter` is whose verdict it is — the user when given, else the
item's id (the sender's, else a hash of the item), so a user's later value replaces theirs, the same item sent twice
is one, and anonymous verdicts each count; `negative` is a thumbs down or a rating of 1-2.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

__all__ = ["LIMITS", "FeedbackRefused", "parse_feedback"]

# Field limits, in characters (a comment is a sentence or two, not a document).
LIMITS: Final = {"request_id": 256, "user": 256, "id": 128, "name": 64, "comment": 2000}
_FIELDS: Final = frozenset(
    {"trace_id", "request_id", "thumbs", "rating", "name", "score", "comment", "user", "id", "at"}
)
_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
_NAME = re.compile(r"^[A-Za-z0-9_.:-]+$")
_RESERVED_NAMES: Final = frozenset({"thumbs", "rating"})
# How far from the agent's clock a sender's `at` may be: a little ahead (clock skew), far enough back for a user
# rating yesterday's answer.
_AT_AHEAD_S: Final = 300.0
_AT_BEHIND_S: Final = 30 * 86400.0


class FeedbackRefused(ValueError):
    """A body or item the endpoint refuses: `status` (400, 413, 415, 422) and a machine-readable `code`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def parse_feedback(body: bytes, *, tenant: str, source: str, max_items: int, now_s: float) -> list[dict[str, Any]]:
    """The store rows of a body; `FeedbackRefused` for anything wrong with it."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise FeedbackRefused(400, "malformed_json", f"the body is not JSON: {exc}") from None
    items = document if isinstance(document, list) else [document]
    if not items:
        raise FeedbackRefused(400, "empty", "an empty batch: send one item or an array of items")
    if len(items) > max_items:
        raise FeedbackRefused(413, "too_many_items", f"{len(items)} items in one request; at most {max_items}")
    received = datetime.fromtimestamp(now_s, UTC)
    return [_row(item, i, tenant, source, now_s, received) for i, item in enumerate(items)]


def _row(item: Any, index: int, tenant: str, source: str, now_s: float, received: datetime) -> dict[str, Any]:
    where = f"item {index}"
    if not isinstance(item, dict):
        raise FeedbackRefused(400, "not_an_object", f"{where} is not a JSON object")
    unknown = sorted(set(item) - _FIELDS)
    if unknown:
        raise FeedbackRefused(400, "unknown_field", f"{where}: unknown field(s) {', '.join(unknown)}")
    trace_id, request_id = _target(item, where)
    kind, name, value = _value(item, where)
    comment = _text(item, "comment", where)
    user = _text(item, "user", where)
    given_at = _at(item, where, now_s, received)
    feedback_id = _text(item, "id", where) or _content_id(tenant, item)
    return {
        "tenant": tenant,
        "trace_id": trace_id,
        "request_id": request_id,
        "name": name,
        "kind": kind,
        "value": value,
        "negative": (kind == "thumbs" and value == 0.0) or (kind == "rating" and value <= 2.0),
        "voter": f"user:{user}" if user else f"id:{feedback_id}",
        "user": user,
        "comment": comment,
        "feedback_id": feedback_id,
        "source": source,
        "given_at": given_at,
        "received_at": received,
    }


def _target(item: Mapping[str, Any], where: str) -> tuple[str, str]:
    trace_id, request_id = item.get("trace_id"), item.get("request_id")
    if (trace_id is None) == (request_id is None):
        raise FeedbackRefused(400, "no_target", f"{where}: name the request with exactly one of trace_id, request_id")
    if trace_id is not None:
        if not isinstance(trace_id, str) or not _TRACE_ID.match(trace_id.lower()) or set(trace_id) == {"0"}:
            raise FeedbackRefused(400, "bad_trace_id", f"{where}: trace_id must be 32 hex digits, not all zero")
        return trace_id.lower(), ""
    return "", _text(item, "request_id", where, required=True)


def _value(item: Mapping[str, Any], where: str) -> tuple[str, str, float]:
    given = [key for key in ("thumbs", "rating", "score") if key in item]
    if len(given) != 1:
        raise FeedbackRefused(400, "no_value", f"{where}: give exactly one of thumbs, rating, score (with name)")
    if given[0] != "score" and "name" in item:
        raise FeedbackRefused(400, "bad_value", f"{where}: name goes with score only")
    if given[0] == "thumbs":
        thumbs = item["thumbs"]
        if thumbs not in ("up", "down"):
            raise FeedbackRefused(422, "bad_value", f'{where}: thumbs must be "up" or "down"')
        return "thumbs", "thumbs", 1.0 if thumbs == "up" else 0.0
    if given[0] == "rating":
        rating = item["rating"]
        if isinstance(rating, bool) or not isinstance(rating, int) or not 1 <= rating <= 5:
            raise FeedbackRefused(422, "bad_value", f"{where}: rating must be a whole number from 1 to 5")
        return "rating", "rating", float(rating)
    score = item["score"]
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        raise FeedbackRefused(422, "bad_value", f"{where}: score must be a finite number")
    name = _text(item, "name", where, required=True)
    if not _NAME.match(name) or name in _RESERVED_NAMES:
        raise FeedbackRefused(
            422, "bad_value", f"{where}: name must be letters, digits, _ . : - (not thumbs or rating)"
        )
    return "score", name, float(score)


def _text(item: Mapping[str, Any], field: str, where: str, *, required: bool = False) -> str:
    value = item.get(field)
    if value is None:
        if required:
            raise FeedbackRefused(400, "missing_field", f"{where}: {field} is required")
        return ""
    if not isinstance(value, str):
        raise FeedbackRefused(400, "bad_type", f"{where}: {field} must be a string")
    if len(value) > LIMITS[field]:
        raise FeedbackRefused(413, "field_too_long", f"{where}: {field} is over {LIMITS[field]} characters")
    if required and not value.strip():
        raise FeedbackRefused(400, "missing_field", f"{where}: {field} is empty")
    return value


def _at(item: Mapping[str, Any], where: str, now_s: float, received: datetime) -> datetime:
    at = item.get("at")
    if at is None:
        return received
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        raise FeedbackRefused(400, "bad_type", f"{where}: at must be unix seconds")
    if not now_s - _AT_BEHIND_S <= at <= now_s + _AT_AHEAD_S:
        raise FeedbackRefused(422, "bad_value", f"{where}: at must be unix seconds within the last 30 days")
    return datetime.fromtimestamp(at, UTC)


def _content_id(tenant: str, item: Mapping[str, Any]) -> str:
    """An item without an id: the hash of what it says, so the same item sent twice is one feedback."""
    text = json.dumps([tenant, item], sort_keys=True, ensure_ascii=False)
    return "h:" + hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
