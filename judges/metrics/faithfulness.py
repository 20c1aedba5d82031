"""Faithfulness: the share of an answer's atomic claims that the passages support.

Steps: strip citation markers, ask for the answer's atomic claims (or "refusal"), then one verdict per claim
against the passages — supported, unsupported or contradicted. Score = supported / claims. A refusal asserts
nothing and scores 1.0, flagged "refusal". A verdict that is missing or not one of the three counts as
unsupported and is flagged "unparseable"; a reply that is not the JSON asked for is a parse_error, not a score.

Offline (the local judge), the claims are the answer's sentences and clauses and each gets the local judge's
support model's verdict; the score is graded: the probability that the answer is faithful (judges/local_judge.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from pydantic import BaseModel, Field
from ragmon.judges import text
from ragmon.judges.metrics._common import result, unparseable_flags
from ragmon.judges.prompts import Example, Prompt
from ragmon.judges.protocol import LocalScoring, PlannedCalls, StructuredLLM
from ragmon.judges.types import ClaimVerdict, MetricResult, RagSample, SampleField, Status, Usage, Verdict

PROMPT_VERSION = "faithfulness-v1"


class FaithfulnessInput(BaseModel):
    question: str
    answer: str
    passages: list[str]

    @classmethod
    def of(cls, sample: RagSample) -> FaithfulnessInput:
        return cls(question=sample.question, answer=sample.answer, passages=sample.passages)


class ClaimsOutput(BaseModel):
    refusal: bool = False
    claims: list[str] = Field(default_factory=list)


class RawVerdict(BaseModel):
    # Kept loose on purpose: one bad verdict must not sink the others; each is checked in `_to_verdicts`.
    claim: int | str
    verdict: str
    reason: str = ""


class VerdictsOutput(BaseModel):
    verdicts: list[RawVerdict]


CLAIMS_PROMPT = Prompt(
    name="faithfulness.claims",
    version=PROMPT_VERSION,
    instruction=(
        "Split the answer into atomic claims: short, self-contained statements of fact, each checkable on its "
        "own, with pronouns replaced by what they refer to. Leave out greetings, opinions about the conversation "
        "and citation markers. If the answer declines to answer or only says the information is not available, "
        "set refusal to true and give no claims."
    ),
    output_schema='{"refusal": false, "claims": ["claim", ...]}',
    examples=(
        Example(
            {
                "question": "Who wrote Hamlet and when?",
                "answer": "Hamlet was written by William Shakespeare [1], around 1600, and it is his longest play.",
            },
            {
                "refusal": False,
                "claims": [
                    "Hamlet was written by William Shakespeare.",
                    "Hamlet was written around 1600.",
                    "Hamlet is Shakespeare's longest play.",
                ],
            },
        ),
        Example(
            {
                "question": "What is the warranty period?",
                "answer": "I'm sorry, the documents do not say how long the warranty lasts.",
            },
            {"refusal": True, "claims": []},
        ),
    ),
)

VERDICTS_PROMPT = Prompt(
    name="faithfulness.verdicts",
    version=PROMPT_VERSION,
    instruction=(
        "For each numbered claim, decide from the passages alone: 'supported' if the passages state or directly "
        "imply it, 'contradicted' if they state the opposite, 'unsupported' otherwise (including when it is "
        "plausible but not stated). Give one verdict per claim, by its number, with a one-sentence reason."
    ),
    output_schema='{"verdicts": [{"claim": 0, "verdict": "supported|unsupported|contradicted", "reason": "..."}]}',
    examples=(
        Example(
            {
                "passages": ["The Eiffel Tower, completed in 1889, is 330 metres tall."],
                "claims": [
                    "The Eiffel Tower was completed in 1889.",
                    "The Eiffel Tower is 300 metres tall.",
                    "The Eiffel Tower is the most visited monument.",
                ],
            },
            {
                "verdicts": [
                    {"claim": 0, "verdict": "supported", "reason": "The passage gives 1889."},
                    {"claim": 1, "verdict": "contradicted", "reason": "The passage says 330 metres."},
                    {"claim": 2, "verdict": "unsupported", "reason": "Visitor numbers are not mentioned."},
                ]
            },
        ),
    ),
)


class Faithfulness:
    name: ClassVar[str] = "faithfulness"
    prompt_version: ClassVar[str] = PROMPT_VERSION
    needs: ClassVar[frozenset[SampleField]] = frozenset({SampleField.ANSWER, SampleField.PASSAGES})
    review_labels: ClassVar[tuple[str, str] | None] = ("faithful", "not faithful")

    async def score(self, sample: RagSample, llm: StructuredLLM) -> MetricResult:
        data = FaithfulnessInput.of(sample)
        answer = text.strip_citations(data.answer)
        if not answer:
            return self._result(None, Status.UNSCORABLE, "empty answer", [], [], Usage(), llm.model)
        if not data.passages:
            return self._result(None, Status.UNSCORABLE, "no passages to check against", [], [], Usage(), llm.model)
        step1 = await llm.generate(CLAIMS_PROMPT, {"question": data.question, "answer": answer}, ClaimsOutput)
        if step1.value is None:
            return self._result(None, step1.status, f"claims: {step1.error}", [], [], step1.usage, llm.model)
        claims = [c.strip() for c in step1.value.claims if c.strip()]
        if step1.value.refusal or not claims:
            value, status, flags = self._compute_score([], refusal=step1.value.refusal)
            note = "refusal: the answer asserts nothing" if step1.value.refusal else "no claims in the answer"
            return self._result(value, status, note, [], flags, step1.usage, llm.model)
        step2 = await llm.generate(VERDICTS_PROMPT, {"passages": data.passages, "claims": claims}, VerdictsOutput)
        usage = step1.usage + step2.usage
        if step2.value is None:
            return self._result(None, step2.status, f"verdicts: {step2.error}", [], [], usage, llm.model)
        verdicts = _to_verdicts(claims, step2.value)
        value, status, flags = self._compute_score(verdicts)
        supported = sum(v.verdict is Verdict.SUPPORTED for v in verdicts)
        return self._result(
            value, status, f"{supported} of {len(verdicts)} claims supported", verdicts, flags, usage, llm.model
        )

    def planned_calls(self, sample: RagSample) -> PlannedCalls:
        """Claim extraction, then verdicts on claims about as long as the answer itself."""
        claims = CLAIMS_PROMPT.render({"question": sample.question, "answer": sample.answer})
        verdicts = VERDICTS_PROMPT.render({"passages": sample.passages, "claims": [sample.answer]})
        return PlannedCalls(chats=(claims, verdicts))

    def score_locally(self, sample: RagSample, judge: LocalScoring) -> MetricResult:
        version = f"local-faithfulness-{judge.support_model.version}"
        answer = text.strip_citations(sample.answer)
        if not answer:
            return result(self.name, version, None, Status.UNSCORABLE, "empty answer", model=judge.model)
        if not sample.passages:
            return result(self.name, version, None, Status.UNSCORABLE, "no passages", model=judge.model)
        if text.is_refusal(answer):
            value, status, flags = self._compute_score([], refusal=True)
            return result(
                self.name,
                version,
                value,
                status,
                "refusal: the answer asserts nothing",
                model=judge.model,
                flags=flags,
            )
        claims = judge.claims_of(sample) or [answer]
        verdicts, probability = judge.judge_claims(claims, sample.passages, answer, sample.question)
        _, status, flags = self._compute_score(verdicts)
        supported = sum(v.verdict is Verdict.SUPPORTED for v in verdicts)
        return result(
            self.name,
            version,
            round(probability, 4),  # graded, not the supported share: faithful iff at or above the threshold
            status,
            f"P(faithful) {probability:.2f}; {supported} of {len(verdicts)} claims supported",
            model=judge.model,
            claims=verdicts,
            flags=flags,
        )

    @staticmethod
    def _compute_score(
        verdicts: Sequence[ClaimVerdict], *, refusal: bool = False
    ) -> tuple[float | None, Status, list[str]]:
        """supported / claims. A refusal is 1.0 (flagged); no claims at all is undefined."""
        if refusal:
            return 1.0, Status.OK, ["refusal"]
        if not verdicts:
            return None, Status.UNSCORABLE, []
        flags = unparseable_flags(verdicts)
        supported = sum(v.verdict is Verdict.SUPPORTED for v in verdicts)
        return supported / len(verdicts), Status.OK, flags

    def _result(
        self,
        value: float | None,
        status: Status,
        explanation: str,
        claims: list[ClaimVerdict],
        flags: list[str],
        usage: Usage,
        model: str,
    ) -> MetricResult:
        return MetricResult(
            metric=self.name,
            value=value,
            status=status,
            explanation=explanation,
            claims=claims,
            flags=flags,
            judge_model=model,
            prompt_version=self.prompt_version,
            usage=usage,
        )


def _to_verdicts(claims: Sequence[str], output: VerdictsOutput) -> list[ClaimVerdict]:
    """One verdict per claim, by index; missing, duplicated-away or invalid ones are unsupported and flagged."""
    by_index: dict[int, RawVerdict] = {}
    for entry in output.verdicts:
        try:
            index = int(entry.claim)
        except (TypeError, ValueError):
            continue
        by_index.setdefault(index, entry)
    out = []
    for i, claim in enumerate(claims):
        raw = by_index.get(i)
        try:
            verdict = Verdict(raw.verdict.strip().lower()) if raw is not None else None
        except ValueError:
            verdict = None
        if verdict is None or raw is None:
            reason = "no verdict" if raw is None else f"invalid verdict {raw.verdict!r}"
            out.append(ClaimVerdict(claim=claim, verdict=Verdict.UNSUPPORTED, reason=reason, flag="unparseable"))
        else:
            out.append(ClaimVerdict(claim=claim, verdict=verdict, reason=raw.reason))
    return out
