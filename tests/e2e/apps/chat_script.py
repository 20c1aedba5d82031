"""What the end-to-end chat test sends, stated once: a tiny corpus (the help pages of "Lumen Notes"), the
conversations of the two chat apps with each turn's scripted answer, and every piece of feedback the users give.

The test computes what ragmon must show from these tables alone (`expected_*`), so a figure in the report, the
conversation view or `ragmon calibrate` is checked against what was sent, never against what ragmon itself read.

Imported by the apps (subprocesses) and by the test: the standard library and `ragmon.testing` only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ragmon.testing import Completion, Reply

CHAT_MODEL = "gpt-4o-mini"  # in ragmon/data/prices.json
SDK_FEATURE = "notes-chat"
SDK_RELEASE = "2.4.0"
TP_RELEASE = "tp-1.0"
RETRIEVE_TOP_K = 2

DOCUMENTS: tuple[tuple[str, str], ...] = (
    ("plans.md", "The monthly plan costs 12 dollars per month. The annual plan costs 120 dollars per year."),
    (
        "refunds.md",
        "You can get a refund on an annual plan within 30 days of purchase. Monthly plans are not refunded.",
    ),
    (
        "devices.md",
        "Lumen Notes runs on Windows, macOS, iOS and Android phones. Tablets running iPadOS 16 or Android 12 are"
        " supported.",
    ),
    (
        "export.md",
        "You can export all your notes as Markdown from Settings, Export. An export of up to ten thousand notes"
        " takes about two minutes.",
    ),
    (
        "accounts.md",
        "Deleting your account removes every note within seven days. One account can be signed in on up to five"
        " devices at once.",
    ),
    (
        "family.md",
        "The family plan covers six accounts, each on up to five devices. Cancelling keeps your notes readable for"
        " ninety days.",
    ),
)


@dataclass(frozen=True)
class Turn:
    question: str
    answer: str
    faithful: bool  # the answer is a sentence of the retrieved passages (else it claims what no page says)
    source: str  # the page that answers it: retrieval must bring it

    @property
    def follow_up(self) -> bool:
        """The script's follow-ups open with "and" or "what about" (and are short): ragmon's judge must read them
        with the turn before (`ragmon.conversation`); its other questions stand alone."""
        return self.question.lower().startswith(("and ", "what about "))


@dataclass(frozen=True)
class Conversation:
    session: str
    user: str
    turns: tuple[Turn, ...]

    def request_id(self, turn: int) -> str:
        """The app's own id of a turn's request (`ragmon.request(..., request_id=...)`); turns count from 1."""
        return f"{self.session}-turn-{turn}"


# Chat app 1: ragmon's SDK. Follow-ups ("and for the annual plan?") depend on the turn before them.
SDK_CONVERSATIONS: tuple[Conversation, ...] = (
    Conversation(
        "sdk-chat-ana",
        "u-ana",
        (
            Turn(
                "How much does the monthly plan cost?",
                "The monthly plan costs 12 dollars per month.",
                True,
                "plans.md",
            ),
            Turn("and for the annual plan?", "The annual plan costs 120 dollars per year.", True, "plans.md"),
            Turn(
                "Can I get a refund on the annual plan?",
                "You can get a refund on an annual plan within 30 days of purchase.",
                True,
                "refunds.md",
            ),
        ),
    ),
    Conversation(
        "sdk-chat-ben",
        "u-ben",
        (
            Turn(
                "Which devices does Lumen Notes run on?",
                "Lumen Notes runs on smart fridges, game consoles and car dashboards.",
                False,
                "devices.md",
            ),
            Turn("what about tablets?", "Tablets running iPadOS 16 or Android 12 are supported.", True, "devices.md"),
        ),
    ),
    Conversation(
        "sdk-chat-cy",
        "u-cy",
        (
            Turn(
                "How do I export my notes?",
                "You can export all your notes as Markdown from Settings, Export.",
                True,
                "export.md",
            ),
            Turn(
                "and how long does the export take?",
                "An export of up to ten thousand notes takes about two minutes.",
                True,
                "export.md",
            ),
            Turn(
                "Is the export encrypted with my own key?",
                "Every export is sealed with a private cipher that only your fingerprint unlocks.",
                False,
                "export.md",
            ),
            Turn(
                "what about deleting my account?",
                "Deleting your account removes every note within seven days.",
                True,
                "accounts.md",
            ),
        ),
    ),
)

# Chat app 2: the plain openai client under OpenInference, the session set with `using_session`; each call sends
# the conversation so far (system prompt with the passages, earlier turns, the new question).
TP_CONVERSATION = Conversation(
    "tp-chat-dee",
    "u-dee",
    (
        Turn(
            "How many devices can one account use?",
            "One account can be signed in on up to five devices at once.",
            True,
            "accounts.md",
        ),
        Turn(
            "and on the family plan?",
            "The family plan covers six accounts, each on up to five devices.",
            True,
            "family.md",
        ),
        Turn(
            "What happens to my notes after cancelling?",
            "Cancelling keeps your notes readable for ninety days.",
            True,
            "family.md",
        ),
    ),
)


@dataclass(frozen=True)
class Vote:
    """One piece of feedback as a user gives it: on turn `turn` (from 1) of conversation `session`, named by its
    trace id (`by='trace'`) or by the app's request id (`by='request'`); exactly one of thumbs and rating."""

    session: str
    turn: int
    by: str
    user: str
    thumbs: str | None = None
    rating: int | None = None
    comment: str | None = None

    @property
    def negative(self) -> bool:
        return self.thumbs == "down" or (self.rating is not None and self.rating <= 2)


# What the SDK app's backend sends with `ragmon.feedback`, in this order. FIRST_VOTES go out first; CHANGED_VOTES
# after they are flushed: u-ana switches her thumbs down on the refund answer to up.
FIRST_VOTES: tuple[Vote, ...] = (
    Vote("sdk-chat-ana", 1, "trace", "u-ana", thumbs="up"),
    Vote("sdk-chat-ana", 2, "request", "u-ana", rating=5),
    Vote("sdk-chat-ana", 3, "trace", "u-ana", thumbs="down", comment="that is not what I asked"),
    Vote("sdk-chat-ben", 1, "request", "u-ben", thumbs="down", comment="fridges? really?"),
    Vote("sdk-chat-ben", 2, "trace", "u-ben", rating=2),
    Vote("sdk-chat-cy", 3, "request", "u-cy", thumbs="down", comment="that is not how export works"),
    Vote("sdk-chat-cy", 4, "trace", "u-cy", rating=4),
)
CHANGED_VOTES: tuple[Vote, ...] = (Vote("sdk-chat-ana", 3, "trace", "u-ana", thumbs="up", comment="ah, I misread it"),)
# Feedback on a trace no app ever sends (a stale page, a bug): stored, counted as unmatched.
UNKNOWN_TRACE_ID = "5eed0000000000000000000000000bad"
UNMATCHED_VOTE = {"trace_id": UNKNOWN_TRACE_ID, "thumbs": "down", "user": "u-eve"}
# What the web page posts with the write-only feedback key: thumbs down on the third-party app's second turn.
BROWSER_VOTE = Vote(TP_CONVERSATION.session, 2, "trace", "u-dee", thumbs="down", comment="I asked per person")


def final_votes() -> list[Vote]:
    """Matched feedback as ragmon must count it: the latest vote per (turn, user)."""
    latest: dict[tuple[str, int, str], Vote] = {}
    for vote in (*FIRST_VOTES, *CHANGED_VOTES, BROWSER_VOTE):
        latest[(vote.session, vote.turn, vote.user)] = vote
    return list(latest.values())


def figures(votes: Sequence[Vote]) -> dict[str, Any]:
    """The report's figures over some votes (all of them matched)."""
    ratings = [v.rating for v in votes if v.rating is not None]
    negative = sum(1 for v in votes if v.negative)
    return {
        "feedback": len(votes),
        "matched": len(votes),
        "unmatched": 0,
        "thumbs_up": sum(1 for v in votes if v.thumbs == "up"),
        "thumbs_down": sum(1 for v in votes if v.thumbs == "down"),
        "ratings": len(ratings),
        "mean_rating": sum(ratings) / len(ratings) if ratings else None,
        "negative_share": negative / len(votes) if votes else None,
    }


def turn_feedback(votes: Sequence[Vote], session: str, turn: int) -> dict[str, Any] | None:
    """What the conversation read must say of one turn's feedback (None without any)."""
    mine = [v for v in votes if (v.session, v.turn) == (session, turn)]
    if not mine:
        return None
    ratings = [v.rating for v in mine if v.rating is not None]
    comments = [v.comment for v in mine if v.comment]
    return {
        "thumbs_up": sum(1 for v in mine if v.thumbs == "up"),
        "thumbs_down": sum(1 for v in mine if v.thumbs == "down"),
        "ratings": len(ratings),
        "mean_rating": sum(ratings) / len(ratings) if ratings else None,
        "scores": 0,
        "verdicts": len(mine),
        "negative": sum(1 for v in mine if v.negative),
        "comment": comments[-1] if comments else "",
    }


def conversation(session: str) -> Conversation:
    return next(c for c in (*SDK_CONVERSATIONS, TP_CONVERSATION) if c.session == session)


# --- what the apps run ---------------------------------------------------------------------------------------
_STOPWORDS = frozenset(
    "a about an and are can do does for how i if is it my of on one the to what which with".split()  # noqa: SIM905
)


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOPWORDS}


def retrieve(query: str, k: int = RETRIEVE_TOP_K) -> list[tuple[str, float, str]]:
    """The apps' retrieval: pages ranked by shared words (id, score, text); a follow-up's query is the turn before
    and this one (`search_query`), as a chat app's "condense the question" step would make it."""
    asked = _words(query)
    scored = [(doc_id, len(asked & _words(text)) / (len(asked) or 1), text) for doc_id, text in DOCUMENTS]
    scored.sort(key=lambda d: (-d[1], d[0]))
    return scored[:k]


def search_query(turns: Sequence[Turn], index: int) -> str:
    """The retrieval query of turn `index` (from 0): a follow-up's with the question before it, else its own."""
    if turns[index].follow_up and index > 0:
        return f"{turns[index - 1].question} {turns[index].question}"
    return turns[index].question


def tp_reply(request: Any) -> Reply:
    """The scripted LLM for the third-party app: the answer of the turn whose question is the last user message
    (earlier turns travel in the messages too). Anything else raises: the test checks the server had no errors."""
    if not isinstance(request, dict) or "messages" not in request:
        raise ValueError(f"unscripted request: {request!r:.200}")
    users = [m.get("content") for m in request["messages"] if isinstance(m, dict) and m.get("role") == "user"]
    for turn in TP_CONVERSATION.turns:
        if users and users[-1] == turn.question:
            return Completion(turn.answer, prompt_tokens=180 + 40 * len(users), completion_tokens=14, model=CHAT_MODEL)
    raise ValueError(f"no scripted turn for the last user message {users[-1:]!r}")
