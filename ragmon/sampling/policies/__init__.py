"""One sampling policy per module, each a small class with `name` and `evaluate(trace) -> Verdict`."""

from __future__ import annotations

from typing import Protocol

from ragmon.sampling.decision import Verdict
from ragmon.sampling.trace import TraceSummary


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    def evaluate(self, trace: TraceSummary) -> Verdict: ...
