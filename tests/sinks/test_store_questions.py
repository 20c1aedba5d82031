"""The recurring questions' store side: each decided range's traces with their question (the payload copy's own
question: one implementation), and the question-group view — on the embedded store and through a ClickHouse server
(the HTTP shim), for one tenant at a time."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from ragmon.sinks import Store, envelope, otlp_views

from tests.support.synth import encode_otlp_request

NOW_S = int(time.time()) // 60 * 60 - 600
NOW_NS = NOW_S * 10**9


class Trace:
    def __init__(self, n: int, start_s: float = 0.0) -> None:
        self.trace_id = f"{n:032x}"
        self.spans: list[dict[str, Any]] = []
        self.start_ns = NOW_NS + int(start_s * 1e9)

    def span(self, name: str, parent: str | None = None, status: int = 1, ms: float = 50.0, **attributes: Any) -> str:
        span_id = f"{len(self.spans) + 1:016x}"
        parent_id = next(s["span_id"] for s in self.spans if s["name"] == parent) if parent else ""
        self.spans.append(
            {
                "trace_id": self.trace_id,
                "span_id": span_id,
                "parent_span_id": parent_id,
                "name": name,
                "start_ns": self.start_ns + len(self.spans) * 1_000_000,
                "duration_ms": ms,
                "status_code": status,
                "attributes": attributes,
            }
        )
        return span_id


def ragmon_trace(n: int, question: str, *, failed: bool = False, release: str = "2.0") -> Trace:
    t = Trace(n)
    t.span("request", ms=120.0, **{"ragmon.stage": "request", "ragmon.feature": "support",
                                   "ragmon.question": question, "service.version": release})  # fmt: skip
    t.span("search", "request", **{"ragmon.stage": "search", "ragmon.feature": "support"})
    t.span("generate", "request", status=2 if failed else 1, **{"ragmon.stage": "generate"})
    return t


def openinference_trace(n: int, question: str) -> Trace:
    t = Trace(n)
    t.span("RunnableSequence", ms=300.0, **{"openinference.span.kind": "CHAIN", "input.value": json.dumps(
        {"question": question}), "output.value": "an answer"})  # fmt: skip
    t.span("ChatOpenAI", "RunnableSequence", **{"openinference.span.kind": "LLM",
        "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "context + " + question,
        "llm.output_messages.0.message.content": "an answer"})  # fmt: skip
    return t


def client_only_trace(n: int, question: str) -> Trace:
    t = Trace(n)
    messages = [{"role": "system", "parts": [{"type": "text", "content": "Answer."}]},
                {"role": "user", "parts": [{"type": "text", "content": question}]}]  # fmt: skip
    t.span("chat", ms=80.0, **{"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(messages)})
    return t


@pytest.fixture
def views(store: Store) -> Store:
    otlp_views.install(store)
    return store


def send(store: Store, spans: list[dict[str, Any]], seq: int, tenant: str = "acme") -> None:
    store.insert_otlp([envelope.seal(encode_otlp_request(spans), tenant, seq)], dedup_token=f"{tenant}:{seq}")


def test_a_ranges_traces_have_the_payload_copys_question(views: Store) -> None:
    traces = [
        ragmon_trace(1, "How do I reset my password?", failed=True),
        openinference_trace(2, "Where is my order?"),
        client_only_trace(3, "Can I get a refund?"),
    ]
    for i, t in enumerate(traces):
        send(views, t.spans, 10 + i)
    silent = Trace(4)
    silent.span("request", **{"ragmon.stage": "request"})  # no captured text
    send(views, silent.spans, 13)
    rows = {r["trace_id"]: r for r in views.trace_questions(10, 13, 10)}
    assert set(rows) == {t.trace_id for t in [*traces, silent]}
    assert rows[silent.trace_id]["question"] == ""
    first = rows[traces[0].trace_id]
    assert (first["question"], first["feature"], first["release"], first["failed"]) == (
        "How do I reset my password?", "support", "2.0", 1,
    )  # fmt: skip
    assert first["duration_ms"] == pytest.approx(120.0)
    assert rows[traces[1].trace_id]["failed"] == 0
    # the same text the payload copy gives each trace
    views.copy_payloads(
        [{"tenant": "acme", "trace_id": t.trace_id, "reasons": ["x"], "probability": 1.0} for t in traces]
    )
    db = views.topology.database
    payloads = {
        r["trace_id"]: r["question"] for r in views.query(f"SELECT trace_id, question FROM {db}.payloads FINAL")
    }
    assert {t.trace_id: rows[t.trace_id]["question"] for t in traces} == payloads
    assert payloads[traces[2].trace_id] == "Can I get a refund?"


def test_a_trace_belongs_to_the_range_its_root_was_stored_in(views: Store) -> None:
    t = ragmon_trace(7, "How do I change my email address?")
    root, *children = t.spans
    send(views, children, 20)  # children end first, and are exported first
    send(views, [root], 21)
    assert views.trace_questions(20, 20, 20) == []
    # its children's text is read from the context: the question is on the root here, the release on the root
    (row,) = views.trace_questions(21, 21, 20)
    assert row["question"] == "How do I change my email address?"
    assert row["start_time"].timestamp() == pytest.approx(NOW_S)
    # without the children in the context the trace is still read (the root holds what the row needs)
    assert len(views.trace_questions(21, 21, 21)) == 1


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _tq(trace_id: str, group: str, question: str, start_s: float, *, failed: int = 0, ms: float = 100.0,
        tenant: str = "acme") -> dict[str, Any]:  # fmt: skip
    return {"tenant": tenant, "trace_id": trace_id, "feature": "support", "eval_run": "", "release": "",
            "environment": "", "start_time": _at(start_s), "group_id": group, "question": question,
            "similarity": 1.0, "failed": failed, "duration_ms": ms}  # fmt: skip


def _score(trace_id: str, value: float, p: float, *, flags: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"tenant": "acme", "trace_id": trace_id, "feature": "support", "eval_run": "", "release": "",
            "metric": "faithfulness", "judge_version": "v1", "value": value, "status": "ok", "explanation": "",
            "claims": [], "judge_model": "m", "prompt_version": "p", "input_tokens": 0, "output_tokens": 0,
            "cost_usd": None, "run_name": "", "scored_at": _at(NOW_S), "flags": list(flags), "judge_calls": 1,
            "claim_flags": [], "claim_support": [], "sampling_reason": "baseline", "inclusion_probability": p,
            "context_source": "passages"}  # fmt: skip


def test_the_question_group_view(store: Store) -> None:
    now = NOW_S
    rows = []
    # this hour: password 6 of 10 requests (2 failed), refund 4; the hour before: password 2 of 4, refund 2
    for i in range(6):
        rows.append(_tq(f"p{i}", "qpass", f"reset password {i}", now - 100 - i, failed=int(i < 2), ms=100.0 + i))
    for i in range(4):
        rows.append(_tq(f"r{i}", "qrefund", "refund please", now - 200 - i))
    for i in range(2):
        rows.append(_tq(f"op{i}", "qpass", "reset password", now - 3600 - 100 - i))
        rows.append(_tq(f"or{i}", "qrefund", "refund please", now - 3600 - 200 - i))
    rows.append(_tq("other", "qpass", "another tenant's", now - 100, tenant="globex"))
    store.insert_trace_questions(rows)
    store.insert_question_groups([
        {"tenant": "acme", "feature": "support", "group_id": "qpass", "label": "How do I reset my password?",
         "normalised": "how do i reset my password", "grouper": "lexical", "centroid": [], "members": 8,
         "created_at": _at(now - 7200), "updated_at": _at(now)},
    ])  # fmt: skip
    # judged: p0 (weight 1) 0.2 refused, p1 (weight 4) 0.7; before: op0 0.9
    store.insert_scores([_score("p0", 0.2, 1.0, flags=("refusal",)), _score("p1", 0.7, 0.25), _score("op0", 0.9, 1.0)])
    groups = store.question_groups(3600, now_s=now, tenant="acme")
    assert [g["group_id"] for g in groups] == ["qpass", "qrefund"]
    pw = groups[0]
    assert pw["label"] == "How do I reset my password?" and groups[1]["label"] == "refund please"
    assert pw["requests"] == 6 and pw["share"] == pytest.approx(0.6) and pw["error_rate"] == pytest.approx(2 / 6)
    assert len(pw["examples"]) == 3 and all(e.startswith("reset password") for e in pw["examples"])
    assert 100 <= pw["p95_ms"] <= 105
    quality = pw["quality"]["faithfulness"]
    assert quality["mean"] == pytest.approx((0.2 * 1 + 0.7 * 4) / 5) and quality["judged"] == 2
    assert pw["refusal_rate"] == pytest.approx(0.5)
    assert pw["previous"]["requests"] == 2 and pw["previous"]["share"] == pytest.approx(0.5)
    assert pw["change"]["share"] == pytest.approx(0.1)
    assert pw["change"]["quality"]["faithfulness"] == pytest.approx(0.6 - 0.9)
    assert groups[1]["quality"] == {} and groups[1]["refusal_rate"] is None
    assert [g["group_id"] for g in store.question_groups(3600, now_s=now, limit=1, tenant="acme")] == ["qpass"]
    (theirs,) = store.question_groups(3600, now_s=now, tenant="globex")
    assert theirs["requests"] == 1 and theirs["examples"] == ["another tenant's"]
    assert store.question_groups(3600, now_s=now, feature="billing", tenant="acme") == []


def test_the_reports_section_names_each_question_and_how_it_moved(store: Store) -> None:
    from ragmon.commands.report_questions import format_questions

    rows = [_tq(f"p{i}", "qpass", "How do I reset my password?", NOW_S - 100 - i, failed=int(i == 0)) for i in range(4)]
    rows += [_tq("old", "qpass", "reset password", NOW_S - 3700)]
    rows += [_tq(f"o{i}", "qother", "something else", NOW_S - 3800 - i) for i in range(3)]
    store.insert_trace_questions(rows)
    store.insert_scores([_score("p1", 0.5, 0.5)])
    text = format_questions(store.question_groups(3600, now_s=NOW_S, tenant="acme"))
    assert text.splitlines()[1].startswith(' 1. "How do I reset my password?"  [support, qpass]')
    assert "share 100% (+75 pts) of 4 requests, errors 25%" in text and "faithfulness 0.50" in text
    assert format_questions([]) == "Most common questions: none grouped in this window"


def test_the_view_reads_whole_hours_from_the_rollup_and_its_edges_from_the_rows(store: Store) -> None:
    # six hours of two groups, a trace every 7 minutes (every fifth failed), the window three hours ending off the
    # hour: its whole hours come from trace_questions_1h, the minutes at both ends from trace_questions
    end_s = NOW_S - NOW_S % 3600 + 1234
    rows = [
        _tq(f"t{i}", "qa" if i % 3 else "qb", f"asked {i % 4}", end_s - 6 * 3600 + 1 + i * 420, failed=int(i % 5 == 0))
        for i in range(6 * 3600 // 420)
    ]
    store.insert_trace_questions(rows, "questions:test:1-2")
    store.insert_trace_questions(rows, "questions:test:1-2")  # a retried insert: counted once, rollup included
    groups = {g["group_id"]: g for g in store.question_groups(3 * 3600, now_s=end_s, tenant="acme")}
    for gid in ("qa", "qb"):
        for key, lo, hi in (("requests", end_s - 3 * 3600, end_s), ("previous", end_s - 6 * 3600, end_s - 3 * 3600)):
            mine = [r for r in rows if r["group_id"] == gid and lo <= r["start_time"].timestamp() < hi]
            got = groups[gid] if key == "requests" else groups[gid]["previous"]
            assert got["requests"] == len(mine), (gid, key)
            assert got["error_rate"] == pytest.approx(sum(r["failed"] for r in mine) / len(mine)), (gid, key)
    examples = groups["qa"]["examples"]
    assert len(set(examples)) == 3 and set(examples) <= {r["question"] for r in rows if r["group_id"] == "qa"}
    db = store.topology.database
    (rolled,) = store.query(f"SELECT sum(requests) AS n FROM {db}.trace_questions_1h")
    assert rolled["n"] == len(rows)
