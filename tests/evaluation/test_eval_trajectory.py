"""Trajectory metrics on hand-computed cases, and tool calls read from span attributes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ragmon import attributes as attr
from ragmon.evaluation.dataset import ExpectedPlan, PlanStep
from ragmon.evaluation.trajectory import (
    SpanRecord,
    ToolCall,
    arguments_match,
    budget_stopped,
    score_plan,
    score_trajectory,
    tool_calls,
)


def step(tool: str, **arguments: Any) -> PlanStep:
    return PlanStep(tool=tool, arguments=arguments or None)


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name, arguments)


def test_exact_plan() -> None:
    score = score_plan(
        [step("search", q="ports"), step("lookup", key="otlp")], [call("search", q="ports"), call("lookup", key="otlp")]
    )
    assert (score.tool_precision, score.tool_recall, score.argument_accuracy) == (1.0, 1.0, 1.0)
    assert score.steps == 2 and score.plan_matched


def test_extra_call_lowers_precision_only() -> None:
    # 3 calls, 2 of them expected: precision 2/3, recall 2/2.
    score = score_plan([step("search"), step("lookup")], [call("search"), call("weather"), call("lookup")])
    assert score.tool_precision == pytest.approx(2 / 3)
    assert score.tool_recall == 1.0
    assert score.unexpected_tools == ("weather",) and not score.plan_matched
    assert score.tool_f1 == pytest.approx(2 * (2 / 3) / (2 / 3 + 1))


def test_missing_call_lowers_recall_only() -> None:
    # 1 call of 4 expected steps (search twice, lookup, calc): precision 1/1, recall 1/4.
    score = score_plan([step("search"), step("search"), step("lookup"), step("calc")], [call("search")])
    assert (score.tool_precision, score.tool_recall) == (1.0, 0.25)
    assert score.missing_tools == ("search", "lookup", "calc")


def test_argument_accuracy_pairs_matching_arguments_first() -> None:
    # Two lookups expected (a, b); calls made with b then c. The b call pairs with the b step (match), c with a
    # (mismatch): accuracy 1/2, whatever the order the calls came in.
    steps = [step("lookup", key="a"), step("lookup", key="b")]
    score = score_plan(steps, [call("lookup", key="b"), call("lookup", key="c")])
    assert (score.tool_precision, score.tool_recall, score.argument_accuracy) == (1.0, 1.0, 0.5)
    assert not score.plan_matched


def test_only_listed_arguments_are_compared() -> None:
    assert arguments_match({"settings": ["a", "b"]}, {"settings": ("a", "b"), "request_id": "r-1"})
    assert not arguments_match({"settings": ["a", "b"]}, {"settings": ["b", "a"]})  # order inside a list counts
    assert arguments_match({"n": 1}, {"n": 1.0}) and not arguments_match({"flag": True}, {"flag": 1})
    assert arguments_match(None, None)  # a step without arguments accepts anything, even uncaptured ones
    assert not arguments_match({"n": 1}, None)  # uncaptured arguments cannot be shown right


def test_empty_plan_and_no_calls() -> None:
    assert score_plan([], []).plan_matched  # nothing expected, nothing done: 1/1
    unexpected = score_plan([], [call("search")])
    assert (unexpected.tool_precision, unexpected.tool_recall) == (0.0, 1.0)
    idle = score_plan([step("search")], [])
    assert (idle.tool_precision, idle.tool_recall, idle.argument_accuracy) == (1.0, 0.0, None)
    assert idle.tool_f1 == 0.0


def test_best_alternative_plan_is_chosen_and_labelled() -> None:
    plan = ExpectedPlan.model_validate(
        {
            "steps": [
                {"tool": "lookup", "arguments": {"key": "otlp_http"}},
                {"tool": "lookup", "arguments": {"key": "otlp_grpc"}},
            ],
            "alternatives": [
                {"label": "docs only", "steps": []},
                {"label": "one lookup", "steps": [{"tool": "lookup", "arguments": {"key": "otlp_http"}}]},
            ],
        }
    )
    single = score_trajectory(plan, [call("lookup", key="otlp_http")])
    # Against the primary plan: recall 1/2 (F1 0.667); "one lookup": 1/1. The alternative wins.
    assert single.plan_label == "one lookup" and single.plan_matched
    assert score_trajectory(plan, []).plan_label == "docs only"
    both = score_trajectory(plan, [call("lookup", key="otlp_grpc"), call("lookup", key="otlp_http")])
    assert both.plan_label == "primary" and both.plan_matched  # order-insensitive


def test_tie_keeps_the_primary_plan() -> None:
    plan = ExpectedPlan.model_validate(
        {"steps": [{"tool": "a"}], "alternatives": [{"label": "same", "steps": [{"tool": "a"}]}]}
    )
    assert score_trajectory(plan, [call("a")]).plan_label == "primary"


def span(name: str, start_ns: int, **attributes: Any) -> SpanRecord:
    return SpanRecord(name=name, start_ns=start_ns, attributes=attributes)


def test_tool_calls_are_read_from_tool_spans_in_start_order() -> None:
    spans = [
        span("request docs-qa", 0, **{attr.RAGMON_STAGE: "request"}),
        span(
            "execute_tool lookup",
            20,
            **{
                attr.GEN_AI_OPERATION_NAME: "execute_tool",
                attr.GEN_AI_TOOL_NAME: "lookup",
                attr.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"key": "b"}),
                attr.RAGMON_TOOL_STATUS: "timeout",
            },
        ),
        span(
            "execute_tool search",
            10,
            **{attr.GEN_AI_OPERATION_NAME: "execute_tool", attr.GEN_AI_TOOL_NAME: "search"},  # arguments not captured
        ),
        span("retrieval", 5, **{attr.GEN_AI_OPERATION_NAME: "retrieval"}),
    ]
    assert tool_calls(spans) == [ToolCall("search", None, True), ToolCall("lookup", {"key": "b"}, False)]


def test_budget_stop_is_read_from_the_stop_reason() -> None:
    finished = [span("request", 0, **{attr.RAGMON_STAGE: "request", attr.RAGMON_AGENT_STOP_REASON: "done"})]
    cut = [span("request", 0, **{attr.RAGMON_STAGE: "request", attr.RAGMON_AGENT_STOP_REASON: "max_steps"})]
    assert not budget_stopped(finished) and budget_stopped(cut) and not budget_stopped([])
    plan = ExpectedPlan(steps=(step("a"),))
    stopped = score_trajectory(plan, [call("a")], budget_stop=budget_stopped(cut))
    assert stopped.budget_stop and not stopped.plan_matched  # right tools, but it did not finish
    assert stopped.metrics()["budget_stop"] == 1.0 and stopped.metrics()["steps"] == 1.0
