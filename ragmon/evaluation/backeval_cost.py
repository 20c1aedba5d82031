"""What a back-evaluation will cost before it starts: judge tokens × the judge model's price.

For the LLM judge each metric says which calls it makes on a trace (`Metric.planned_calls` in
`ragmon.judges.metrics`), rendered with the trace's own text from the metric's own prompts, so the estimate grows
with long passages exactly as the bill does. For instance faithfulness is claim extraction (question, answer) +
verdicts (passages, claims ≈ the answer); context recall makes no call without a reference answer (payloads have
none).

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
from ragmon.judges.metrics import METRICS
from ragmon.judges.protocol import PlannedCalls
from ragmon.judges.types import RagSample
from ragmon.pricing import load_price_table

BYTES_PER_TOKEN = 4.0
EXPECTED_REPLY_TOKENS = 200


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


def _planned_calls(metric: str, trace: KeptTrace) -> PlannedCalls:
    """The LLM judge's calls for one metric on one trace; none for a metric it does not know (it would refuse it)."""
    definition = METRICS.get(metric)
    if definition is None:
        return PlannedCalls()
    return definition.planned_calls(
        RagSample(question=trace.question, answer=trace.answer, passages=list(trace.passages))
    )


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
            planned = _planned_calls(metric, trace)
            chat_bytes.extend(_message_bytes(messages) for messages in planned.chats)
            embed_bytes += planned.embedded_bytes
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
