"""Value objects every judge and metric shares: statuses, per-claim verdicts, token usage and the metric result.

A result's `value` is None whenever the metric is undefined or the judge failed; the `status` says why. Nothing
here turns a failure into a number: a parse error is never a pass and never a silent 0.0 (GUIDE §3).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Status(StrEnum):
    OK = "ok"
    UNSCORABLE = "unscorable"  # the metric is undefined for this input (no passages, no claims, ...)
    PARSE_ERROR = "parse_error"  # the judge answered, but not in the shape asked for
    LLM_ERROR = "llm_error"  # transport, HTTP or timeout failure after bounded retries
    BUDGET_EXHAUSTED = "budget_exhausted"  # the call would have exceeded the budget, so it was not made
    SKIPPED = "skipped"  # not applicable here (e.g. context recall without a reference answer)


class Verdict(StrEnum):
    SUPPORTED = "supported"
    UNSUPPORTED = "unsupported"
    CONTRADICTED = "contradicted"


class SampleField(StrEnum):
    """A part of a `RagSample` a metric cannot be scored without (`Metric.needs`)."""

    QUESTION = "question"
    ANSWER = "answer"
    PASSAGES = "passages"
    REFERENCE = "reference"


class ClaimVerdict(BaseModel):
    """One atomic claim and what the judge said about it. `flag` marks verdicts that were not a clean answer."""

    model_config = ConfigDict(frozen=True)

    claim: str
    verdict: Verdict
    reason: str = ""
    flag: str = ""  # "" | "unparseable" (the judge's verdict was missing or invalid: counted as unsupported)
    support: float | None = None  # the local judge's evidence in [0, 1]; None for LLM verdicts


class Usage(BaseModel):
    """Tokens and cost of the judge calls behind one result. `cost_usd` None means a price was unknown."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        cost = None if self.cost_usd is None or other.cost_usd is None else self.cost_usd + other.cost_usd
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=cost,
            calls=self.calls + other.calls,
        )


class Turn(BaseModel):
    """An earlier turn of a conversation: what the user asked and what the app answered ('' when not captured)."""

    question: str = ""
    answer: str = ""


class RagSample(BaseModel):
    """What a judge sees of one kept trace: the question, the passages in rank order, the answer."""

    question: str = ""
    answer: str = ""
    passages: list[str] = Field(default_factory=list)
    reference: str | None = None  # a reference answer (offline evaluation only), for context recall
    # What `passages` are: "passages" (retrieved documents), "prompt" (the answering call's prompt messages, for
    # an app traced without a retrieval span) or "" (not said: offline data, older payloads).
    context_source: str = ""
    # The conversation's turns before this one, oldest first (the last few: `ragmon.conversation.EARLIER_TURNS`);
    # the judges read a follow-up in their light (`ragmon.judges.conversation`).
    earlier_turns: list[Turn] = Field(default_factory=list)


class MetricResult(BaseModel):
    """One score: a metric on one sample by one judge. `value` is None unless `status` is ok."""

    metric: str
    value: float | None
    status: Status
    explanation: str = ""
    claims: list[ClaimVerdict] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)  # e.g. "refusal", "noncommittal", "unparseable_verdicts"
    judge_model: str = ""
    prompt_version: str = ""
    usage: Usage = Field(default_factory=Usage)

    @classmethod
    def failed(cls, metric: str, status: Status, explanation: str, usage: Usage | None = None) -> MetricResult:
        return cls(metric=metric, value=None, status=status, explanation=explanation, usage=usage or Usage())
