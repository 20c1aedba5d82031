"""Keep every trace with a span in ERROR status (exceptions mark spans ERROR in every dialect we read)."""

from __future__ import annotations

from dataclasses import dataclass

from ragmon.sampling.decision import KEEP, SKIP, Verdict
from ragmon.sampling.trace import TraceSummary


@dataclass(frozen=True)
class ErrorPolicy:
    name: str = "error"

    def evaluate(self, trace: TraceSummary) -> Verdict:
        return KEEP if trace.error_count else SKIP
