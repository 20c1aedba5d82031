"""Evaluation datasets: labelled questions, one JSON object per line (JSONL), validated with pydantic.

    {"id": "q24", "question": "Which ports does the agent listen on?",
     "reference_answer": "OTLP/HTTP on 4318 and OTLP/gRPC on 4317.",
     "relevant": {"agent.md#1": 3, "deployment.md#4": 1},
     "facts": [["4318"], {"name": "grpc port", "alternatives": ["4317", "port 4317"]}],
     "must_not": ["port 8080"],
     "answerable": true,
     "expected_plan": {"steps": [{"tool": "lookup_default_setting",
                                  "arguments": {"settings": ["agent.otlp_http", "agent.otlp_grpc"]}}],
                       "alternatives": [{"label": "docs only", "steps": []}]},
     "feature": "docs-qa", "tags": ["ports"]}

Only ``id`` and ``question`` are required. Fields:

- ``id`` (string, unique in the file): the row id; results pair rows across runs by it.
- ``question``: what the app is asked.
- ``reference_answer`` (string or list of strings): for exact match and token F1 (best over references).
- ``relevant``: paragraph id → grade (integer; ≥ 1 counts as relevant, higher is better), the qrels of the row.
- ``facts``: each fact is a list of alternative phrasings (any one must appear), or
  ``{"name": ..., "alternatives": [...]}``.
- ``must_not``: phrases that must not appear in the answer.
- ``answerable`` (default true): false means the right answer is a refusal.
- ``expected_plan``: the tool calls an agent should make — ``steps`` (each ``{"tool": NAME, "arguments": {...}}``;
  ``arguments`` lists only the arguments that must match, omitted means any), and labelled ``alternatives``
  (``{"label": ..., "steps": [...]}``) that are just as good. ``steps: []`` says "no tool call is needed".
  Scoring rules are in `ragmon.evaluation.trajectory`.
- ``feature`` (optional): the feature the app should tag the request with; ``tags`` and ``metadata`` are free.

Unknown keys are an error (a typo such as ``must_nto`` would otherwise silently check nothing). Blank lines and
lines starting with ``#`` are skipped. Every problem is reported with its file and line, all at once, as one
`EvalInputError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ragmon.evaluation.errors import EvalInputError, read_input_text

# A file with thousands of broken lines should not print thousands of messages.
_MAX_REPORTED_ERRORS = 20


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PlanStep(_Strict):
    """One expected tool call. ``arguments`` None: any arguments are right; else the listed keys must match."""

    tool: str = Field(min_length=1)
    arguments: dict[str, Any] | None = None


class AlternativePlan(_Strict):
    label: str = Field(min_length=1)
    steps: tuple[PlanStep, ...]


class ExpectedPlan(_Strict):
    steps: tuple[PlanStep, ...]
    alternatives: tuple[AlternativePlan, ...] = ()

    def labelled(self) -> list[tuple[str, tuple[PlanStep, ...]]]:
        """Every acceptable plan with its label, the primary one first (labelled ``primary``)."""
        return [("primary", self.steps), *((alt.label, alt.steps) for alt in self.alternatives)]


class DatasetFact(_Strict):
    name: str = ""
    alternatives: tuple[str, ...] = Field(min_length=1)

    @field_validator("alternatives")
    @classmethod
    def _has_text(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not any(alt.strip() for alt in value):
            raise ValueError("a fact needs at least one non-empty phrasing")
        return value


class DatasetRow(_Strict):
    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    reference_answer: tuple[str, ...] = ()
    relevant: dict[str, int] = Field(default_factory=dict)
    facts: tuple[DatasetFact, ...] = ()
    must_not: tuple[str, ...] = ()
    answerable: bool = True
    expected_plan: ExpectedPlan | None = None
    feature: str | None = None
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id", mode="before")
    @classmethod
    def _id_text(cls, value: Any) -> Any:
        # Integer ids are common in exported spreadsheets; they are ids, not numbers.
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("reference_answer", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @field_validator("facts", mode="before")
    @classmethod
    def _fact_shorthand(cls, value: Any) -> Any:
        if not isinstance(value, list | tuple):
            return value
        # ["Paris"] and [["1889", "eighteen eighty-nine"]] are shorthand for {"alternatives": [...]}.
        return [
            {"alternatives": [item]}
            if isinstance(item, str)
            else {"alternatives": item}
            if isinstance(item, list | tuple)
            else item
            for item in value
        ]

    @field_validator("relevant")
    @classmethod
    def _paragraph_ids(cls, value: dict[str, int]) -> dict[str, int]:
        if any(not key.strip() for key in value):
            raise ValueError("paragraph ids must be non-empty")
        return value

    @model_validator(mode="after")
    def _refusal_consistency(self) -> DatasetRow:
        if not self.answerable and self.facts:
            raise ValueError("an unanswerable row cannot require facts (its right answer is a refusal)")
        return self

    @property
    def qrels(self) -> dict[str, int]:
        return dict(self.relevant)


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "row"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def iter_rows(lines: Sequence[str], source: str) -> Iterator[DatasetRow | str]:
    """Parse lines; yields a row, or an error message naming ``source:line``, for each non-blank line."""
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{source}:{number}"
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            yield f"{where}: not JSON ({exc.msg} at column {exc.colno})"
            continue
        if not isinstance(record, dict):
            yield f"{where}: expected a JSON object, got {type(record).__name__}"
            continue
        try:
            yield DatasetRow.model_validate(record)
        except ValidationError as exc:
            row_id = record.get("id")
            label = f" (row {row_id!r})" if isinstance(row_id, str | int) else ""
            yield f"{where}{label}: {_validation_message(exc)}"


def parse_dataset(text: str, source: str = "<dataset>") -> list[DatasetRow]:
    """Validate a whole JSONL text; raises one `EvalInputError` listing every bad line (up to 20)."""
    rows: list[DatasetRow] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(iter_rows(text.splitlines(), source)):
        if isinstance(item, str):
            errors.append(item)
            continue
        if item.id in seen:
            errors.append(f"{source}: duplicate id {item.id!r} (rows {seen[item.id] + 1} and {index + 1})")
            continue
        seen[item.id] = index
        rows.append(item)
    if errors:
        shown = errors[:_MAX_REPORTED_ERRORS]
        more = len(errors) - len(shown)
        tail = f"\n… and {more} more" if more else ""
        raise EvalInputError(f"{len(errors)} invalid dataset line(s):\n" + "\n".join(shown) + tail)
    if not rows:
        raise EvalInputError(f"{source}: the dataset has no rows")
    return rows


def load_dataset(path: str | Path) -> list[DatasetRow]:
    """Read and validate a dataset file (format in the module docstring)."""
    path = Path(path)
    text = read_input_text(path)
    return parse_dataset(text, str(path))


def example_dataset_path() -> Path:
    """The example dataset shipped with the demo app (``ragmon/demo/eval_dataset.jsonl``)."""
    return Path(str(resources.files("ragmon.demo").joinpath("eval_dataset.jsonl")))
