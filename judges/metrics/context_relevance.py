"""Context relevance (the TruLens RAG triad's first leg): how much of what was retrieved bears on the question.
Per-passage verdict relevant / partly relevant / irrelevant (1, 0.5, 0), averaged over passages.

Offline (the local judge): a passage's grade follows the share of the question's content words it holds. Lexical
and uncalibrated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from ragmon.judges import text
from ragmon.judges.metrics._common import (
    RELEVANT_SHARE,
    IndexedVerdict,
    IndexedVerdicts,
    result,
    unparseable_flags,
    word_share,
)
from ragmon.judges.prompts import Example, Prompt
from ragmon.judges.protocol import LocalScoring, PlannedCalls, StructuredLLM
from ragmon.judges.types import ClaimVerdict, MetricResult, RagSample, SampleField, Status, Verdict

PROMPT_VERSION = "context-relevance-v1"
GRADES = {"relevant": 1.0, "partly_relevant": 0.5, "irrelevant": 0.0}
PARTLY_RELEVANT_SHARE = 0.2  # offline: below RELEVANT_SHARE of the question's words, at least this is partly relevant

PROMPT = Prompt(
    name="context_relevance.verdicts",
    version=PROMPT_VERSION,
    instruction=(
        "For each numbered passage, grade how relevant it is to the question: 'relevant' if it helps answer it, "
        "'partly_relevant' if it is on the topic but does not help answer it, 'irrelevant' otherwise."
    ),
    output_schema='{"verdicts": [{"item": 0, "verdict": "relevant|partly_relevant|irrelevant", "reason": "..."}]}',
    examples=(
        Example(
            {
                "question": "How tall is the Eiffel Tower?",
                "passages": [
                    "The Eiffel Tower is 330 metres tall.",
                    "The Eiffel Tower opened in 1889.",
                    "Bananas are rich in potassium.",
                ],
            },
            {
                "verdicts": [
                    {"item": 0, "verdict": "relevant", "reason": "Gives the height."},
                    {"item": 1, "verdict": "partly_relevant", "reason": "Same tower, not the height."},
                    {"item": 2, "verdict": "irrelevant", "reason": "Unrelated."},
                ]
            },
        ),
    ),
)


class ContextRelevance:
    name: ClassVar[str] = "context_relevance"
    prompt_version: ClassVar[str] = PROMPT_VERSION
    needs: ClassVar[frozenset[SampleField]] = frozenset({SampleField.PASSAGES})
    review_labels: ClassVar[tuple[str, str] | None] = ("passages relevant", "passages not relevant")

    async def score(self, sample: RagSample, llm: StructuredLLM) -> MetricResult:
        if not sample.passages:
            return result(self.name, PROMPT_VERSION, None, Status.UNSCORABLE, "no passages", model=llm.model)
        gen = await llm.generate(PROMPT, _inputs(sample), IndexedVerdicts)
        if gen.value is None:
            return result(self.name, PROMPT_VERSION, None, gen.status, gen.error, usage=gen.usage, model=llm.model)
        by_index: dict[int, IndexedVerdict] = {}
        for entry in gen.value.verdicts:
            try:
                by_index.setdefault(int(entry.item), entry)
            except (TypeError, ValueError):
                continue
        grades: list[float] = []
        verdicts = []
        for i, passage in enumerate(sample.passages):
            raw = by_index.get(i)
            word = raw.verdict.strip().lower() if raw is not None else ""
            grade = GRADES.get(word)
            grades.append(grade if grade is not None else 0.0)  # unparseable: not shown relevant
            verdicts.append(
                ClaimVerdict(
                    claim=passage[:500],
                    verdict=Verdict.SUPPORTED if grade else Verdict.UNSUPPORTED,
                    reason=raw.reason if raw is not None else "no verdict",
                    flag="" if grade is not None else "unparseable",
                )
            )
        value, status = self._compute_score(grades)
        return result(
            self.name,
            PROMPT_VERSION,
            value,
            status,
            f"mean grade over {len(grades)} passages",
            usage=gen.usage,
            model=llm.model,
            claims=verdicts,
            flags=unparseable_flags(verdicts),
        )

    def planned_calls(self, sample: RagSample) -> PlannedCalls:
        if not sample.passages:
            return PlannedCalls()
        return PlannedCalls(chats=(PROMPT.render(_inputs(sample)),))

    def score_locally(self, sample: RagSample, judge: LocalScoring) -> MetricResult:
        version = "local-context-relevance-v1"
        question = text.content_tokens(sample.question)
        if not sample.passages or not question:
            return result(
                self.name, version, None, Status.UNSCORABLE, "no passages or empty question", model=judge.model
            )
        grades = []
        verdicts = []
        for passage in sample.passages:
            share = word_share(question, passage)
            grade = 1.0 if share >= RELEVANT_SHARE else 0.5 if share >= PARTLY_RELEVANT_SHARE else 0.0
            grades.append(grade)
            verdicts.append(
                ClaimVerdict(
                    claim=passage[:500],
                    verdict=Verdict.SUPPORTED if grade else Verdict.UNSUPPORTED,
                    reason=f"question words in passage {share:.2f}",
                    support=round(share, 4),
                )
            )
        value, status = self._compute_score(grades)
        return result(self.name, version, value, status, "lexical, uncalibrated", model=judge.model, claims=verdicts)

    @staticmethod
    def _compute_score(grades: Sequence[float]) -> tuple[float | None, Status]:
        if not grades:
            return None, Status.UNSCORABLE
        return sum(grades) / len(grades), Status.OK


def _inputs(sample: RagSample) -> dict[str, Any]:
    return {"question": sample.question, "passages": sample.passages}
