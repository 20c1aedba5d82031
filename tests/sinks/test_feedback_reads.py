"""The feedback reads on both backends (chDB and a ClickHouse server through the HTTP shim): feedback before and
after its trace, by request id, a changed vote, an unknown trace, and the tenant filter; each trace's verdict beside
the judge's score and the disagreements queue."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from ragmon.sinks import Store

from tests.dashboard.known_rows import Span, Trace, insert_traces
from tests.labels import known_labels


def _row(tenant: str, target: dict[str, str], kind: str, value: float, voter: str, at_s: float) -> dict[str, Any]:
    at = datetime.fromtimestamp(at_s, UTC)
    negative = (kind == "thumbs" and value == 0) or (kind == "rating" and value <= 2)
    row = {"tenant": tenant, "trace_id": "", "request_id": "", "name": kind, "kind": kind, "value": value}
    return {**row, **target, "negative": negative, "voter": voter, "given_at": at, "received_at": at}


def test_summary_scores_and_disagreements(store: Store) -> None:
    now = time.time()
    a, b, unknown = known_labels.trace_id(0xA1), known_labels.trace_id(0xB2), known_labels.trace_id(0xC3)
    request_span = Span("request", 0.0, 10.0, name="request qa", parent=None)
    traces = [
        Trace(a, now - 120, [request_span], tenant="acme", feature="qa"),
        Trace(
            b,
            now - 100,
            [request_span],
            tenant="acme",
            feature="chat",
            extra={"root_attributes": {"ragmon.request_id": "ord-9"}},
        ),
        Trace(known_labels.trace_id(0xD4), now - 90, [request_span], tenant="globex", feature="globex-qa"),
    ]
    insert_traces(store, traces)
    store.insert_feedback(
        [
            _row("acme", {"trace_id": a}, "thumbs", 0.0, "user:u1", now - 60),
            _row("acme", {"trace_id": a}, "thumbs", 1.0, "user:u1", now - 30),  # u1 changed their mind: up
            _row("acme", {"trace_id": a}, "thumbs", 0.0, "user:u2", now - 30),
            _row("acme", {"request_id": "ord-9"}, "rating", 2.0, "user:u3", now - 30),
            _row("acme", {"trace_id": unknown}, "thumbs", 0.0, "user:u4", now - 30),
            _row("globex", {"trace_id": known_labels.trace_id(0xD4)}, "thumbs", 0.0, "user:g", now - 30),
        ]
    )
    rows = {row["feature"]: row for row in store.feedback_summary(3600, tenant="acme")}
    assert set(rows) == {"qa", "chat", ""}
    assert (rows["qa"]["thumbs_up"], rows["qa"]["thumbs_down"], rows["qa"]["negative_share"]) == (1, 1, 0.5)
    assert (rows["chat"]["mean_rating"], rows["chat"]["negative"], rows["chat"]["matched"]) == (2.0, 1, 1)
    assert rows[""]["unmatched"] == 1
    assert {row["feature"] for row in store.feedback_summary(3600, tenant="globex")} == {"globex-qa"}

    known_labels.keep(store, "acme", [a, b])
    known_labels.score(store, "acme", {a: 0.9, b: 0.8}, version="v-test")
    scores = {row["trace_id"]: row for row in store.feedback_scores(3600, tenant="acme")}
    assert {t: (r["label"], r["verdicts"], r["negative"]) for t, r in scores.items()} == {
        a: (False, 2, 1),  # a tie reads as not good
        b: (False, 1, 1),
    }
    queue = store.feedback_disagreements("faithfulness", since_s=3600, threshold=0.5, limit=10, tenant="acme")
    assert sorted(row["trace_id"] for row in queue) == sorted([a, b])
    assert (
        store.feedback_disagreements("faithfulness", since_s=3600, threshold=0.85, limit=10, tenant="acme")[0][
            "trace_id"
        ]
        == a
    )


def test_feedback_per_question_group_joins_by_trace(store: Store) -> None:
    from ragmon.sinks.schema import TRACE_QUESTION_COLUMNS, TRACE_QUESTIONS_TABLE

    now = time.time()
    ids = [known_labels.trace_id(0xE0 + n) for n in range(4)]  # two in "refunds", one in "login", one ungrouped
    request_span = Span("request", 0.0, 10.0, name="request qa", parent=None)
    insert_traces(
        store, [Trace(t, now - 120 + n, [request_span], tenant="acme", feature="qa") for n, t in enumerate(ids)]
    )
    groups = {ids[0]: ("g-refunds", "how do refunds work", 1.0), ids[1]: ("g-refunds", "refund please", 0.7)}
    groups[ids[2]] = ("g-login", "cannot log in", 1.0)
    store._insert_rows(
        TRACE_QUESTIONS_TABLE,
        TRACE_QUESTION_COLUMNS,
        [
            {
                "tenant": "acme",
                "trace_id": t,
                "feature": "qa",
                "eval_run": "",
                "release": "",
                "environment": "",
                "start_time": datetime.fromtimestamp(now - 120, UTC),
                "group_id": g,
                "question": q,
                "similarity": s,
                "failed": 0,
                "duration_ms": 10.0,
            }
            for t, (g, q, s) in groups.items()
        ],
        None,
    )
    store.insert_feedback(
        [
            _row("acme", {"trace_id": ids[0]}, "thumbs", 0.0, "user:a", now - 30),
            _row("acme", {"trace_id": ids[1]}, "rating", 1.0, "user:b", now - 30),
            _row("acme", {"trace_id": ids[2]}, "thumbs", 1.0, "user:c", now - 30),
            _row("acme", {"trace_id": ids[3]}, "thumbs", 0.0, "user:d", now - 30),  # no group: not in this read
        ]
    )
    rows = store.feedback_by_question(3600, tenant="acme")
    assert [(r["group_id"], r["traces"], r["negative"], r["verdicts"]) for r in rows] == [
        ("g-refunds", 2, 2, 2),  # most negative first
        ("g-login", 1, 0, 1),
    ]
    assert rows[0]["question"] == "how do refunds work"  # the one closest to the group's representative
    assert rows[0]["negative_share"] == 1.0 and rows[1]["thumbs_up"] == 1
    assert store.feedback_by_question(3600, tenant="globex") == []
