"""The one exception offline evaluation raises for bad input, so the CLI can map it to exit code 2.

ValueError
 └── EvalInputError        unreadable or malformed qrels, runs, datasets or gate files; bad options
"""

from __future__ import annotations

from pathlib import Path


class EvalInputError(ValueError):
    """Input that cannot be evaluated: a missing file, a malformed line, a duplicate id, an unknown option value.

    The message names the file and line where there is one, so a user can fix the input without a debugger.
    """


def read_input_text(path: Path) -> str:
    """An input file's text (UTF-8); unreadable or undecodable is an `EvalInputError` naming the file."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalInputError(f"{path}: cannot read: {exc}") from exc
