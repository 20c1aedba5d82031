"""Rules on who or what: keep feature F always, never keep user U (a drop rule wins over every keep)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ragmon.sampling.decision import DROP, KEEP, SKIP, Verdict
from ragmon.sampling.trace import TraceSummary

Field = Literal["feature", "user", "tenant"]


@dataclass(frozen=True)
class AttributeRulePolicy:
    name: str
    field: Field
    values: frozenset[str]
    action: Literal["keep", "drop"] = "keep"

    def evaluate(self, trace: TraceSummary) -> Verdict:
        value = getattr(trace, self.field)
        if value not in self.values:
            return SKIP
        return DROP if self.action == "drop" else KEEP
