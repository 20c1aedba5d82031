"""The demo app's one tool: look up a default setting of ragmon itself, instrumented with ragmon's tool stage.

Questions about a default (a port, the queue size, the judge budget) trigger a call, the way an agentic app
checks live configuration instead of trusting the docs. The values come from `ragmon.settings`, so the tool
tells the truth about this installation.
"""

from __future__ import annotations

import re
from typing import Any

import ragmon
from ragmon.demo.errors import ToolError
from ragmon.demo.retriever import StageHook, _no_hook
from ragmon.settings import Settings

TOOL_NAME = "lookup_default_setting"

# Question cue (a regex over the lower-cased question) -> the settings it is about. Checked in order.
_TRIGGERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"\bports?\b|\blisten", ("agent.otlp_http", "agent.otlp_grpc")),
    (r"\bqueue\b", ("export.queue_max_spans", "export.batch_max_spans")),
    (r"\bbudget\b|\bspend\b", ("judge.budget_usd",)),
    (r"\bdata\b.*\bdisk\b|\bdisk\b.*\bdata\b|\bdata director", ("agent.data_dir",)),
    (r"\bjudge model\b", ("judge.model",)),
    (r"\bendpoint\b", ("export.endpoint",)),
)


def _defaults() -> dict[str, Any]:
    """Every non-secret default, flattened to "section.field"."""
    tree = Settings().model_dump(mode="json")
    flat: dict[str, Any] = {}
    for section, fields in tree.items():
        for name, value in fields.items():
            if "key" not in name and "header" not in name:
                flat[f"{section}.{name}"] = value
    return flat


class SettingsLookupTool:
    name = TOOL_NAME

    def __init__(self) -> None:
        self._defaults = _defaults()

    def wanted(self, question: str) -> tuple[str, ...]:
        """The settings a question asks about; empty when no tool call is warranted."""
        lowered = question.lower()
        for pattern, keys in _TRIGGERS:
            if re.search(pattern, lowered):
                return keys
        return ()

    def lookup(self, keys: tuple[str, ...]) -> str:
        missing = [k for k in keys if k not in self._defaults]
        if missing:
            raise ToolError(f"unknown setting {missing[0]!r}")
        return "; ".join(f"{k} = {self._defaults[k]}" for k in keys)

    def call(self, keys: tuple[str, ...], *, hook: StageHook = _no_hook) -> str:
        with ragmon.tool(self.name, arguments={"settings": list(keys)}) as span:
            hook("tool")
            result = self.lookup(keys)
            span.record(result=result, status="ok")
        return result
