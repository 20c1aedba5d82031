"""Conversations read from the store: a session's turns in order with their text when kept, scores, latency and
status, the same conversation from any trace of it, the sessions active lately with their score, a judged turn's
earlier turns (from payloads, else from the captured text), and the earlier turns the sampler copies beside a kept
follow-up — on chDB and through a ClickHouse server's HTTP interface."""

from __future__ import annotations

import pytest
from ragmon.sinks import Store
from ragmon.sinks.named_reads import BadParameter, named_read, run_read

from tests.sinks.conversation_turns import TENANT, install, keep, score, send, trace_id, turn

SESSION = "chat-42"
QUESTIONS = (
    "How much does the monthly plan cost?",
    "and for the annual plan?",
    "Which payment methods do you accept for business customers in Europe?",
)
ANSWERS = ("The monthly plan costs 10 dollars.", "The annual plan costs 99 dollars.", "")


def chat(store: Store) -> None:
    """Three turns of SESSION (the third fails), one turn of another session, one trace with no session."""
    install(store)
    turns = [
        turn(0, QUESTIONS[0], ANSWERS[0], session=SESSION, offset_s=0),
        turn(1, QUESTIONS[1], ANSWERS[1], session=SESSION, offset_s=20, duration_ms=1200.0),
        turn(2, QUESTIONS[2], ANSWERS[2], session=SESSION, offset_s=40, error=True),
        turn(3, "What is the refund window?", "30 days.", session="other", offset_s=10),
        turn(4, "Who are you?", "A bot.", session=None, offset_s=30),
    ]
    send(store, list(reversed(turns)), seq0=1)  # arrival order is not turn order


def test_a_sessions_turns_come_in_order_with_text_scores_latency_and_status(store: Store) -> None:
    chat(store)
    keep(store, 1, 2, reason="error")
    score(store, 1, "faithfulness", 0.25)
    found = store.conversation(session=SESSION)
    assert found["session"] == SESSION
    turns = found["turns"]
    assert [t["trace_id"] for t in turns] == [trace_id(0), trace_id(1), trace_id(2)]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert [t["kept"] for t in turns] == [False, True, True]
    assert [t["question"] for t in turns] == ["", QUESTIONS[1], QUESTIONS[2]]  # text of kept turns only
    assert turns[1]["answer"] == ANSWERS[1] and turns[1]["reasons"] == ["error"]
    assert [t["status"] for t in turns] == ["ok", "ok", "error"]
    assert [t["latency_ms"] for t in turns] == [800.0, 1200.0, 800.0]
    assert turns[1]["scores"]["faithfulness"]["value"] == 0.25 and turns[0]["scores"] == {}
    assert all(t["feedback"] is None for t in turns)  # the slot the users' feedback fills
    assert found["score"]["turns"] == 3 and found["score"]["failed_turns"] == 2  # a low score, an error
    assert found["score"]["judged_turns"] == 1 and found["score"]["faithful_share"] == 0.0


def test_any_trace_of_a_conversation_opens_all_of_it(store: Store) -> None:
    chat(store)
    for n in (0, 1, 2):
        assert [t["trace_id"] for t in store.conversation(trace_id=trace_id(n))["turns"]] == [
            trace_id(0),
            trace_id(1),
            trace_id(2),
        ]
    alone = store.conversation(trace_id=trace_id(4))  # no session: a conversation of one turn
    assert alone["session"] == "" and [t["trace_id"] for t in alone["turns"]] == [trace_id(4)]
    assert store.conversation(trace_id="f" * 32)["turns"] == []
    assert store.conversation(session="nobody")["turns"] == []
    with pytest.raises(ValueError):
        store.conversation(session=SESSION, trace_id=trace_id(0))


def test_a_tenant_reads_only_its_own_conversations(store: Store) -> None:
    chat(store)
    assert store.conversation(session=SESSION, tenant="someone-else")["turns"] == []
    assert len(store.conversation(session=SESSION, tenant=TENANT)["turns"]) == 3
    assert store.conversations(3600, 10, tenant="someone-else") == []


def test_recent_conversations_are_listed_with_their_score(store: Store) -> None:
    chat(store)
    listed = store.conversations(3600, 10)
    assert [(c["session"], c["turns"]) for c in listed] == [(SESSION, 3), ("other", 1)]  # latest activity first
    assert listed[0]["first_trace"] == trace_id(0)
    assert listed[0]["score"]["failed_turns"] == 1  # the error
    assert store.conversations(3600, 1)[0]["session"] == SESSION


def test_the_named_reads_take_a_session_or_a_trace_and_answer_plain_json(store: Store) -> None:
    chat(store)
    read = named_read("conversation")
    by_trace = run_read(store, "conversation", read.parse({"trace_id": [trace_id(1)]}))
    by_session = run_read(store, "conversation", read.check({"conversation": {"session": SESSION}}))
    assert by_trace == by_session and len(by_trace["turns"]) == 3
    assert isinstance(by_trace["turns"][0]["started"], str)  # ISO text, as the agent sends it
    for bad in ({}, {"session": ["a"], "trace_id": [trace_id(1)]}, {"trace_id": ["NOT-HEX"]}):
        with pytest.raises(BadParameter):
            read.parse(bad)
    listed = run_read(store, "conversations", named_read("conversations").parse({"since_s": ["3600"]}))
    assert [c["session"] for c in listed] == [SESSION, "other"]


def test_a_judged_turn_gets_its_earlier_turns_from_payloads_else_captured_text(store: Store) -> None:
    chat(store)
    keep(store, 0)
    keep(store, 2, 4)
    found = store.payloads_for_judging(TENANT, [trace_id(2), trace_id(4)])
    assert found[trace_id(2)]["earlier_turns"] == [  # oldest first: turn 1 was kept, turn 2 read from span_content
        {"question": QUESTIONS[0], "answer": ANSWERS[0]},
        {"question": QUESTIONS[1], "answer": ANSWERS[1]},
    ]
    assert found[trace_id(4)]["earlier_turns"] == []  # no session
    assert store.payloads_for_judging("someone-else", [trace_id(2)]) == {}


def test_a_kept_follow_up_keeps_its_earlier_turns_as_context(store: Store) -> None:
    chat(store)
    keep(store, 2)  # a standalone question: no earlier turn is copied for it
    assert store.copy_conversation_turns([{"tenant": TENANT, "trace_id": trace_id(2)}]) == 0
    keep(store, 1, 3)  # turn 2 of SESSION is a follow-up; "other"'s only turn has nothing before it
    kept = [{"tenant": TENANT, "trace_id": trace_id(n)} for n in (1, 3)]
    assert store.copy_conversation_turns(kept) == 1  # turn 1, beside the follow-up
    db = store.topology.database
    rows = store.query(
        f"SELECT trace_id, question, sampling_reasons, inclusion_probability FROM {db}.payloads FINAL ORDER BY trace_id"
    )
    assert [(r["trace_id"], r["sampling_reasons"], r["inclusion_probability"]) for r in rows] == [
        (trace_id(0), ["conversation"], 1.0),
        (trace_id(1), ["baseline"], 0.5),
        (trace_id(2), ["baseline"], 0.5),
        (trace_id(3), ["baseline"], 0.5),
    ]
    assert rows[0]["question"] == QUESTIONS[0]
    assert store.copy_conversation_turns(kept) == 0  # copied once; a turn kept on its own is never re-copied
    unjudged = {row["trace_id"] for row in store.unjudged_payloads(since_s=3600)}
    assert trace_id(0) not in unjudged and trace_id(1) in unjudged  # context is never judged


def test_a_turns_feedback_shows_beside_it_and_a_thumbs_down_fails_the_turn(store: Store) -> None:
    from datetime import UTC, datetime

    chat(store)
    keep(store, 0, 1)
    score(store, 0, "faithfulness", 0.9)  # the judge passed turn 1 ...
    now = datetime.now(UTC)

    def vote(n: int, kind: str, value: float, voter: str, comment: str = "") -> dict[str, object]:
        negative = (kind == "thumbs" and value == 0) or (kind == "rating" and value <= 2)
        return {
            "tenant": TENANT,
            "trace_id": trace_id(n),
            "request_id": "",
            "name": kind,
            "kind": kind,
            "value": value,
            "negative": negative,
            "voter": voter,
            "user": voter,
            "comment": comment,
            "given_at": now,
            "received_at": now,
        }

    store.insert_feedback(
        [
            vote(0, "thumbs", 0.0, "u1", "wrong plan price"),  # ... its user did not
            vote(1, "thumbs", 1.0, "u1"),
            vote(1, "rating", 4.0, "u2"),
            vote(3, "thumbs", 0.0, "u9"),  # another conversation's turn
        ]
    )
    turns = store.conversation(session=SESSION)["turns"]
    first, second, third = (t["feedback"] for t in turns)
    assert first is not None and (first["thumbs_down"], first["negative"], first["comment"]) == (
        1,
        1,
        "wrong plan price",
    )
    assert second is not None and (second["thumbs_up"], second["ratings"], second["mean_rating"]) == (1, 1, 4.0)
    assert second["negative"] == 0 and third is None
    score_ = store.conversation(session=SESSION)["score"]
    # turn 1 failed by its users' verdict (the judge passed it), turn 3 by its error; turn 2 was liked
    assert score_["failed_turns"] == 2
