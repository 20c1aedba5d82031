"""The metric registry states each metric once, and what it states holds for both judges: every metric module is
registered, a metric is not scored without what it `needs` (and costs no call then), and the calls back-evaluation
prices (`planned_calls`) are the calls the LLM judge makes."""

from __future__ import annotations

import json
import pkgutil
from typing import Any

import pytest
from ragmon.judges import metrics as metrics_package
from ragmon.judges.local_judge import LocalJudge
from ragmon.judges.metrics import METRICS, ONLINE_METRICS, REGISTRY
from ragmon.judges.protocol import Metric
from ragmon.judges.types import RagSample, SampleField, Status
from ragmon.judges.worker import DEFAULT_METRICS

from ragmon.testing import Completion, EmbeddingsReply, Reply, ScriptedOpenAIServer
from tests.judges.conftest import JudgeFactory

# Every field filled, nothing a metric could refuse: no citation marker (faithfulness strips those before it asks,
# while its planned calls send the answer as it is), no refusal, a reference of two statements.
FULL = RagSample(
    question="When was the Eiffel Tower completed, and how tall is it?",
    answer="The Eiffel Tower was completed in 1889. It is 330 metres tall.",
    passages=["The Eiffel Tower, completed in 1889, is 330 metres tall.", "Paris hosts many museums."],
    reference="The tower was completed in 1889. It is 330 metres tall.",
)
_EMPTY: dict[SampleField, Any] = {
    SampleField.QUESTION: "",
    SampleField.ANSWER: "",
    SampleField.PASSAGES: [],
    SampleField.REFERENCE: None,
}
NEEDS = [pytest.param(m, field, id=f"{m.name}-without-{field.value}") for m in REGISTRY for field in sorted(m.needs)]


def test_every_metric_module_holds_one_registered_metric() -> None:
    modules = {f"{metrics_package.__name__}.{m.name}" for m in pkgutil.iter_modules(metrics_package.__path__)}
    registered = [type(metric).__module__ for metric in REGISTRY]
    assert sorted(registered) == sorted(m for m in modules if not m.rsplit(".", 1)[1].startswith("_"))


def test_names_are_unique_and_review_labels_are_two_different_words() -> None:
    assert len(METRICS) == len(REGISTRY)
    for metric in REGISTRY:
        assert metric.needs and metric.needs <= set(SampleField), metric.name
        if metric.review_labels is not None:
            yes, no = metric.review_labels
            assert yes.strip() and no.strip() and yes != no, metric.name


def test_the_worker_judges_online_what_a_payload_can_feed() -> None:
    assert (
        DEFAULT_METRICS
        == ONLINE_METRICS
        == ("faithfulness", "answer_relevance", "context_precision", "context_relevance")
    )


@pytest.mark.parametrize(("metric", "field"), NEEDS)
async def test_a_metric_is_not_scored_without_what_it_needs(
    metric: Metric, field: SampleField, make_judge: JudgeFactory, server: ScriptedOpenAIServer
) -> None:
    lacking = FULL.model_copy(update={field.value: _EMPTY[field]})
    offline = await LocalJudge(use_minilm=False).score(metric.name, lacking)
    online = await make_judge().score(metric.name, lacking)
    for result in (offline, online):
        assert result.value is None and result.status in (Status.UNSCORABLE, Status.SKIPPED), result
    assert server.requests == []  # no call made


def _the_prompts_own_example(request: Any) -> Reply:
    """A model that answers every prompt with the prompt's own first example answer (the shape asked for), and
    embeds what it is given."""
    if "input" in request:
        return EmbeddingsReply()
    example = next(m["content"] for m in request["messages"] if m["role"] == "assistant")
    json.loads(example)  # a prompt whose example is not JSON fails here, loudly (server.handler_errors)
    return Completion(example, prompt_tokens=100, completion_tokens=20)


@pytest.mark.parametrize("metric", REGISTRY, ids=[m.name for m in REGISTRY])
async def test_the_calls_priced_are_the_calls_the_llm_judge_makes(
    metric: Metric, make_judge: JudgeFactory, server: ScriptedOpenAIServer
) -> None:
    server.default = _the_prompts_own_example
    planned = metric.planned_calls(FULL)
    result = await make_judge().score(metric.name, FULL)
    assert result.status is Status.OK and result.value is not None, result
    assert server.handler_errors == []
    chats = [r.json["messages"] for r in server.requests if r.path.endswith("/chat/completions")]
    embeddings = [r for r in server.requests if r.path.endswith("/embeddings")]
    assert len(chats) == len(planned.chats) >= 1
    assert chats[0] == planned.chats[0]  # the first call's prompt, byte for byte; later ones depend on the replies
    assert bool(embeddings) == (planned.embedded_bytes > 0)


@pytest.mark.parametrize("metric", REGISTRY, ids=[m.name for m in REGISTRY])
async def test_the_local_judge_scores_a_full_sample(metric: Metric) -> None:
    result = await LocalJudge(use_minilm=False).score(metric.name, FULL)
    assert result.metric == metric.name and result.status is Status.OK and result.value is not None
