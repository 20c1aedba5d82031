"""Chat app 1 of the end-to-end test: a help chat built on ragmon's SDK. Each conversation of `chat_script` is a
session; each turn one request (retrieve, then answer) with the app's own request id; then the app's backend
sends its users' feedback with `ragmon.feedback`, by trace id or by request id, and one user changes her vote.

    python -m tests.e2e.apps.sdk_chat_app ENDPOINT API_KEY RESULTS_JSON

RESULTS_JSON gets, per session, its turns' trace ids in order (what the test checks ragmon's reads against).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import ragmon
from tests.e2e.apps import chat_script as script


def answer(conversation: script.Conversation, index: int) -> str:
    """One turn: a request span with the session, user and request id; retrieval; the scripted answer."""
    turn = conversation.turns[index]
    with ragmon.request(
        script.SDK_FEATURE,
        user=conversation.user,
        session=conversation.session,
        request_id=conversation.request_id(index + 1),
        question=turn.question,
    ) as req:
        with ragmon.search(top_k=script.RETRIEVE_TOP_K, data_source="help-pages") as search:
            passages = script.retrieve(script.search_query(conversation.turns, index))
            search.record(documents=passages)
        if turn.source not in [doc_id for doc_id, _, _ in passages]:
            raise SystemExit(f"retrieval missed {turn.source} for {turn.question!r}: {passages}")
        with ragmon.generate(script.CHAT_MODEL, provider="openai") as generate:
            generate.record(input_tokens=220 + 30 * index, output_tokens=14, answer=turn.answer, finish_reason="stop")
        req.record(answer=turn.answer)
        if req.trace_id is None:
            raise SystemExit("the SDK is not configured: no trace id")
        return req.trace_id


def send(vote: script.Vote, traces: dict[str, list[str]]) -> None:
    conversation = script.conversation(vote.session)
    target = (
        {"trace_id": traces[vote.session][vote.turn - 1]}
        if vote.by == "trace"
        else {"request_id": conversation.request_id(vote.turn)}
    )
    value = {"thumbs": vote.thumbs} if vote.thumbs is not None else {"rating": vote.rating}
    if not ragmon.feedback(**target, **value, comment=vote.comment, user=vote.user):  # type: ignore[arg-type]
        raise SystemExit(f"ragmon.feedback refused {vote}")


def main(endpoint: str, api_key: str, results: Path) -> int:
    ragmon.configure(
        service_name="notes-help-chat",
        release=script.SDK_RELEASE,
        endpoint=endpoint,
        api_key=api_key,
        capture_content=True,
    )
    traces: dict[str, list[str]] = {}
    for conversation in script.SDK_CONVERSATIONS:
        traces[conversation.session] = [answer(conversation, i) for i in range(len(conversation.turns))]
    for vote in script.FIRST_VOTES:
        send(vote, traces)
    if not ragmon.feedback(**script.UNMATCHED_VOTE):  # type: ignore[arg-type]
        raise SystemExit("ragmon.feedback refused the unmatched vote")
    ragmon.force_flush(30.0)
    # Later, a user changes her mind. Feedback's time is the SDK's clock to the millisecond and the latest value
    # wins: step past the first vote's millisecond so "later" is unambiguous.
    time.sleep(0.05)
    for vote in script.CHANGED_VOTES:
        send(vote, traces)
    ragmon.force_flush(30.0)
    stats = ragmon.stats()  # what the SDK sent and dropped, for the test's failure messages
    ragmon.shutdown(30.0)
    results.write_text(json.dumps({"traces": traces, "stats": stats}, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
