"""Context precision: were the useful passages ranked first? Rank-weighted mean of precision@k over the ranks
k that hold a useful passage (Ragas' definition: average precision over the retrieved list).

Per-passage verdicts ("useful" for the answer to the question) also give label-free retrieval metrics for the
search or rerank span that produced the list: P@k, nDCG@k and MRR (`ranking_metrics`).

Offline (the local judge): a passage is useful when it holds most of the reference's (or the answer's, else the
question's) content words. Lexical and uncalibrated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

from ragmon.judges import text
from ragmon.judges.metrics._common import (
    RELEVANT_SHARE,
    IndexedVerdicts,
    read_binary_verdicts,
    result,
    unparseable_flags,
    word_share,
)
from ragmon.judges.prompts import Example, Prompt
from ragmon.judges.protocol import LocalScoring, PlannedCalls, StructuredLLM
from ragmon.judges.types import MetricResult, RagSample, SampleField, Status

PROMPT_VERSION = "context-precision-v1"

PROMPT = Prompt(
    name="context_precision.verdicts",
    version=PROMPT_VERSION,
    instruction=(
        "For each numbered passage, say whether it was useful for arriving at the answer to the question: "
        "'useful' if it contains information the answer relies on or that answers the question, "
        "'not_useful' otherwise."
    ),
    output_schema='{"verdicts": [{"item": 0, "verdict": "useful|not_useful", "reason": "..."}]}',
    examples=(
        Example(
            {
                "question": "When was the Eiffel Tower completed?",
                "answer": "In 1889.",
                "passages": ["Paris hosts many museums.", "The Eiffel Tower was completed in 1889."],
            },
            {
                "verdicts": [
                    {"item": 0, "verdict": "not_useful", "reason": "About museums."},
                    {"item": 1, "verdict": "useful", "reason": "Gives the year."},
                ]
            },
        ),
    ),
)


class ContextPrecision:
    name: ClassVar[str] = "context_precision"
    prompt_version: ClassVar[str] = PROMPT_VERSION
    needs: ClassVar[frozenset[SampleField]] = frozenset({SampleField.PASSAGES})
    review_labels: ClassVar[tuple[str, str] | None] = None  # not offered on the review page, as before

    async def score(self, sample: RagSample, llm: StructuredLLM) -> MetricResult:
        if not sample.passages:
            return result(self.name, PROMPT_VERSION, None, Status.UNSCORABLE, "no passages", model=llm.model)
        gen = await llm.generate(PROMPT, _inputs(sample), IndexedVerdicts)
        if gen.value is None:
            return result(self.name, PROMPT_VERSION, None, gen.status, gen.error, usage=gen.usage, model=llm.model)
        useful, verdicts = read_binary_verdicts(sample.passages, gen.value, "useful", "not_useful")
        value, status = self._compute_score(useful)
        return result(
            self.name,
            PROMPT_VERSION,
            value,
            status,
            f"{sum(useful)} of {len(useful)} passages useful",
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
        version = "local-context-precision-v1"
        if not sample.passages:
            return result(self.name, version, None, Status.UNSCORABLE, "no passages", model=judge.model)
        target = text.content_tokens(sample.reference or sample.answer) or text.content_tokens(sample.question)
        useful = [word_share(target, p) >= RELEVANT_SHARE for p in sample.passages]
        value, status = self._compute_score(useful)
        return result(
            self.name,
            version,
            value,
            status,
            f"{sum(useful)} of {len(useful)} passages hold most of the answer's words (lexical)",
            model=judge.model,
        )

    @staticmethod
    def _compute_score(useful: Sequence[bool]) -> tuple[float | None, Status]:
        """Σ_k precision@k · rel_k / Σ rel_k. No passages: undefined. None useful: 0.0 (a defined, bad ranking)."""
        if not useful:
            return None, Status.UNSCORABLE
        hits, total = 0, 0.0
        for k, relevant in enumerate(useful, start=1):
            if relevant:
                hits += 1
                total += hits / k
        return (total / hits if hits else 0.0), Status.OK


def _inputs(sample: RagSample) -> dict[str, Any]:
    """What the verdicts prompt is given: a reference answer, when there is one, says best what was useful."""
    return {"question": sample.question, "answer": sample.reference or sample.answer, "passages": sample.passages}


def ranking_metrics(relevant: Sequence[bool], k: int = 10) -> dict[str, float | None]:
    """P@k, nDCG@k (binary gains, ideal = all relevant first among the judged list) and MRR, from per-passage
    verdicts in rank order. Undefined (None) for an empty list; nDCG undefined when nothing is relevant."""
    if not relevant:
        return {"precision_at_k": None, "ndcg_at_k": None, "mrr": None}
    top = list(relevant[:k])
    dcg = sum(1.0 / math.log2(i + 2) for i, r in enumerate(top) if r)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(k, sum(relevant))))
    first = next((i for i, r in enumerate(relevant) if r), None)
    return {
        "precision_at_k": sum(top) / k,
        "ndcg_at_k": dcg / ideal if ideal else None,
        "mrr": 1.0 / (first + 1) if first is not None else 0.0,
    }
