"""What ragmon calls a conversation and a follow-up question: one rule that the judges (Python) and the sampler
(the store's SQL) both apply, so a turn the judge reads in its conversation's light is a turn whose earlier turns the
sampler kept.

A conversation is the traces that share a session: ragmon's `ragmon.session`, else `session.id` (OpenInference and
general OTel), else `gen_ai.conversation.id` (OTel GenAI) — the store reads them in that order
(`ragmon.sinks.dialects`). Its turns are its traces in the order their requests started.

A turn *depends on* earlier ones (a follow-up, such as "and for the annual plan?") when the conversation has earlier
turns and its question is short (at most `FOLLOW_UP_MAX_WORDS` words), opens with a continuation ("and", "what
about", …) or refers back with a pronoun ("it", "that", "those", …). The rule errs towards "yes": a standalone
question read with its earlier turns costs a few hundred tokens; a follow-up read alone is judged wrongly.
For such a turn the judges see the last `EARLIER_TURNS` turns' question and answer, each cut to `TURN_CHARS`
characters (`judges/conversation.py` says how the prompt and the local judge use them).

Pure and dependency-free: the SDK imports it, and it holds nothing of the agent's.
"""

from __future__ import annotations

import re
from typing import Final

# How many earlier turns a judge is shown, and how much of each one's question and answer.
EARLIER_TURNS: Final = 3
TURN_CHARS: Final = 600

# A question this short rarely stands alone in a conversation ("and for the annual plan?" has five words).
FOLLOW_UP_MAX_WORDS: Final = 6
_CONTINUATIONS: Final = ("and", "but", "or", "so", "also", "then", "what about", "how about", "same for")
_BACK_REFERENCES: Final = (
    "it", "its", "it's", "that", "this", "these", "those", "they", "them", "their", "theirs",
    "he", "she", "his", "her", "there", "ones", "same", "former", "latter", "above", "previous",
)  # fmt: skip
# One regex, case-insensitive, valid for Python's `re` and ClickHouse's RE2 alike (`match(lower(q), …)`).
FOLLOW_UP_PATTERN: Final = (
    r"^\s*(" + "|".join(re.escape(w) for w in _CONTINUATIONS) + r")\b"
    r"|\b(" + "|".join(re.escape(w) for w in _BACK_REFERENCES) + r")\b"
)
_FOLLOW_UP = re.compile(FOLLOW_UP_PATTERN)


def is_follow_up(question: str) -> bool:
    """Whether `question`, asked after earlier turns of its conversation, depends on them (see the module)."""
    words = question.split()
    if not words:
        return False
    return len(words) <= FOLLOW_UP_MAX_WORDS or _FOLLOW_UP.search(question.lower()) is not None
