"""Prompts as data: an instruction, few-shot examples and a version, rendered to chat messages asking for JSON.

The version is recorded with every score: changing a prompt re-scales its metric, so it must be visible in the
data. Examples are rendered as earlier user/assistant turns, which instruction-tuned models follow better than
examples pasted into the instruction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Example:
    inputs: Mapping[str, Any]
    output: Mapping[str, Any]


@dataclass(frozen=True)
class Prompt:
    name: str
    version: str
    instruction: str
    output_schema: str  # a short description of the JSON object expected, shown to the model
    examples: Sequence[Example] = field(default_factory=tuple)

    def render(self, inputs: Mapping[str, Any]) -> list[dict[str, str]]:
        system = (
            f"{self.instruction}\n\nReply with a single JSON object and nothing else, of this shape:\n"
            f"{self.output_schema}"
        )
        messages = [{"role": "system", "content": system}]
        for example in self.examples:
            messages.append({"role": "user", "content": _render_inputs(example.inputs)})
            messages.append({"role": "assistant", "content": json.dumps(example.output, ensure_ascii=False)})
        messages.append({"role": "user", "content": _render_inputs(inputs)})
        return messages


def _render_inputs(inputs: Mapping[str, Any]) -> str:
    parts = []
    for key, value in inputs.items():
        if isinstance(value, list | tuple):
            body = "\n".join(f"[{i}] {item}" for i, item in enumerate(value))
        else:
            body = str(value)
        parts.append(f"## {key}\n{body}")
    return "\n\n".join(parts)
