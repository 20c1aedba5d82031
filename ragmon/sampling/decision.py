"""The outcome of evaluating one policy or the whole composite for one trace."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Decision(StrEnum):  # a str: hashing it (counters keyed by decision) is C speed, not Enum's Python __hash__
    PENDING = "pending"  # not decided yet: the trace is still collecting spans
    KEEP = "keep"  # keep the payload, send to the judges
    SKIP = "skip"  # no policy wanted it (numbers are stored anyway)
    DROP = "drop"  # an explicit never-rule matched; wins over every keep
    ERROR = "error"  # the policy failed on this trace; counted, treated as not firing


@dataclass(frozen=True, slots=True)
class Verdict:
    """One policy's answer. `probability` is the chance this policy keeps a trace like this one (1.0 if certain)."""

    decision: Decision
    probability: float = 1.0


KEEP = Verdict(Decision.KEEP)
SKIP = Verdict(Decision.SKIP)
DROP = Verdict(Decision.DROP, 0.0)
