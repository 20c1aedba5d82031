"""How the judges read a turn of a conversation (`ragmon.conversation` says what a follow-up is).

A follow-up ("and for the annual plan?") is judged against the question it stands for: the turn before it and this
one. For a sample that has earlier turns and whose question is a follow-up, `in_context` gives

- the *resolved question*: the previous turn's question and this one, joined ("How much does the monthly plan cost?
  and for the annual plan?"). Every metric reads it where it reads the question: the local judge's answer relevance
  (cosine of question and answer) and context relevance / precision (the question's words in the passages), the LLM
  judge's claim extraction and passage grading, and answer relevance's question embedding;
- the *earlier turns* shown: the last `EARLIER_TURNS` (3) turns' question and answer, each cut to `TURN_CHARS`
  (600) characters — at most about 3.6 kB more prompt. The LLM judge's prompts carry them as an `earlier turns`
  section before the inputs, with a sentence in the instruction saying they are context only: the answer is still
  checked against the passages alone (`ragmon.judges.prompts.Prompt.render`).

A score judged in context records the prompt version with `+turns-v1` (`with_turns`), so the data says which scores
saw earlier turns. A question that is not a follow-up, or has no earlier turns, is judged exactly as before.
"""

from __future__ import annotations

from typing import Final

from ragmon.judges.types import RagSample, Turn

from ragmon.conversation import EARLIER_TURNS, TURN_CHARS, is_follow_up

TURNS_VERSION: Final = "turns-v1"


def _cut(text: str) -> str:
    return text if len(text) <= TURN_CHARS else text[: TURN_CHARS - 1] + "…"


def in_context(sample: RagSample) -> tuple[RagSample, list[Turn]]:
    """(the sample with its question resolved, the earlier turns to show) for a follow-up; (sample, []) else."""
    if not sample.earlier_turns or not is_follow_up(sample.question):
        return sample, []
    shown = [Turn(question=_cut(t.question), answer=_cut(t.answer)) for t in sample.earlier_turns[-EARLIER_TURNS:]]
    previous = next((t.question for t in reversed(shown) if t.question.strip()), "")
    if not previous:  # the earlier turns' text was not captured: nothing to resolve the question with
        return sample, []
    return sample.model_copy(update={"question": f"{previous} {sample.question}"}), shown


def with_turns(prompt_version: str) -> str:
    """The prompt version of a score judged with earlier turns."""
    return f"{prompt_version}+{TURNS_VERSION}"
