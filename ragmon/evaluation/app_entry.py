"""The app protocol of ``ragmon eval run --app module:function``: how an evaluation run calls your app.

The entry point is any importable callable taking one `DatasetRow` (``row.question``, ``row.id``,
``row.feature``, …) and returning the answer, as one of:

- a string — the answer text;
- an object with a ``text`` attribute (and optionally ``refused: bool``, ``trace_id: str``) — e.g. the demo's
  `ragmon.demo.Answer`;
- a mapping with ``"answer"`` (or ``"text"``) and optionally ``"refused"`` and ``"trace_id"``.

``refused`` lets the app say it declined (its own "I don't know" wording); without it the answer text is
checked with `ragmon.evaluation.refusal.is_refusal`. The callable runs the app as in production — with ragmon's
stage spans — and the run has already called `ragmon.configure`, so it must not configure ragmon itself. An
exception fails the row (recorded, the run goes on). Example: ``ragmon.evaluation.demo_entry:answer``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ragmon.evaluation.dataset import DatasetRow
from ragmon.evaluation.errors import EvalInputError
from ragmon.evaluation.row_metrics import AppResult

AppFn = Callable[[DatasetRow], Any]


def load_entry_point(spec: str) -> AppFn:
    """Import ``module:function`` (dotted attribute paths allowed after the colon)."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise EvalInputError(f"--app must look like module:function, got {spec!r}")
    # The `ragmon` script's sys.path starts at its own bin directory, not where it was run: import the app from
    # the current directory first, as `python -m` would (`--app my_app:answer` beside my_app.py).
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise EvalInputError(f"--app {spec}: cannot import {module_name!r}: {exc}") from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise EvalInputError(f"--app {spec}: {module_name!r} has no attribute {attribute!r}") from None
    if not callable(target):
        raise EvalInputError(f"--app {spec}: {attribute!r} is not callable")
    function: AppFn = target
    return function


def to_app_result(value: Any) -> AppResult:
    """Normalise what the entry point returned (shapes in the module docstring)."""
    if isinstance(value, str):
        return AppResult(answer=value)
    if isinstance(value, Mapping):
        text = value.get("answer", value.get("text"))
        if not isinstance(text, str):
            return AppResult(error=f"the app returned a mapping without a string 'answer': {sorted(value)!r}")
        refused, trace_id = value.get("refused"), value.get("trace_id")
    else:
        text = getattr(value, "text", None)
        if not isinstance(text, str):
            return AppResult(error=f"the app returned {type(value).__name__}, not a string or an object with .text")
        refused, trace_id = getattr(value, "refused", None), getattr(value, "trace_id", None)
    return AppResult(
        answer=text,
        refused=bool(refused) if isinstance(refused, bool) else None,
        trace_id=str(trace_id) if trace_id else None,
    )
