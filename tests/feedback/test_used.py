"""Feedback used, on a real agent: the judge's agreement with end users (calibrate --from-store's second truth), the
review queue's "thumbs down, judged faithful" filter through the API, and the report's feedback section."""

from __future__ import annotations

import httpx
from ragmon.judges.feedback_agreement import CAVEAT, feedback_agreement, format_feedback_agreement

from ragmon.agent.agent import Agent
from ragmon.commands.feedback_section import format_feedback
from tests.feedback.conftest import API_KEYS, api_url, post_feedback
from tests.labels import known_labels

JUDGE = "feedback-test-judge"


def test_agreement_with_users_and_the_disagreements_queue(agent: Agent) -> None:
    # Four kept, judged traces of globex's (this module's other tests write acme's), each with a user verdict:
    #   passed & thumbs down (the disagreement), passed & up, failed & down, failed & up
    ids = [known_labels.trace_id(0xFEED00 + i) for i in range(4)]
    known_labels.keep(agent.store, "globex", ids)
    known_labels.score(agent.store, "globex", dict(zip(ids, (0.9, 0.9, 0.1, 0.1), strict=True)), version=JUDGE)
    key = API_KEYS["globex"]
    for trace, thumbs in zip(ids, ("down", "up", "down", "up"), strict=True):
        assert post_feedback(agent, {"trace_id": trace, "thumbs": thumbs, "user": "g1"}, key=key).status_code == 200
    # a second user's thumbs up on the first: a tie reads as not good (most verdicts must be positive)
    assert post_feedback(agent, {"trace_id": ids[0], "thumbs": "up", "user": "g2"}, key=key).status_code == 200

    rows = agent.store.feedback_scores(3600, judge_version=JUDGE, tenant="globex")
    assert {r["trace_id"]: (r["label"], r["verdicts"], r["negative"]) for r in rows} == {
        ids[0]: (False, 2, 1),
        ids[1]: (True, 1, 0),
        ids[2]: (False, 1, 1),
        ids[3]: (True, 1, 0),
    }
    (entry,) = feedback_agreement(rows, 0.5)
    assert entry["confusion"] == {"tp": 1, "fn": 1, "fp": 1, "tn": 1}
    assert (entry["n"], entry["traces"], entry["verdicts"]) == (4, 4, 5)
    text = format_feedback_agreement([entry], "last 1h")
    assert "end users' feedback" in text and CAVEAT in text and "(4 traces, 5 verdicts)" in text

    review = httpx.get(
        f"{api_url(agent)}/api/dashboard/review",
        params={"metric": "faithfulness", "filter": "thumbs_down_judged_good"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert review.status_code == 200, review.text
    items = review.json()["items"]
    assert [item["trace_id"] for item in items] == [ids[0]]  # only the one users rejected and the judge passed
    assert items[0]["feedback"] == {"verdicts": 2, "negative": 1}
    bad = httpx.get(
        f"{api_url(agent)}/api/dashboard/review",
        params={"metric": "faithfulness", "filter": "whatever"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert bad.status_code == 400


def test_the_report_section_reads_what_was_sent(agent: Agent) -> None:
    rows = agent.store.feedback_summary(3600, tenant="globex")
    text = format_feedback(rows)
    assert text.startswith("end-user feedback")
    (matched,) = [row for row in rows if row["feature"] == ""]  # globex's traces above have no spans: unmatched
    assert matched["unmatched"] == matched["feedback"] >= 4
    assert "not matched to a trace" in text
    assert format_feedback([]) == "end-user feedback: none in this window"
