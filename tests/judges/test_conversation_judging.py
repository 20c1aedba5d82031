"""Judges see a follow-up's earlier turns: the rule that says what a follow-up is, the LLM judge's prompts carrying
the earlier turns (against a scripted OpenAI-compatible server), the local judge scoring a follow-up against the
question it stands for, and the judge worker's payload source bringing the turns from a real store."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
from ragmon.judges.conversation import TURNS_VERSION, in_context
from ragmon.judges.local_judge import LocalJudge
from ragmon.judges.prompts import EARLIER_TURNS_NOTE
from ragmon.judges.types import RagSample, Status, Turn
from ragmon.sinks import open_store

from ragmon.conversation import EARLIER_TURNS, TURN_CHARS, is_follow_up
from ragmon.pipeline import judge_store
from ragmon.testing import ScriptedOpenAIServer
from tests.judges.conftest import JudgeFactory, reply
from tests.sinks import conversation_turns as ct

EARLIER = [
    Turn(question="Which plans do you sell?", answer="A monthly and an annual plan."),
    Turn(question="How much does the monthly plan cost?", answer="The monthly plan costs 10 dollars."),
]
PASSAGES = ["The monthly plan costs 10 dollars.", "The annual plan costs 99 dollars per year."]
FOLLOW_UP = RagSample(
    question="and for the annual plan?",
    answer="The annual plan costs 99 dollars per year.",
    passages=PASSAGES,
    earlier_turns=EARLIER,
)


@pytest.mark.parametrize(
    ("question", "follows_up"),
    [
        ("and for the annual plan?", True),  # short, and a continuation
        ("What about the enterprise tier, does it include single sign-on for every user?", True),
        ("Does it also work offline when the laptop has no network connection at all?", True),  # "it"
        ("How many vacation days do new employees get in their first year at the company?", True),  # "their"
        ("How many vacation days do new employees get during the first year at the company?", False),
        ("Which regions does the managed service run in today besides Europe?", False),
        ("", False),
    ],
)
def test_what_a_follow_up_is(question: str, follows_up: bool) -> None:
    assert is_follow_up(question) is follows_up


def test_only_a_follow_up_with_earlier_turns_is_read_in_context() -> None:
    judged, turns = in_context(FOLLOW_UP)
    assert judged.question == "How much does the monthly plan cost? and for the annual plan?"
    assert turns == EARLIER
    standalone = FOLLOW_UP.model_copy(update={"question": "Which regions does the service run in besides Europe?"})
    assert in_context(standalone) == (standalone, [])
    assert in_context(FOLLOW_UP.model_copy(update={"earlier_turns": []}))[1] == []
    many = [Turn(question=f"question {i}", answer="x" * (2 * TURN_CHARS)) for i in range(6)]
    _, shown = in_context(FOLLOW_UP.model_copy(update={"earlier_turns": many}))
    assert [t.question for t in shown] == [f"question {i}" for i in range(6 - EARLIER_TURNS, 6)]  # the last three
    assert all(len(t.answer) == TURN_CHARS for t in shown)  # each cut to its budget


CLAIMS = {"refusal": False, "claims": ["The annual plan costs 99 dollars per year."]}
VERDICTS = {"verdicts": [{"claim": 0, "verdict": "supported", "reason": "passage 1"}]}


async def test_the_llm_judges_prompts_carry_a_follow_ups_earlier_turns(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory
) -> None:
    server.script(reply(CLAIMS), reply(VERDICTS))
    result = await make_judge().score("faithfulness", FOLLOW_UP)
    assert (result.status, result.value) == (Status.OK, 1.0)
    assert result.prompt_version == f"faithfulness-v1+{TURNS_VERSION}"
    for request in server.requests:
        messages = request.json["messages"]
        assert EARLIER_TURNS_NOTE in messages[0]["content"]
        last = messages[-1]["content"]
        assert last.startswith("## earlier turns\n[0] Q: Which plans do you sell?\nA: A monthly and an annual plan.")
        assert "[1] Q: How much does the monthly plan cost?\nA: The monthly plan costs 10 dollars." in last
    claims_prompt = server.requests[0].json["messages"][-1]["content"]
    assert "## question\nHow much does the monthly plan cost? and for the annual plan?" in claims_prompt


async def test_a_standalone_question_is_judged_as_before(
    server: ScriptedOpenAIServer, make_judge: JudgeFactory
) -> None:
    server.script(reply(CLAIMS), reply(VERDICTS))
    sample = FOLLOW_UP.model_copy(update={"question": "Which regions does the managed service run in besides Europe?"})
    result = await make_judge().score("faithfulness", sample)
    assert result.prompt_version == "faithfulness-v1"
    for request in server.requests:
        body = json.dumps(request.json)
        assert "earlier turns" not in body and "Which plans do you sell" not in body


def test_the_local_judge_scores_a_follow_up_against_the_question_it_stands_for() -> None:
    judge = LocalJudge(use_minilm=False)
    sample = RagSample(
        question="and how long does that take?",
        answer="A refund reaches your card within 5 business days.",
        passages=["Refunds are paid back to the card within 5 business days."],
        earlier_turns=[Turn(question="How do I get a refund to my card?", answer="Ask for it in the app.")],
    )
    alone = asyncio.run(judge.score("answer_relevance", sample.model_copy(update={"earlier_turns": []})))
    in_turn = asyncio.run(judge.score("answer_relevance", sample))
    assert alone.value is not None and in_turn.value is not None
    assert alone.value < 0.2 < in_turn.value  # read alone the follow-up shares no word with its answer
    assert in_turn.prompt_version.endswith(f"+{TURNS_VERSION}") and TURNS_VERSION not in alone.prompt_version


def test_the_judge_workers_payload_source_brings_the_earlier_turns(chdb_engine_dir: Path) -> None:
    store = open_store(str(chdb_engine_dir), database=f"t_{uuid.uuid4().hex[:12]}")
    try:
        ct.install(store)
        ct.send(
            store,
            [
                ct.turn(0, EARLIER[1].question, EARLIER[1].answer, session="s-1", offset_s=0),
                ct.turn(1, FOLLOW_UP.question, FOLLOW_UP.answer, session="s-1", offset_s=30),
            ],
            seq0=1,
        )
        ct.keep(store, 1)
        source = judge_store.StorePayloadSource(store)
        sample = asyncio.run(source.payload(ct.TENANT, ct.trace_id(1)))
        assert sample is not None and sample.question == FOLLOW_UP.question
        assert sample.earlier_turns == [EARLIER[1]]  # turn 0 was not kept: read from its captured text
    finally:
        store.close()
