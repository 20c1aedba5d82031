"""Refusal correctness: refusing an unanswerable question is right, refusing an answerable one is wrong.

Both directions are counted, because a system can look safe by refusing everything (many wrong refusals) or
helpful by answering everything (many missed refusals). `is_refusal` is a small, readable rule set for "I don't
know"-style answers; pass your own patterns, or a judge's verdict, when your app refuses differently.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DEFAULT_REFUSAL_PATTERNS: tuple[str, ...] = (
    r"\bi (?:do not|don't|cannot|can't|am unable to|am not able to) (?:know|answer|find|say|tell|help)\b",
    r"\b(?:no|not enough|insufficient) (?:information|context|relevant (?:information|context))\b",
    r"\b(?:is|are) not (?:mentioned|provided|covered|available|stated) in the (?:context|documents?|sources?)\b",
    r"\bi'?m (?:sorry|afraid),? (?:but )?i (?:can't|cannot|don't)\b",
    r"\bunable to (?:answer|find|determine)\b",
    r"\bthe (?:context|documents?|sources?) (?:does|do) not (?:contain|mention|say|provide)\b",
)


def is_refusal(answer: str, patterns: Sequence[str] = DEFAULT_REFUSAL_PATTERNS) -> bool:
    """True when the answer declines to answer (an empty answer counts as a refusal)."""
    text = " ".join(answer.lower().replace("’", "'").split())
    return not text or any(re.search(pattern, text) for pattern in patterns)


class RefusalOutcome(enum.Enum):
    """The four cells of (answerable?, refused?)."""

    CORRECT_REFUSAL = "correct_refusal"  # unanswerable, refused
    WRONG_REFUSAL = "wrong_refusal"  # answerable, refused
    MISSED_REFUSAL = "missed_refusal"  # unanswerable, answered anyway
    ANSWERED = "answered"  # answerable, answered (whether correctly is for the answer metrics)

    @property
    def correct(self) -> bool:
        return self in (RefusalOutcome.CORRECT_REFUSAL, RefusalOutcome.ANSWERED)


def refusal_outcome(*, answerable: bool, refused: bool) -> RefusalOutcome:
    if answerable:
        return RefusalOutcome.WRONG_REFUSAL if refused else RefusalOutcome.ANSWERED
    return RefusalOutcome.CORRECT_REFUSAL if refused else RefusalOutcome.MISSED_REFUSAL


@dataclass(frozen=True)
class RefusalSummary:
    """Counts of each outcome and the rates a report shows (None when the denominator is empty)."""

    correct_refusals: int
    wrong_refusals: int
    missed_refusals: int
    answered: int

    @property
    def unanswerable_refusal_rate(self) -> float | None:
        """Of the unanswerable questions, the share refused (higher is better)."""
        total = self.correct_refusals + self.missed_refusals
        return self.correct_refusals / total if total else None

    @property
    def wrong_refusal_rate(self) -> float | None:
        """Of the answerable questions, the share refused (lower is better)."""
        total = self.wrong_refusals + self.answered
        return self.wrong_refusals / total if total else None

    @property
    def accuracy(self) -> float | None:
        total = self.correct_refusals + self.wrong_refusals + self.missed_refusals + self.answered
        return (self.correct_refusals + self.answered) / total if total else None


def summarise_refusals(outcomes: Iterable[RefusalOutcome]) -> RefusalSummary:
    counts = dict.fromkeys(RefusalOutcome, 0)
    for outcome in outcomes:
        counts[outcome] += 1
    return RefusalSummary(
        correct_refusals=counts[RefusalOutcome.CORRECT_REFUSAL],
        wrong_refusals=counts[RefusalOutcome.WRONG_REFUSAL],
        missed_refusals=counts[RefusalOutcome.MISSED_REFUSAL],
        answered=counts[RefusalOutcome.ANSWERED],
    )
