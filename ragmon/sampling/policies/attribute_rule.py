"""Rules on who or what: keep feature F always, never keep user U (a drop rule wins over every keep)."""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import Field

from ragmon.sampling.policies import ConfiguredRule
from ragmon.sampling.view import Fired, TextField, TraceView


class AttributeRulePolicy(ConfiguredRule):
    type: Literal["attribute"] = "attribute"
    name: str
    field: TextField
    values: list[str] = Field(min_length=1)
    action: Literal["keep", "drop"] = "keep"

    @cached_property  # built once (not a setting: absent from dumps and comparisons)
    def _value_set(self) -> frozenset[str]:
        return frozenset(self.values)

    def fires(self, traces: TraceView) -> Fired:
        return traces.text_is_one_of(self.field, self._value_set)
