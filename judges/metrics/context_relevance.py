"""Context relevance (the TruLens RAG triad's first leg): how much of what was retrieved bears on the question.
Per-passage verdict relevant / partly relevant / irrelevant (1, 0.5, 0), averaged over passages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from ragmon.judges.metrics._common import IndexedVerdict, IndexedVerdicts, result, unparseable_flags
from ragmon.judges.prompts import Example, Prompt
from ragmon.judges.protocol import StructuredLLM
from ragmon.judges.types import ClaimVerdict, MetricResult, RagSample, Status, Verdict

PROMPT_VERSION = "context-relevance-v1"
GRADES = {"relevant": 1.0, "partly_relevant": 0.5, "irrelevant": 0.0}

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

    async def score(self, sample: RagSample, llm: StructuredLLM) -> MetricResult:
        if not sample.passages:
            return result(self.name, PROMPT_VERSION, None, Status.UNSCORABLE, "no passages", model=llm.model)
        gen = await llm.generate(PROMPT, {"question": sample.question, "passages": sample.passages}, IndexedVerdicts)
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

    @staticmethod
    def _compute_score(grades: Sequence[float]) -> tuple[float | None, Status]:
        if not grades:
            return None, Status.UNSCORABLE
        return sum(grades) / len(grades), Status.OK
