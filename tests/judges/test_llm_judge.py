"""The LLM judge against a real scripted OpenAI-compatible server on 127.0.0.1: good replies, malformed and
truncated replies, 429 with Retry-After, 500s, timeouts, slow replies, and the budget."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from ragmon.judges.types import RagSample, Status, Verdict

from ragmon.pricing import default_price_table
from ragmon.testing import (
    Completion,
    EmbeddingsReply,
    ErrorReply,
    RawReply,
    ScriptedOpenAIServer,
    TruncatedReply,
    malformed_json,
)
from tests.judges.conftest import JudgeFactory, reply

SAMPLE = RagSample(
    question="When was the Eiffel Tower completed and how tall is it?",
    answer="It was completed in 1889 [1]. It is 300 metres tall.",
    passages=["The Eiffel Tower, completed in 1889, is 330 metres tall."],
)
CLAIMS = {"refusal": False, "claims": ["The Eiffel Tower was completed in 1889.", "The Eiffel Tower is 300 m tall."]}
VERDICTS = {
    "verdicts": [
        {"claim": 0, "verdict": "supported", "reason": "1889"},
        {"claim": 1, "verdict": "contradicted", "reason": "330 m"},
    ]
}
PRICE = default_price_table().lookup("gpt-4o-mini")


def cost(prompt_tokens: int, completion_tokens: int) -> float:
    assert PRICE is not None and PRICE.input_per_1m is not None and PRICE.output_per_1m is not None
    return prompt_tokens * PRICE.input_per_1m / 1e6 + completion_tokens * PRICE.output_per_1m / 1e6


async def test_good_replies_score_with_usage_and_cost(server: ScriptedOpenAIServer, make_judge: JudgeFactory) -> None:
    server.script(
        reply(CLAIMS, prompt_tokens=300, completion_tokens=40), reply(VERDICTS, prompt_tokens=500, completion_tokens=60)
    )
    judge = make_judge()
    result = await judge.score("faithfulness", SAMPLE)
    assert (result.status, result.value) == (Status.OK, 0.5)
    assert [c.verdict for c in result.claims] == [Verdict.SUPPORTED, Verdict.CONTRADICTED]
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.calls) == (800, 100, 2)
    assert result.usage.cost_usd == pytest.approx(cost(800, 100), abs=1e-12)
    assert judge.budget.spent_usd == pytest.approx(cost(800, 100), abs=1e-9)
    assert result.judge_model == "gpt-4o-mini" and result.prompt_version == "faithfulness-v1"
    body = server.requests[0].json
    assert body["response_format"] == {"type": "json_object"} and body["max_tokens"] == 256
    assert "[1]" not in body["messages"][-1]["content"]  # citation markers are stripped before judging
    assert server.handler_errors == []


async def test_malformed_content_gets_one_repair_then_parse_error(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory
) -> None:
    server.script(Completion("Sure! The claims are: 1889"), Completion('{"claims": "not a list"}'))
    result = await make_judge().score("faithfulness", SAMPLE)
    assert (result.status, result.value) == (Status.PARSE_ERROR, None)
    assert len(server.requests) == 2  # the reply and one repair, no more
    assert "not valid" in server.requests[1].json["messages"][-1]["content"]


async def test_a_repair_that_succeeds_scores(server: ScriptedOpenAIServer, make_judge: JudgeFactory) -> None:
    server.script(Completion("```json\n" + '{"claims": [1, 2' + "\n```"), reply(CLAIMS), reply(VERDICTS))
    result = await make_judge().score("faithfulness", SAMPLE)
    assert (result.status, result.value, result.usage.calls) == (Status.OK, 0.5, 3)


async def test_content_truncated_at_max_tokens_is_a_parse_error_without_repair(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory
) -> None:
    server.script(Completion('{"refusal": false, "claims": ["The Eiffel', finish_reason="length"))
    result = await make_judge().score("faithfulness", SAMPLE)
    assert (result.status, result.value) == (Status.PARSE_ERROR, None)
    assert "truncated" in result.explanation and len(server.requests) == 1


async def test_a_body_that_is_not_json_is_a_parse_error_never_a_score(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory
) -> None:
    server.script(malformed_json())
    judge = make_judge()
    result = await judge.score("faithfulness", SAMPLE)
    assert (result.status, result.value) == (Status.PARSE_ERROR, None)
    assert result.usage.cost_usd is not None and result.usage.cost_usd > 0  # usage unknown: worst case charged
    assert judge.budget.spent_usd == pytest.approx(result.usage.cost_usd, abs=1e-9)


async def test_a_truncated_http_body_is_retried(server: ScriptedOpenAIServer, make_judge: JudgeFactory) -> None:
    server.script(TruncatedReply(), reply(CLAIMS), reply(VERDICTS))
    result = await make_judge().score("faithfulness", SAMPLE)
    assert (result.status, result.value) == (Status.OK, 0.5)
    assert len(server.requests) == 3


async def test_429_retry_after_is_honoured(server: ScriptedOpenAIServer, make_judge: JudgeFactory) -> None:
    server.script(ErrorReply(429, retry_after_s=0.3), reply(CLAIMS), reply(VERDICTS))
    result = await make_judge().score("faithfulness", SAMPLE)
    assert result.status is Status.OK
    first, second = server.requests[0], server.requests[1]
    assert second.received_at_s - first.received_at_s >= 0.3  # backoff alone would be ≤ 0.05 s


async def test_500s_are_retried_with_bounded_attempts(server: ScriptedOpenAIServer, make_judge: JudgeFactory) -> None:
    server.script(ErrorReply(500), ErrorReply(503), reply(CLAIMS), reply(VERDICTS))
    judge = make_judge()
    assert (await judge.score("faithfulness", SAMPLE)).status is Status.OK
    server.clear()
    server.default = ErrorReply(500)
    failed = await judge.score("faithfulness", SAMPLE)
    assert (failed.status, failed.value) == (Status.LLM_ERROR, None)
    assert len(server.requests) == 3  # max_attempts
    assert "gave up after 3 attempts" in failed.explanation


async def test_a_400_is_not_retried(server: ScriptedOpenAIServer, make_judge: JudgeFactory) -> None:
    server.script(ErrorReply(400))
    result = await make_judge().score("faithfulness", SAMPLE)
    assert result.status is Status.LLM_ERROR and len(server.requests) == 1


async def test_timeouts_are_bounded_and_end_as_llm_error(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory
) -> None:
    server.default = Completion("{}", delay_s=5.0)
    judge = make_judge(timeout_s=0.2, max_attempts=2)
    started = time.monotonic()
    result = await judge.score("faithfulness", SAMPLE)
    assert (result.status, result.value) == (Status.LLM_ERROR, None)
    assert "timeout" in result.explanation and len(server.requests) == 2
    assert time.monotonic() - started < 2.0
    # A timed-out call may still be billed: its worst case stays charged, and the row says so.
    assert result.usage.cost_usd is not None and result.usage.cost_usd == pytest.approx(judge.budget.spent_usd)


async def test_slow_replies_within_the_timeout_succeed(server: ScriptedOpenAIServer, make_judge: JudgeFactory) -> None:
    server.script(reply(CLAIMS, delay_s=0.3), reply(VERDICTS, delay_s=0.3))
    result = await make_judge(timeout_s=2.0).score("faithfulness", SAMPLE)
    assert (result.status, result.value) == (Status.OK, 0.5)


def billed_reply(body: Any) -> Completion:
    """~4 bytes per prompt token, as real tokenizers give for English, and every allowed output token."""
    prompt_tokens = len(json.dumps(body["messages"]).encode()) // 4
    BILLED.append((prompt_tokens, 256))
    return reply(
        VERDICTS if "verdicts" in body["messages"][0]["content"] else CLAIMS,
        prompt_tokens=prompt_tokens,
        completion_tokens=256,
    )


BILLED: list[tuple[int, int]] = []


async def test_budget_is_never_exceeded_and_refused_calls_are_budget_exhausted(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory
) -> None:
    BILLED.clear()
    server.default = billed_reply
    judge = make_judge(budget_usd=0.01)
    results = [await judge.score("faithfulness", SAMPLE) for _ in range(40)]
    statuses = [r.status for r in results]
    assert Status.BUDGET_EXHAUSTED in statuses and statuses[0] is Status.OK
    assert judge.budget.spent_usd <= 0.01  # not by a single cent, not by a fraction of one
    billed = sum(r.usage.cost_usd or 0.0 for r in results)
    assert billed == pytest.approx(judge.budget.spent_usd, abs=1e-9)
    assert billed == pytest.approx(sum(cost(p, c) for p, c in BILLED), abs=1e-9)  # exact against the script
    assert judge.budget.overruns == 0 and judge.budget.reserved_usd == 0
    # Once refused, every later call is refused too, and none reaches the server.
    first_refused = statuses.index(Status.BUDGET_EXHAUSTED)
    assert all(s is Status.BUDGET_EXHAUSTED for s in statuses[first_refused + 1 :])
    assert len(server.requests) == len(BILLED)
    refused = results[-1]
    assert refused.value is None and "would exceed the budget" in refused.explanation
    # The refusal happened because the next worst case would not fit, not because the money was spent.
    assert 0.01 - judge.budget.spent_usd < 0.001


async def test_a_provider_billing_beyond_the_worst_case_is_counted(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory
) -> None:
    server.default = reply(CLAIMS, prompt_tokens=1_000_000, completion_tokens=1)
    judge = make_judge(budget_usd=1.0)
    await judge.score("faithfulness", SAMPLE)
    assert judge.budget.overruns == len(server.requests) >= 1  # each call billed beyond its reservation


async def test_zero_budget_makes_no_call(server: ScriptedOpenAIServer, make_judge: JudgeFactory) -> None:
    result = await make_judge(budget_usd=0.0).score("faithfulness", SAMPLE)
    assert result.status is Status.BUDGET_EXHAUSTED and server.requests == []


async def test_unknown_model_price_fails_fast(make_judge: JudgeFactory) -> None:
    with pytest.raises(ValueError, match="no input/output price"):
        make_judge(model="no-such-model")


async def test_answer_relevance_uses_generated_questions_and_embeddings(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory
) -> None:
    server.script(
        reply({"noncommittal": False, "questions": ["q1", "q2"]}, prompt_tokens=100, completion_tokens=20),
        EmbeddingsReply(vectors=[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], prompt_tokens=30),
    )
    result = await make_judge().score("answer_relevance", SAMPLE)
    assert (result.status, result.value) == (Status.OK, 0.5)
    assert server.requests[1].path == "/v1/embeddings"
    assert result.prompt_version == "answer-relevance-v1+text-embedding-3-small"
    assert result.usage.input_tokens == 130
    server.script(reply({"noncommittal": True, "questions": []}))
    noncommittal = await make_judge().score("answer_relevance", SAMPLE)
    assert (noncommittal.value, noncommittal.flags) == (0.0, ["noncommittal"])


async def test_context_metrics(server: ScriptedOpenAIServer, make_judge: JudgeFactory) -> None:
    sample = SAMPLE.model_copy(update={"passages": ["a", "b", "c"], "reference": "It opened in 1889. It is tall."})
    server.script(
        reply(
            {
                "verdicts": [
                    {"item": 0, "verdict": "not_useful"},
                    {"item": 1, "verdict": "useful"},
                    {"item": 2, "verdict": "maybe"},
                ]
            }
        ),
        reply(
            {
                "verdicts": [
                    {"item": 0, "verdict": "relevant"},
                    {"item": 1, "verdict": "partly_relevant"},
                    {"item": 2, "verdict": "irrelevant"},
                ]
            }
        ),
        reply({"verdicts": [{"item": 0, "verdict": "attributed"}]}),
    )
    judge = make_judge()
    precision = await judge.score("context_precision", sample)
    assert (precision.value, precision.flags) == (0.5, ["unparseable_verdicts"])
    relevance = await judge.score("context_relevance", sample)
    assert relevance.value == 0.5
    recall = await judge.score("context_recall", sample)
    assert (recall.value, recall.flags) == (0.5, ["unparseable_verdicts"])  # the missing verdict counts as no
    skipped = await judge.score("context_recall", SAMPLE)
    assert skipped.status is Status.SKIPPED and len(server.requests) == 3


async def test_wrong_content_type_is_a_parse_error(server: ScriptedOpenAIServer, make_judge: JudgeFactory) -> None:
    server.script(RawReply(body=b"<html>gateway</html>", content_type="text/html"))
    result = await make_judge().score("faithfulness", SAMPLE)
    assert (result.status, result.value) == (Status.PARSE_ERROR, None)
