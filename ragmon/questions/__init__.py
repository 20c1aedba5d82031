"""Recurring questions: production questions grouped into the questions people keep asking.

A question is normalised (`normalise`), then joins the nearest group of its (tenant, feature) or starts one
(`QuestionGrouper`), compared by an encoder: MiniLM sentence embeddings when the `embeddings` extra is installed,
else lexical vectors (`choose`). Groups keep stable ids across days and restarts. The agent runs this over every
decided trace's question (`ragmon.pipeline`'s question stage); docs/questions.md says how and how well.
"""

from ragmon.questions.encoders import (
    LEXICAL_THRESHOLD,
    MINILM_THRESHOLD,
    Encoder,
    LexicalEncoder,
    MiniLMEncoder,
    choose,
)
from ragmon.questions.groups import MAX_QUESTION_CHARS, Assignment, Group, QuestionGrouper, group_id
from ragmon.questions.normalise import normalise

__all__ = [
    "LEXICAL_THRESHOLD",
    "MAX_QUESTION_CHARS",
    "MINILM_THRESHOLD",
    "Assignment",
    "Encoder",
    "Group",
    "LexicalEncoder",
    "MiniLMEncoder",
    "QuestionGrouper",
    "choose",
    "group_id",
    "normalise",
]
