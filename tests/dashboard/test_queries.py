"""The dashboard's figures over a store filled with known rows: latency per stage per bucket, cost per feature and
model, quality weighted by 1 / inclusion probability, open alerts, kept traces and one trace opened up."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from ragmon.sinks import Store
from ragmon.sinks.dashboard_queries import DashboardQueries, bucket_step_s
from ragmon.sinks.schema import QUANTILE_ACCURACY

from tests.dashboard.known_rows import (
    HOSTILE,
    Span,
    Trace,
    alert,
    insert_traces,
    payload,
    request,
    score,
    trace_id,
)

# Ten-minute aligned, half an hour ago: recent (tables expire old rows by TTL) and on minute boundaries.
BASE_S = int(time.time()) // 600 * 600 - 1800
NOW_S = BASE_S + 1800


def _queries(store: Store) -> DashboardQueries:
    return DashboardQueries(store, clock=lambda: NOW_S)


def _close(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= want * 2 * QUANTILE_ACCURACY


def test_bucket_step_gives_at_most_about_sixty_points() -> None:
    assert bucket_step_s(900) == 60
    assert bucket_step_s(3600) == 60
    assert bucket_step_s(86400) == 1800
    assert bucket_step_s(7 * 86400) == 10800  # whole hours: read from the hourly rollup
    for window in (600, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400):
        assert window / bucket_step_s(window) <= 61


def test_latency_has_p50_and_p95_per_stage_per_bucket(any_store: Store) -> None:
    early = [request(i, BASE_S + 1 + i) for i in range(3)]
    late = [request(10 + i, BASE_S + 121 + i, scale=2.0) for i in range(3)]
    other_feature = [request(20 + i, BASE_S + 5 + i, feature="chat", scale=10.0) for i in range(3)]
    insert_traces(any_store, early + late + other_feature)

    docs = _queries(any_store).latency(3600, None, "docs-qa")
    assert docs["step_s"] == 60
    assert docs["end_ms"] == NOW_S * 1000 and docs["start_ms"] <= (NOW_S - 3600) * 1000
    series = {s["stage"]: s for s in docs["series"]}
    assert set(series) == {"request", "embed", "search", "generate"}
    generate = series["generate"]
    assert generate["t_ms"] == [BASE_S * 1000, (BASE_S + 120) * 1000]
    assert generate["spans"] == [3, 3]
    assert _close(generate["p50_ms"][0], 40.0) and _close(generate["p95_ms"][0], 40.0)
    assert _close(generate["p50_ms"][1], 80.0) and _close(generate["p95_ms"][1], 80.0)
    assert _close(series["embed"]["p95_ms"][1], 4.0)

    everything = {s["stage"]: s for s in _queries(any_store).latency(3600, None)["series"]}
    assert everything["generate"]["spans"] == [6, 3]
    assert _close(everything["generate"]["p95_ms"][0], 400.0)  # the slow "chat" requests share this bucket


def test_overview_totals_stage_figures_and_cost_per_feature_and_model(any_store: Store) -> None:
    traces = [request(i, BASE_S + 60 + i) for i in range(4)] + [request(9, BASE_S + 70, feature="chat")]
    traces[0].spans[0].status = "error"
    insert_traces(any_store, traces)

    overview = _queries(any_store).overview(3600, None)
    assert overview["features"] == ["chat", "docs-qa"]
    assert overview["totals"]["requests"] == 5
    assert overview["totals"]["errors"] == 1
    assert overview["totals"]["error_rate"] == pytest.approx(0.2)
    assert overview["totals"]["cost_usd"] == pytest.approx(5 * 0.021)
    cost = {(c["feature"], c["model"]): c for c in overview["cost"]}
    assert set(cost) == {
        ("docs-qa", "gpt-test"),
        ("docs-qa", "embed-mini"),
        ("chat", "gpt-test"),
        ("chat", "embed-mini"),
    }
    assert cost[("docs-qa", "gpt-test")]["cost_usd"] == pytest.approx(4 * 0.02)
    assert cost[("docs-qa", "gpt-test")]["input_tokens"] == 4 * 900
    assert cost[("docs-qa", "gpt-test")]["calls"] == 4
    assert cost[("chat", "embed-mini")]["cost_usd"] == pytest.approx(0.001)
    stages = {s["stage"]: s for s in overview["stages"]}
    assert stages["search"]["spans"] == 5 and _close(stages["search"]["p50_ms"], 5.0)

    chat = _queries(any_store).overview(3600, None, "chat")
    assert chat["totals"]["requests"] == 1
    assert {c["feature"] for c in chat["cost"]} == {"chat"}
    assert chat["features"] == ["chat", "docs-qa"]  # the selector still lists every feature


def test_overview_has_the_kept_share_by_first_reason(any_store: Store) -> None:
    minute = datetime.fromtimestamp(BASE_S + 600, UTC)
    too_old = datetime.fromtimestamp(NOW_S - 7200, UTC)
    any_store.insert_sampling_counts(
        [
            {
                "minute": minute,
                "tenant": "acme",
                "feature": "docs-qa",
                "outcome": outcome,
                "reason": reason,
                "traces": n,
            }
            for outcome, reason, n in (
                ("keep", "error", 2),
                ("keep", "slow", 3),
                ("keep", "baseline", 5),
                ("skip", "", 90),
            )
        ]
        + [
            {"minute": minute, "tenant": "acme", "feature": "chat", "outcome": "keep", "reason": "error", "traces": 1},
            {"minute": minute, "tenant": "acme", "feature": "chat", "outcome": "skip", "reason": "", "traces": 9},
            {
                "minute": minute,
                "tenant": "globex",
                "feature": "chat",
                "outcome": "keep",
                "reason": "error",
                "traces": 50,
            },
            {"minute": too_old, "tenant": "acme", "feature": "chat", "outcome": "keep", "reason": "slow", "traces": 70},
        ]
    )
    queries = _queries(any_store)
    assert queries.overview(3600, "acme")["sampling"] == {
        "decided": 110,
        "kept": 11,
        "kept_by_reason": {"error": 3, "baseline": 5, "slow": 3},
    }
    assert queries.overview(3600, "acme", "chat")["sampling"] == {
        "decided": 10,
        "kept": 1,
        "kept_by_reason": {"error": 1},
    }
    assert queries.overview(3600, None)["sampling"]["kept_by_reason"]["error"] == 53  # no keys: every tenant


def test_quality_is_weighted_by_inverse_inclusion_probability(any_store: Store) -> None:
    a, b, c, d = (request(i, BASE_S + 60 + i) for i in range(4))
    insert_traces(any_store, [a, b, c, d])
    any_store.insert_payloads(
        [
            payload(a, probability=1.0, reasons=["slow"]),
            payload(b, probability=0.1, reasons=["baseline"]),
            payload(c, probability=0.1, reasons=["baseline"]),
            payload(d, probability=0.1, reasons=["baseline"]),
        ]
    )
    any_store.insert_scores(
        [
            score(a, "faithfulness", 0.0, at_s=BASE_S + 100),
            score(a, "faithfulness", 1.0, at_s=BASE_S + 100, run_name="nightly"),  # back-evaluation: not online
            score(b, "faithfulness", 1.0, at_s=BASE_S + 100),
            score(c, "faithfulness", 1.0, at_s=BASE_S + 100, judge_version="v0"),
            # re-judged later: the latest value counts, with the probability the judge recorded (half of the
            # baseline traces judged: 0.1 x 0.5), which beats the payload's 0.1
            score(c, "faithfulness", 0.5, at_s=BASE_S + 200, inclusion_probability=0.05),
            score(d, "faithfulness", None, at_s=BASE_S + 100),  # judge failed: never a silent 0
        ]
    )

    quality = _queries(any_store).quality(3600, None)
    (faithfulness,) = quality["series"]
    assert faithfulness["metric"] == "faithfulness"
    assert faithfulness["t_ms"] == [(BASE_S + 60) * 1000]
    assert faithfulness["n"] == [3]
    assert faithfulness["weight"][0] == pytest.approx(1 + 10 + 20)
    assert faithfulness["weighted"][0] == pytest.approx((0.0 * 1 + 1.0 * 10 + 0.5 * 20) / 31)
    assert faithfulness["plain"][0] == pytest.approx(0.5)
    assert _queries(any_store).quality(3600, None, "chat")["series"] == []


def test_open_alerts_exclude_resolved_ones_and_put_the_worst_first(any_store: Store) -> None:
    any_store.insert_alerts(
        [
            alert("closed", "firing", at_s=BASE_S + 10),
            alert("closed", "resolved", at_s=BASE_S + 10),
            alert("warn", "firing", at_s=BASE_S + 300, severity="warning"),
            alert("crit", "firing", at_s=BASE_S + 20, severity="critical", message=HOSTILE),
            alert("theirs", "firing", at_s=BASE_S + 30, tenant="globex"),
        ]
    )
    acme = _queries(any_store).open_alerts("acme")
    assert [a["alert_id"] for a in acme] == ["crit", "warn"]
    assert acme[0]["message"] == HOSTILE  # data stays data; the page renders it as text
    assert acme[0]["fired_at_ms"] == (BASE_S + 20) * 1000
    assert acme[1]["value"] == 7.5 and acme[1]["threshold"] == 5.0
    assert {a["alert_id"] for a in _queries(any_store).open_alerts(None)} == {"crit", "warn", "theirs"}


def _kept_trace() -> Trace:
    return Trace(
        trace_id(77),
        BASE_S + 400,
        [
            Span("request", 0.0, 50.0, name="request", parent=None, status="error"),
            Span("embed", 1.0, 3.0, name="embed"),
            Span("search", 4.0, 6.0, name="search"),
            Span("tool", 11.0, 4.0, name="lookup", parent=2),  # a child of search: depth 2
            Span("generate", 16.0, 30.0, name="generate", status="error"),
        ],
    )


def test_traces_list_newest_first_with_why_kept_duration_and_scores(any_store: Store) -> None:
    older, newer = request(1, BASE_S + 100), _kept_trace()
    insert_traces(any_store, [older, newer, request(2, BASE_S + 200)])  # the third was not kept
    any_store.insert_payloads(
        [
            payload(older, probability=0.05, reasons=["baseline"], question="older?"),
            payload(newer, probability=1.0, reasons=["error", "slow"], question="newer?"),
        ]
    )
    any_store.insert_scores([score(older, "faithfulness", 0.25, at_s=BASE_S + 150)])

    listed = _queries(any_store).traces(3600, None)
    assert [t["trace_id"] for t in listed] == [newer.trace_id, older.trace_id]
    assert listed[0]["reasons"] == ["error", "slow"] and listed[0]["errors"] == 2 and listed[0]["spans"] == 5
    assert listed[0]["duration_ms"] == pytest.approx(50.0)
    assert listed[0]["start_ms"] == (BASE_S + 400) * 1000
    assert listed[1]["inclusion_probability"] == pytest.approx(0.05)
    assert listed[1]["scores"] == {"faithfulness": 0.25}
    assert listed[0]["scores"] == {}
    assert len(_queries(any_store).traces(3600, None, limit=1)) == 1
    assert _queries(any_store).traces(3600, None, "chat") == []
    assert [t["trace_id"] for t in _queries(any_store).traces(120, None)] == []  # both before the last two minutes


def test_one_trace_has_waterfall_passages_answer_and_claims(any_store: Store) -> None:
    kept = _kept_trace()
    insert_traces(any_store, [kept])
    passages = [
        {"id": "evil.md#1", "score": 0.91, "text": "passage " + HOSTILE},
        {"id": "faq.md#2", "score": None, "text": "no score"},
    ]
    any_store.insert_payloads(
        [
            payload(
                kept,
                probability=1.0,
                reasons=["error"],
                question="why?",
                answer="because " + HOSTILE,
                passages=passages,
            )
        ]
    )
    claims = [
        {"claim": "it is so", "verdict": "supported", "reason": "passage 1"},
        {"claim": HOSTILE, "verdict": "unsupported", "reason": "nowhere"},
    ]
    any_store.insert_scores(
        [
            score(kept, "faithfulness", 0.5, at_s=BASE_S + 500, claims=claims, explanation="1 of 2", judge_model="m"),
            score(kept, "answer_relevance", None, at_s=BASE_S + 500, status="unsupported"),
        ]
    )

    trace = _queries(any_store).trace(kept.trace_id, None)
    assert trace is not None and trace["kept"]
    assert [(s["name"], s["depth"]) for s in trace["spans"]] == [
        ("request", 0),
        ("embed", 1),
        ("search", 1),
        ("lookup", 2),
        ("generate", 1),
    ]
    assert [s["offset_ms"] for s in trace["spans"]] == pytest.approx([0.0, 1.0, 4.0, 11.0, 16.0], abs=0.01)
    assert trace["duration_ms"] == pytest.approx(50.0)
    assert [s["status"] for s in trace["spans"]].count("error") == 2
    assert trace["question"] == "why?" and trace["answer"] == "because " + HOSTILE
    assert trace["passages"][0] == {"id": "evil.md#1", "score": pytest.approx(0.91), "text": "passage " + HOSTILE}
    assert trace["passages"][1]["score"] is None
    scores = {s["metric"]: s for s in trace["scores"]}
    assert scores["faithfulness"]["value"] == 0.5 and scores["faithfulness"]["claims"] == claims
    assert scores["answer_relevance"]["value"] is None and scores["answer_relevance"]["status"] == "unsupported"


def test_a_trace_without_payload_still_opens_and_unknown_or_bad_ids_do_not(any_store: Store) -> None:
    unkept = request(5, BASE_S + 60)
    insert_traces(any_store, [unkept])
    trace = _queries(any_store).trace(unkept.trace_id, None)
    assert trace is not None and trace["kept"] is False and len(trace["spans"]) == 4
    assert _queries(any_store).trace(trace_id(999), None) is None
    with pytest.raises(ValueError, match="32 lowercase hex"):
        _queries(any_store).trace("x' OR 1=1 --", None)


def test_a_tenant_never_sees_another_tenants_rows(any_store: Store) -> None:
    ours = request(1, BASE_S + 60, tenant="acme")
    theirs = request(2, BASE_S + 61, tenant="globex", scale=50.0)
    insert_traces(any_store, [ours, theirs])
    any_store.insert_payloads(
        [payload(ours, probability=1.0, reasons=["slow"]), payload(theirs, probability=0.5, reasons=["baseline"])]
    )
    any_store.insert_scores(
        [score(ours, "faithfulness", 1.0, at_s=BASE_S + 90), score(theirs, "faithfulness", 0.0, at_s=BASE_S + 90)]
    )
    any_store.insert_alerts([alert("their-alert", "firing", at_s=BASE_S + 10, tenant="globex")])
    acme = _queries(any_store)

    assert [t["trace_id"] for t in acme.traces(3600, "acme")] == [ours.trace_id]
    assert acme.trace(theirs.trace_id, "acme") is None
    assert acme.trace(ours.trace_id, "globex") is None
    assert acme.quality(3600, "acme")["series"][0]["weighted"] == [1.0]
    assert acme.open_alerts("acme") == []
    overview = acme.overview(3600, "acme")
    assert overview["totals"]["requests"] == 1
    assert _close(overview["totals"]["p95_ms"], 48.0)  # globex's 2,400 ms request is not merged in
    latency = {s["stage"]: s for s in acme.latency(3600, "acme")["series"]}
    assert latency["generate"]["spans"] == [1] and _close(latency["generate"]["p95_ms"][0], 40.0)
    # without keys (tenant None) the dashboard reads every tenant, as /api/report does
    assert len(acme.traces(3600, None)) == 2
