"""What a back-evaluation will cost before it starts: judge tokens × the judge model's price.

For the LLM judge each metric's calls are rendered with the trace's own text, using the metrics' own prompts
(`ragmon.judges.metrics`), so the estimate grows with long passages exactly as the bill does:

- faithfulness: claim extraction (question, answer) + verdicts (passages, claims ≈ the answer);
- answer relevance: question generation (answer) + one embedding call (the question and ~3 generated ones);
- context precision, context relevance: one call each (question, answer, passages);
- context recall: skipped without a reference answer (payloads have none), so nothing.

Prompt tokens are estimated as UTF-8 bytes / 4 (English BPE averages about four bytes a token) and each call's
reply as `EXPECTED_REPLY_TOKENS`. The **worst case** is what the judge's budget reserves per call (every byte a
token, every reply ``max_tokens`` long), so a run whose worst case fits the budget cannot be stopped by it. The
local judge is offline and costs 0; other judges' cost is unknown (None).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragmon.evaluation.backeval_source import KeptTrace
from ragmon.judges.metrics import answer_relevance, context_precision, context_relevance, faithfulness
from ragmon.pricing import load_price_table

BYTES_PER_TOKEN = 4.0
EXPECTED_REPLY_TOKENS = 200
_GENERATED_QUESTIONS = 3


@dataclass(frozen=True)
class CostEstimate:
    traces: int
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float | None = 0.0
    worst_case_usd: float | None = 0.0
    model: str = ""

    def describe(self) -> str:
        if self.usd is None:
            return f"{self.traces} traces; cost unknown for this judge (no price model)"
        if self.calls == 0:
            return f"{self.traces} traces; judge cost $0 (offline judge, no paid calls)"
        return (
            f"{self.traces} traces, ~{self.calls} judge calls to {self.model}: ~{self.input_tokens:,} input + "
            f"~{self.output_tokens:,} output tokens ≈ ${self.usd:.4f} (worst case ${self.worst_case_usd:.4f})"
        )


def _message_bytes(messages: Sequence[Mapping[str, str]]) -> int:
    return sum(len(m.get("content", "").encode()) for m in messages)


def _llm_calls(metric: str, trace: KeptTrace) -> tuple[list[int], int]:
    """(prompt bytes per chat call, embedding input bytes) of one metric on one trace."""
    passages = list(trace.passages)
    if metric == "faithfulness":
        claims = faithfulness.CLAIMS_PROMPT.render({"question": trace.question, "answer": trace.answer})
        verdicts = faithfulness.VERDICTS_PROMPT.render({"passages": passages, "claims": [trace.answer]})
        return [_message_bytes(claims), _message_bytes(verdicts)], 0
    if metric == "answer_relevance":
        generated = answer_relevance.PROMPT.render({"answer": trace.answer})
        embedded = len(trace.question.encode()) * (1 + _GENERATED_QUESTIONS)
        return [_message_bytes(generated)], embedded
    if metric in ("context_precision", "context_relevance") and not passages:
        return [], 0  # unscorable without passages: no call is made
    if metric == "context_precision":
        inputs = {"question": trace.question, "answer": trace.answer, "passages": passages}
        return [_message_bytes(context_precision.PROMPT.render(inputs))], 0
    if metric == "context_relevance":
        inputs_r = {"question": trace.question, "passages": passages}
        return [_message_bytes(context_relevance.PROMPT.render(inputs_r))], 0
    return [], 0  # context_recall without a reference answer, unknown metrics: skipped by the judge


def estimate_cost(traces: Iterable[KeptTrace], metrics: Sequence[str], judge: Any) -> CostEstimate:
    """The estimate for ``judge`` (an `ragmon.judges.llm_judge.LLMJudge`, the local judge, or another)."""
    chosen = list(traces)
    name = str(getattr(judge, "name", ""))
    if name == "local":
        return CostEstimate(traces=len(chosen))
    config = getattr(judge, "config", None)
    if name != "llm" or config is None:
        return CostEstimate(traces=len(chosen), usd=None, worst_case_usd=None)
    prices = load_price_table(config.price_file)
    chat_bytes: list[int] = []
    embed_bytes = 0
    for trace in chosen:
        for metric in metrics:
            calls, embedded = _llm_calls(metric, trace)
            chat_bytes.extend(calls)
            embed_bytes += embedded
    input_tokens = round(sum(chat_bytes) / BYTES_PER_TOKEN)
    output_tokens = EXPECTED_REPLY_TOKENS * len(chat_bytes)
    usd = prices.cost_usd(config.model, input_tokens, output_tokens)
    worst = prices.cost_usd(config.model, sum(chat_bytes), config.max_tokens * len(chat_bytes))
    embedding_usd = prices.cost_usd(config.embedding_model, round(embed_bytes / BYTES_PER_TOKEN), 0)
    embedding_worst = prices.cost_usd(config.embedding_model, embed_bytes, 0)
    if embed_bytes and (embedding_usd is None or embedding_worst is None):
        usd = worst = None  # an unpriced embedding model: say "unknown" rather than understate
    return CostEstimate(
        traces=len(chosen),
        calls=len(chat_bytes),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        usd=None if usd is None else usd + (embedding_usd or 0.0),
        worst_case_usd=None if worst is None else worst + (embedding_worst or 0.0),
        model=str(config.model),
    )
