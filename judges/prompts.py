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

from ragmon.judges.types import Turn

# Said to the judge when a follow-up comes with its conversation's earlier turns (`ragmon.judges.conversation`).
EARLIER_TURNS_NOTE = (
    "The question may follow up on earlier turns of a conversation, given under 'earlier turns' (oldest first). "
    "Read the question in their light, but judge only the last answer, and judge it against the passages given, "
    "never against the earlier answers."
)


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

    def render(self, inputs: Mapping[str, Any], earlier_turns: Sequence[Turn] = ()) -> list[dict[str, str]]:
        """Chat messages: the instruction, the examples as earlier exchanges, then `inputs` — after the
        conversation's `earlier_turns` when the sample is a follow-up (the instruction then says what they are)."""
        note = f"\n\n{EARLIER_TURNS_NOTE}" if earlier_turns else ""
        system = (
            f"{self.instruction}{note}\n\nReply with a single JSON object and nothing else, of this shape:\n"
            f"{self.output_schema}"
        )
        messages = [{"role": "system", "content": system}]
        for example in self.examples:
            messages.append({"role": "user", "content": _render_inputs(example.inputs)})
            messages.append({"role": "assistant", "content": json.dumps(example.output, ensure_ascii=False)})
        if earlier_turns:
            turns = [f"Q: {t.question}\nA: {t.answer}" for t in earlier_turns]
            inputs = {"earlier turns": turns, **inputs}
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
