"""The per-row results file the gate compares: one JSON object per line (JSONL).

    {"row_id": "faq-17#2", "question_id": "faq-17", "metrics": {"faithfulness": 0.92, "nDCG@10": 0.71},
     "passed": true, "checks": {"facts": true, "refusal": true}}

- ``row_id`` (string or integer, required): unique within the file; rows of two runs are paired by it.
- ``question_id`` (optional, defaults to ``row_id``): rows of one question (several samples, several turns) are
  resampled together by the bootstrap, since they are not independent.
- ``metrics`` (optional object): metric name → number, boolean (as 1/0) or null. Null means "not measured"
  (a judge error, an undefined score): the row is left out of that metric, never counted as 0.
- ``passed`` (optional boolean): the row's verdict. Without it, the verdict is "every ``checks`` value is true";
  with neither, the row has no verdict and cannot fail or regress.
- ``checks`` (optional object): named boolean checks, shown in reports.

Blank lines are skipped; anything else malformed is an `EvalInputError` naming the line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragmon.evaluation.errors import EvalInputError, read_input_text


@dataclass(frozen=True)
class ResultRow:
    row_id: str
    question_id: str
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    passed: bool | None = None
    checks: Mapping[str, bool] = field(default_factory=dict)


def _identifier(value: Any, name: str, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise EvalInputError(f"{where}: {name} must be a non-empty string or an integer, got {value!r}")
    return str(value)


def _metric(value: Any, name: str, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and not math.isnan(value) and not math.isinf(value):
        return float(value)
    if isinstance(value, float) and math.isnan(value):
        return None  # Python's json writes NaN for undefined scores; read it as "not measured", like null.
    raise EvalInputError(f"{where}: metric {name!r} must be a finite number, a boolean or null, got {value!r}")


def parse_row(record: Any, where: str) -> ResultRow:
    """Validate one decoded JSON object (format in the module docstring)."""
    if not isinstance(record, dict):
        raise EvalInputError(f"{where}: expected a JSON object, got {type(record).__name__}")
    row_id = _identifier(record.get("row_id"), "row_id", where)
    question_id = _identifier(record.get("question_id", row_id), "question_id", where)
    metrics_in = record.get("metrics", {})
    checks_in = record.get("checks", {})
    if not isinstance(metrics_in, dict) or not isinstance(checks_in, dict):
        raise EvalInputError(f"{where}: metrics and checks must be JSON objects")
    metrics = {str(name): _metric(value, str(name), where) for name, value in metrics_in.items()}
    checks: dict[str, bool] = {}
    for name, value in checks_in.items():
        if not isinstance(value, bool):
            raise EvalInputError(f"{where}: check {name!r} must be true or false, got {value!r}")
        checks[str(name)] = value
    passed = record.get("passed")
    if passed is not None and not isinstance(passed, bool):
        raise EvalInputError(f"{where}: passed must be true, false or absent, got {passed!r}")
    if passed is None and checks:
        passed = all(checks.values())
    return ResultRow(row_id=row_id, question_id=question_id, metrics=metrics, passed=passed, checks=checks)


def read_results(path: str | Path) -> dict[str, ResultRow]:
    """Read a results file into ``{row_id: row}``, in file order; duplicate row ids are an error."""
    path = Path(path)
    lines = read_input_text(path).splitlines()
    rows: dict[str, ResultRow] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvalInputError(f"{where}: not JSON ({exc.msg})") from exc
        row = parse_row(record, where)
        if row.row_id in rows:
            raise EvalInputError(f"{where}: duplicate row_id {row.row_id!r}")
        rows[row.row_id] = row
    if not rows:
        raise EvalInputError(f"{path}: no rows")
    return rows


def read_protected(path: str | Path) -> list[str]:
    """Protected ids, one per line (row ids or question ids); ``#`` starts a comment."""
    path = Path(path)
    text = read_input_text(path)
    ids = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return [identifier for identifier in ids if identifier]
