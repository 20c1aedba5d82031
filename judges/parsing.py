"""Strict reading of a judge's reply into a pydantic model. Anything that is not exactly one JSON object of the
asked shape is an error with a message (shown to the model once, as a repair hint) — never a default value."""

from __future__ import annotations

import json
import re
from typing import TypeVar

from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)

# A reply wrapped in one Markdown code fence is unambiguous, and common even in JSON mode.
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```$", re.DOTALL)


class ReplyParseError(ValueError):
    pass


def parse_reply(content: str, model: type[T]) -> T:
    stripped = content.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1).strip()
    try:
        document = json.loads(stripped)
    except json.JSONDecodeError as exc:
        raise ReplyParseError(f"not valid JSON ({exc.msg} at char {exc.pos})") from exc
    if not isinstance(document, dict):
        raise ReplyParseError(f"expected a JSON object, got {type(document).__name__}")
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ReplyParseError(f"JSON does not match the schema: {where}: {first['msg']}") from exc
