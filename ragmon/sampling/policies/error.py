"""Keep every trace with a span in ERROR status (exceptions mark spans ERROR in every dialect we read)."""

from __future__ import annotations

from typing import Literal

from ragmon.sampling.policies import ConfiguredRule
from ragmon.sampling.view import Fired, TraceView


class ErrorPolicy(ConfiguredRule):
    type: Literal["error"] = "error"
    name: str = "error"

    def fires(self, traces: TraceView) -> Fired:
        errors: Fired = traces.error_count != 0
        return errors
