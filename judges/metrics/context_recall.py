"""Context recall (offline, needs a reference answer): the share of the reference's statements that the
passages support — did retrieval bring everything a correct answer needs? Skipped without a reference.

Offline (the local judge): each reference statement gets the local judge's support-model verdict, as a claim of
an answer would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from ragmon.judges import text
from ragmon.judges.metrics._common import IndexedVerdicts, read_binary_verdicts, result, unparseable_flags
from ragmon.judges.prompts import Example, Prompt
from ragmon.judges.protocol import LocalScoring, PlannedCalls, StructuredLLM
from ragmon.judges.types import MetricResult, RagSample, SampleField, Status, Verdict

PROMPT_VERSION = "context-recall-v1"

PROMPT = Prompt(
    name="context_recall.verdicts",
    version=PROMPT_VERSION,
    instruction=(
        "For each numbered statement of the reference answer, say whether it can be attributed to the passages: "
        "'attributed' if the passages state it, 'not_attributed' otherwise."
    ),
    output_schema='{"verdicts": [{"item": 0, "verdict": "attributed|not_attributed", "reason": "..."}]}',
    examples=(
        Example(
            {
                "passages": ["Marie Curie won the Nobel Prize in Physics in 1903."],
                "statements": [
                    "Marie Curie won the 1903 Nobel Prize in Physics.",
                    "She won the Nobel Prize in Chemistry in 1911.",
                ],
            },
            {
                "verdicts": [
                    {"item": 0, "verdict": "attributed", "reason": "Stated."},
                    {"item": 1, "verdict": "not_attributed", "reason": "1911 is not mentioned."},
                ]
            },
        ),
    ),
)


class ContextRecall:
    name: ClassVar[str] = "context_recall"
    prompt_version: ClassVar[str] = PROMPT_VERSION
    needs: ClassVar[frozenset[SampleField]] = frozenset({SampleField.PASSAGES, SampleField.REFERENCE})
    # not offered on the review page: whether retrieval missed something needs the whole corpus, not one trace
    review_labels: ClassVar[tuple[str, str] | None] = None

    async def score(self, sample: RagSample, llm: StructuredLLM) -> MetricResult:
        if not sample.reference:
            return result(self.name, PROMPT_VERSION, None, Status.SKIPPED, "no reference answer", model=llm.model)
        statements = text.split_claims(sample.reference)
        if not statements or not sample.passages:
            return result(
                self.name, PROMPT_VERSION, None, Status.UNSCORABLE, "no statements or no passages", model=llm.model
            )
        gen = await llm.generate(PROMPT, {"passages": sample.passages, "statements": statements}, IndexedVerdicts)
        if gen.value is None:
            return result(self.name, PROMPT_VERSION, None, gen.status, gen.error, usage=gen.usage, model=llm.model)
        attributed, verdicts = read_binary_verdicts(statements, gen.value, "attributed", "not_attributed")
        value, status = self._compute_score(attributed)
        return result(
            self.name,
            PROMPT_VERSION,
            value,
            status,
            f"{sum(attributed)} of {len(attributed)} reference statements attributed",
            usage=gen.usage,
            model=llm.model,
            claims=verdicts,
            flags=unparseable_flags(verdicts),
        )

    def planned_calls(self, sample: RagSample) -> PlannedCalls:
        statements = text.split_claims(sample.reference) if sample.reference else []
        if not statements or not sample.passages:
            return PlannedCalls()
        return PlannedCalls(chats=(PROMPT.render({"passages": sample.passages, "statements": statements}),))

    def score_locally(self, sample: RagSample, judge: LocalScoring) -> MetricResult:
        version = f"local-context-recall-{judge.support_model.version}"
        if not sample.reference:
            return result(self.name, version, None, Status.SKIPPED, "no reference answer", model=judge.model)
        statements = text.split_claims(sample.reference)
        if not statements or not sample.passages:
            return result(
                self.name, version, None, Status.UNSCORABLE, "no statements or no passages", model=judge.model
            )
        verdicts, _ = judge.judge_claims(statements, sample.passages)
        value, status = self._compute_score([v.verdict is Verdict.SUPPORTED for v in verdicts])
        return result(
            self.name,
            version,
            value,
            status,
            "lexical support per reference statement",
            model=judge.model,
            claims=verdicts,
        )

    @staticmethod
    def _compute_score(attributed: Sequence[bool]) -> tuple[float | None, Status]:
        if not attributed:
            return None, Status.UNSCORABLE
        return sum(attributed) / len(attributed), Status.OK
