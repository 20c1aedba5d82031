"""Agent trajectories from tool spans: tool precision and recall against an expected plan, argument accuracy,
step count and budget stops.

A trajectory is the tool calls of one trace in start order (`ToolCall`: name, arguments, ok). It is scored against
each acceptable plan of the row (the primary plan and its labelled alternatives, `ragmon.evaluation.dataset`) and
the best match is reported with its label. The rules:

- **Matching.** A call matches an expected step with the same tool name; each step matches at most one call and
  each call at most one step (a multiset match, order-insensitive — a plan says *what* to call; a different but
  valid order is not a failure). Among same-name candidates, calls whose arguments match are paired first, then
  the rest in order.
- **Tool precision** = matched calls / calls made; 1.0 when no call was made (no wrong call). **Tool recall** =
  matched steps / expected steps; 1.0 when the plan has no steps (nothing was missed). So calling nothing when
  the plan says "no tools" scores 1/1, and calling nothing when a call was expected scores precision 1, recall 0.
- **Argument accuracy** = matched pairs whose arguments match / matched pairs; None (undefined) without a matched
  pair. Arguments match when every key the step lists has an equal value in the call (JSON equality; keys the
  step does not list are free, so labellers can leave volatile arguments out); a step without ``arguments``
  accepts any. A call whose arguments were not captured (content capture off) matches only such steps.
- **Best plan**: the highest tool F1, then argument accuracy, then the smallest difference in step count; ties
  go to the plan listed first (the primary).
- **Steps** = tool calls made. **Budget stop**: the trace says it was cut off by a limit — some span carries
  ``ragmon.agent.stop_reason`` with a value in `ragmon.attributes.AGENT_BUDGET_STOPS` (max_steps, budget,
  timeout). An app records it on its request span: ``req.set(**{"ragmon.agent.stop_reason": "max_steps"})``.
- **Plan matched** (the row's trajectory check): precision and recall are both 1, arguments all match (or none
  were compared) and there was no budget stop.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragmon import attributes as attr
from ragmon.evaluation.dataset import ExpectedPlan, PlanStep


@dataclass(frozen=True)
class ToolCall:
    """One tool call from a tool span. ``arguments`` None means they were not captured."""

    name: str
    arguments: Mapping[str, Any] | None = None
    ok: bool = True


@dataclass(frozen=True)
class TrajectoryScore:
    plan_label: str
    tool_precision: float
    tool_recall: float
    argument_accuracy: float | None
    steps: int
    expected_steps: int
    budget_stop: bool
    missing_tools: tuple[str, ...]  # expected steps not matched, by tool name
    unexpected_tools: tuple[str, ...]  # calls not matched, by tool name

    @property
    def tool_f1(self) -> float:
        p, r = self.tool_precision, self.tool_recall
        return 0.0 if p + r == 0 else 2 * p * r / (p + r)

    @property
    def plan_matched(self) -> bool:
        arguments_ok = self.argument_accuracy is None or self.argument_accuracy == 1.0
        return self.tool_precision == 1.0 and self.tool_recall == 1.0 and arguments_ok and not self.budget_stop

    def metrics(self) -> dict[str, float | None]:
        """Metric names as a results file carries them."""
        return {
            "tool_precision": self.tool_precision,
            "tool_recall": self.tool_recall,
            "tool_f1": self.tool_f1,
            "argument_accuracy": self.argument_accuracy,
            "steps": float(self.steps),
            "budget_stop": float(self.budget_stop),
        }


def arguments_match(expected: Mapping[str, Any] | None, actual: Mapping[str, Any] | None) -> bool:
    """Every key the step lists equals the call's value (rules in the module docstring)."""
    if expected is None:
        return True
    if actual is None:
        return False
    return all(key in actual and _json_equal(value, actual[key]) for key, value in expected.items())


def _json_equal(a: Any, b: Any) -> bool:
    # JSON equality: 1 == 1.0, tuples are lists, but True is not 1 (a boolean flag is not a count).
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _match(steps: Sequence[PlanStep], calls: Sequence[ToolCall]) -> tuple[list[tuple[int, int]], set[int], set[int]]:
    """Pairs (step index, call index): same name, argument matches first. Returns pairs and the unmatched."""
    free_calls = set(range(len(calls)))
    free_steps = set(range(len(steps)))
    pairs: list[tuple[int, int]] = []
    for require_arguments in (True, False):
        for s in sorted(free_steps):
            step = steps[s]
            for c in sorted(free_calls):
                call = calls[c]
                if call.name != step.tool:
                    continue
                if require_arguments and not arguments_match(step.arguments, call.arguments):
                    continue
                pairs.append((s, c))
                free_calls.discard(c)
                free_steps.discard(s)
                break
    return pairs, free_steps, free_calls


def score_plan(
    steps: Sequence[PlanStep], calls: Sequence[ToolCall], *, label: str = "primary", budget_stop: bool = False
) -> TrajectoryScore:
    """Score one trajectory against one plan (rules in the module docstring)."""
    pairs, free_steps, free_calls = _match(steps, calls)
    matched = len(pairs)
    precision = matched / len(calls) if calls else 1.0
    recall = matched / len(steps) if steps else 1.0
    argument_accuracy = (
        sum(arguments_match(steps[s].arguments, calls[c].arguments) for s, c in pairs) / matched if matched else None
    )
    return TrajectoryScore(
        plan_label=label,
        tool_precision=precision,
        tool_recall=recall,
        argument_accuracy=argument_accuracy,
        steps=len(calls),
        expected_steps=len(steps),
        budget_stop=budget_stop,
        missing_tools=tuple(steps[s].tool for s in sorted(free_steps)),
        unexpected_tools=tuple(calls[c].name for c in sorted(free_calls)),
    )


def score_trajectory(plan: ExpectedPlan, calls: Sequence[ToolCall], *, budget_stop: bool = False) -> TrajectoryScore:
    """The best match among the plan's labelled alternatives (primary first; ties keep the earlier plan)."""
    best: TrajectoryScore | None = None
    best_key: tuple[float, float, int] | None = None
    for label, steps in plan.labelled():
        score = score_plan(steps, calls, label=label, budget_stop=budget_stop)
        key = (
            score.tool_f1,
            -1.0 if score.argument_accuracy is None else score.argument_accuracy,
            -abs(score.steps - score.expected_steps),
        )
        if best_key is None or key > best_key:
            best, best_key = score, key
    assert best is not None  # labelled() always holds the primary plan
    return best


# -- reading tool calls from spans -------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpanRecord:
    """What trajectory and retrieval extraction need of a span, from the SDK's spans or the store's rows."""

    name: str
    start_ns: int
    attributes: Mapping[str, Any]
    error: bool = False
    trace_id: str = ""

    @property
    def stage(self) -> str:
        return attr.stage_of(self.attributes)


def _parse_arguments(raw: Any) -> Mapping[str, Any] | None:
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        return raw
    try:
        value = json.loads(str(raw))
    except ValueError:
        return {"": raw}  # a non-JSON argument string: only a step without arguments can match it
    return value if isinstance(value, Mapping) else {"": value}


def tool_calls(spans: Iterable[SpanRecord]) -> list[ToolCall]:
    """Tool calls in start order (``gen_ai.tool.name``; arguments from ``gen_ai.tool.call.arguments``)."""
    calls: list[tuple[int, ToolCall]] = []
    for span in spans:
        if span.stage != "tool":
            continue
        name = span.attributes.get(attr.GEN_AI_TOOL_NAME)
        if not name:
            continue
        status = span.attributes.get(attr.RAGMON_TOOL_STATUS)
        ok = not span.error and (status is None or status == "ok")
        arguments = _parse_arguments(span.attributes.get(attr.GEN_AI_TOOL_CALL_ARGUMENTS))
        calls.append((span.start_ns, ToolCall(str(name), arguments, ok)))
    calls.sort(key=lambda item: item[0])
    return [call for _, call in calls]


def budget_stopped(spans: Iterable[SpanRecord]) -> bool:
    """True when some span records a stop reason that is a limit (see the module docstring)."""
    return any(str(s.attributes.get(attr.RAGMON_AGENT_STOP_REASON, "")) in attr.AGENT_BUDGET_STOPS for s in spans)
