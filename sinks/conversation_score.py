"""A conversation's own score, from its turns: how many judged turns were faithful, whether the user gave up, and
whether they asked again in other words.

- `faithful_share`: the share of the turns judged for faithfulness whose score is at least `FAITHFUL_AT` (None when
  no turn is judged yet). Unweighted: a conversation is one user's, every turn of it counts once.
- `gave_up`: the conversation has ended (no turn for `ENDED_AFTER_S`) and its last turn failed — an error, a
  refusal or noncommittal answer (the judge's flags), or a faithfulness or answer relevance below `FAITHFUL_AT`.
  None while the conversation may still go on.
- `rephrased`: the turns whose question is nearly the one before (word sets overlapping by `REPHRASED_AT` or more,
  Jaccard): the user asking again because the answer did not help. Only kept turns have a question to compare.

Pure Python over the rows the conversation reads return (`for_conversations.py`), so the rules are tested alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

FAITHFUL_AT: Final = 0.5  # the judges' default faithfulness threshold
ENDED_AFTER_S: Final = 30 * 60
REPHRASED_AT: Final = 0.6
_FAILED_FLAGS: Final = frozenset({"refusal", "noncommittal"})
_WORD = re.compile(r"\w+")


def _value(turn: Mapping[str, Any], metric: str) -> float | None:
    score = (turn.get("scores") or {}).get(metric)
    if not score or score.get("status") != "ok" or score.get("value") is None:
        return None
    return float(score["value"])


def turn_failed(turn: Mapping[str, Any]) -> bool:
    """An error, a refusal or noncommittal answer, a low faithfulness or answer relevance, or users' verdicts on it
    mostly negative (thumbs down, a rating of 1–2: the users said so, whatever the judge thought)."""
    if int(turn.get("errors") or 0) > 0:
        return True
    feedback = turn.get("feedback") or {}
    if feedback.get("verdicts") and int(feedback["negative"]) * 2 >= int(feedback["verdicts"]):
        return True
    scores = (turn.get("scores") or {}).values()
    if any(_FAILED_FLAGS & set(score.get("flags") or ()) for score in scores):
        return True
    low = [_value(turn, m) for m in ("faithfulness", "answer_relevance")]
    return any(v is not None and v < FAITHFUL_AT for v in low)


def similarity(a: str, b: str) -> float:
    """Jaccard overlap of the two questions' lower-cased word sets (0 when either has none)."""
    wa, wb = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / len(wa | wb)


def conversation_score(turns: Sequence[Mapping[str, Any]], now_s: float) -> dict[str, Any]:
    """The score of a conversation whose `turns` are in order (each with `errors`, `scores` by metric — value,
    status, flags —, `question` ('' when not kept) and `start_s`)."""
    judged = [v for v in (_value(t, "faithfulness") for t in turns) if v is not None]
    rephrased = [
        i
        for i in range(1, len(turns))
        if turns[i].get("question")
        and turns[i - 1].get("question")
        and similarity(str(turns[i]["question"]), str(turns[i - 1]["question"])) >= REPHRASED_AT
    ]
    ended = bool(turns) and now_s - float(turns[-1].get("start_s") or 0.0) >= ENDED_AFTER_S
    return {
        "turns": len(turns),
        "judged_turns": len(judged),
        "faithful_share": sum(v >= FAITHFUL_AT for v in judged) / len(judged) if judged else None,
        "failed_turns": sum(turn_failed(t) for t in turns),
        "ended": ended,
        "gave_up": (turn_failed(turns[-1]) if ended else None) if turns else None,
        "rephrased_turns": rephrased,  # indexes (0-based) of the turns that re-asked the question before
    }
