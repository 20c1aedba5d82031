"""Rules on who or what: keep feature F always, never keep user U (a drop rule wins over every keep)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PrivateAttr

from ragmon.sampling.policies import ConfiguredRule
from ragmon.sampling.view import Fired, TextField, TraceView


class AttributeRulePolicy(ConfiguredRule):
    type: Literal["attribute"] = "attribute"
    name: str
    field: TextField
    values: list[str] = Field(min_length=1)
    action: Literal["keep", "drop"] = "keep"
    _value_set: frozenset[str] = PrivateAttr(default=frozenset())  # what `fires` tests against, built once

    def model_post_init(self, context: Any) -> None:
        self._value_set = frozenset(self.values)

    def fires(self, traces: TraceView) -> Fired:
        return traces.text_is_one_of(self.field, self._value_set)
