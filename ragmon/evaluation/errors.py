"""The one exception offline evaluation raises for bad input, so the CLI can map it to exit code 2.

ValueError
 └── EvalInputError        unreadable or malformed qrels, runs, datasets or gate files; bad options
"""

from __future__ import annotations


class EvalInputError(ValueError):
    """Input that cannot be evaluated: a missing file, a malformed line, a duplicate id, an unknown option value.

    The message names the file and line where there is one, so a user can fix the input without a debugger.
    """
