"""The minute rollup counts one call per nested run of a stage (`sinks/rollup_sql.py`), and every span once.

Checked on the shapes third-party instrumentations send (a wrapper around the client call, usage on one or both)
and against a Python statement of the rules over random trace trees split into ranges the way exporters split
them (a parent is stored no earlier than its children).
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ragmon.sinks import Store, rollup_sql

from tests.support.span_rows import SpanBatch, insert_spans

NOW_NS = (int(time.time()) // 60 * 60 - 600) * 10**9  # ten minutes ago, on a minute boundary


@dataclass
class Span:
    span_id: str
    parent: str
    stage: str
    start_ms: float
    duration_ms: float
    tokens: int = 0
    cost: float | None = None
    ttft_ms: float | None = None
    status: str = "ok"
    seq: int = 1
    trace_id: str = "a" * 32
    model: str = "m"
    extra: dict[str, Any] = field(default_factory=dict)


def _batch(spans: list[Span]) -> SpanBatch:
    batch = SpanBatch()
    for s in spans:
        row = {
            "tenant": "acme",
            "trace_id": s.trace_id,
            "span_id": s.span_id,
            "parent_span_id": s.parent,
            "name": s.span_id,
            "stage": s.stage,
            "feature": "support",
            "eval_run": "",
            "user": "",
            "session": "",
            "service": "app",
            "start_time": NOW_NS + int(s.start_ms * 1e6),
            "duration_ms": s.duration_ms,
            "status": s.status,
            "error_type": "",
            "model": s.model,
            "provider": "",
            "input_tokens": s.tokens,
            "output_tokens": s.tokens,
            "cached_input_tokens": 0,
            "cost_usd": s.cost,
            "top1_score": None,
            "similarity_gap": None,
            "norm_deviation": None,
            "ttft_ms": s.ttft_ms,
            "retrieved_ids": [],
            "retrieved_scores": [],
            "attributes": {},
            "ingest_seq": s.seq,
        }
        for name, value in row.items():
            getattr(batch, name).append(value)
    return batch


def _by_stage(store: Store) -> dict[str, dict[str, Any]]:
    db = store.topology.database
    rows = store.query(
        "SELECT stage, sum(spans) AS calls, sum(errors) AS errors, sum(input_tokens) AS tokens,"
        " sum(cost_usd) AS cost, sum(cost_known) AS cost_known,"
        " quantilesDDMerge(0.005, 0.5, 0.95, 0.99)(duration_q)[1] AS p50,"
        " quantilesDDMerge(0.005, 0.95)(ttft_q)[1] AS ttft"
        f" FROM {db}.spans_1m GROUP BY stage ORDER BY stage"
    )
    return {r.pop("stage"): r for r in rows}


def test_a_wrapper_and_the_client_call_inside_it_are_one_call(store: Store) -> None:
    """LlamaIndex under OpenInference: `OpenAI.predict` around `OpenAI.chat` (usage on the inner span only), and
    `VectorIndexRetriever.retrieve` around `._retrieve`; the inner spans are stored first, in a range of their own."""
    spans = [
        Span("q" * 16, "", "other", 0, 1000, seq=2),
        Span("r" * 16, "q" * 16, "search", 1, 300, seq=2),
        Span("s" * 16, "r" * 16, "search", 2, 250, seq=1),
        Span("e" * 16, "s" * 16, "embed", 3, 100, tokens=7, cost=0.001, seq=1),
        Span("p" * 16, "q" * 16, "generate", 400, 500, seq=2),
        Span("c" * 16, "p" * 16, "generate", 401, 480, tokens=100, cost=0.25, ttft_ms=50.0, seq=1),
    ]
    insert_spans(store, _batch(spans))
    store.roll_up(1, 1)  # the inner spans: their parents are stored (range 2) by the time the range is rolled up
    store.roll_up(2, 2)
    got = _by_stage(store)
    assert {stage: row["calls"] for stage, row in got.items()} == {"other": 1, "search": 1, "embed": 1, "generate": 1}
    assert got["generate"]["tokens"] == 100 and got["generate"]["cost"] == pytest.approx(0.25)
    assert got["generate"]["cost_known"] == 1
    assert got["generate"]["p50"] == pytest.approx(500, rel=0.01)  # the outer span's duration is the call's
    assert got["search"]["p50"] == pytest.approx(300, rel=0.01)
    assert got["generate"]["ttft"] == pytest.approx(50, rel=0.01)  # the outer span has none: the inner one's


def test_usage_on_both_spans_counts_once_from_the_outer(store: Store) -> None:
    """LangChain under OpenInference plus the openai instrumentor: both LLM spans carry the same usage."""
    spans = [
        Span("o" * 16, "", "generate", 0, 500, tokens=100, cost=0.25),
        Span("i" * 16, "o" * 16, "generate", 1, 400, tokens=100, cost=0.25),
    ]
    insert_spans(store, _batch(spans))
    store.roll_up(1, 1)
    got = _by_stage(store)["generate"]
    assert (got["calls"], got["tokens"], got["cost_known"]) == (1, 100, 1)
    assert got["cost"] == pytest.approx(0.25)


def test_a_failed_call_counts_as_the_outer_span_says(store: Store) -> None:
    spans = [
        # the client call failed, the wrapper retried and succeeded: one call, no error
        Span("o" * 16, "", "generate", 0, 900, trace_id="1" * 32),
        Span("i" * 16, "o" * 16, "generate", 1, 100, status="error", trace_id="1" * 32),
        Span("j" * 16, "o" * 16, "generate", 200, 600, tokens=5, trace_id="1" * 32),
        # both failed: one call, one error
        Span("p" * 16, "", "generate", 0, 300, status="error", trace_id="2" * 32),
        Span("k" * 16, "p" * 16, "generate", 1, 200, status="error", trace_id="2" * 32),
    ]
    insert_spans(store, _batch(spans))
    store.roll_up(1, 1)
    got = _by_stage(store)["generate"]
    assert (got["calls"], got["errors"], got["tokens"]) == (2, 1, 5)


def test_sibling_calls_and_calls_in_other_traces_all_count(store: Store) -> None:
    spans = [
        Span("c" * 16, "", "other", 0, 1000),
        Span("1" * 16, "c" * 16, "generate", 1, 100, tokens=1),
        Span("2" * 16, "c" * 16, "generate", 200, 100, tokens=2),
        Span("3" * 16, "", "generate", 0, 100, tokens=4, trace_id="b" * 32),
        # the parent was never stored (a span of a service that does not send to ragmon): a call
        Span("4" * 16, "f" * 16, "generate", 0, 100, tokens=8, trace_id="d" * 32),
    ]
    insert_spans(store, _batch(spans))
    store.roll_up(1, 1)
    got = _by_stage(store)["generate"]
    assert (got["calls"], got["tokens"]) == (4, 15)


def test_a_span_nested_through_another_stage_is_not_a_second_call(store: Store) -> None:
    """tool → other → tool: the inner tool run is part of the outer one (ancestors, not only parents)."""
    spans = [
        Span("t" * 16, "", "tool", 0, 900),
        Span("o" * 16, "t" * 16, "other", 1, 800),
        Span("u" * 16, "o" * 16, "tool", 2, 700),
    ]
    insert_spans(store, _batch(spans))
    store.roll_up(1, 1)
    got = _by_stage(store)
    assert (got["tool"]["calls"], got["other"]["calls"]) == (1, 1)


def test_a_trace_past_the_walk_limit_counts_every_span_past_it(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rollup_sql, "MAX_WALKED_SPANS", 3)
    chain = [Span(f"{i:016x}", f"{i - 1:016x}" if i else "", "generate", i, 100 - i) for i in range(6)]
    insert_spans(store, _batch(chain))
    store.roll_up(1, 1)
    assert _by_stage(store)["generate"]["calls"] == 4  # the first three walked (one call), the last three not


# --- against the rules, stated in Python, over random trees -------------------------------------------------

STAGES = ("generate", "search", "tool", "other")


def _random_traces(rng: random.Random, traces: int) -> list[Span]:
    spans: list[Span] = []
    for t in range(traces):
        trace_id = f"{t:032x}"
        tree: list[Span] = []
        for i in range(rng.randint(1, 12)):
            parent = rng.choice(tree) if tree and rng.random() < 0.9 else None
            start = (parent.start_ms + rng.uniform(0, 1)) if parent else rng.uniform(0, 5)
            span = Span(
                f"{t:08x}{i:08x}",
                parent.span_id if parent else "",
                rng.choice(STAGES),
                start,
                rng.uniform(1, 100),
                tokens=rng.choice((0, 0, 3, 10)),
                cost=rng.choice((None, 0.5)),
                ttft_ms=rng.choice((None, 5.0)),
                status=rng.choice(("ok", "ok", "error")),
                trace_id=trace_id,
            )
            tree.append(span)
        spans.extend(tree)
    return spans


def _store_in_ranges(rng: random.Random, spans: list[Span]) -> int:
    """Give each span a sequence number no later than its parent's (exporters send children first); returns the
    last sequence number."""
    by_id = {(s.trace_id, s.span_id): s for s in spans}
    for s in sorted(spans, key=lambda s: -s.start_ms):  # children start later: numbered first, lower or equal
        s.seq = rng.randint(1, 4)
    changed = True
    while changed:
        changed = False
        for s in spans:
            parent = by_id.get((s.trace_id, s.parent))
            if parent is not None and parent.seq < s.seq:
                parent.seq, changed = s.seq, True
    return 4


def _expected(spans: list[Span]) -> dict[str, dict[str, Any]]:
    by_id = {(s.trace_id, s.span_id): s for s in spans}

    def ancestors(s: Span) -> list[Span]:
        out, seen = [], set()
        while (s.trace_id, s.parent) in by_id and s.parent not in seen:
            seen.add(s.parent)
            s = by_id[(s.trace_id, s.parent)]
            out.append(s)
        return out

    def carries(s: Span) -> bool:
        return s.tokens > 0 or s.cost is not None

    got: dict[str, dict[str, Any]] = defaultdict(lambda: {"calls": 0, "errors": 0, "tokens": 0, "cost_known": 0})
    for s in spans:
        same = [a for a in ancestors(s) if a.stage == s.stage]
        row = got[s.stage]
        if not same:
            row["calls"] += 1
            row["errors"] += s.status == "error"
        if carries(s) and not any(carries(a) for a in same):
            row["tokens"] += s.tokens
            row["cost_known"] += s.cost is not None
    return {stage: row for stage, row in got.items() if any(row.values())}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_random_trees_rolled_up_in_ranges_match_the_rules(chdb_store: Store, seed: int) -> None:
    db = chdb_store.topology.database
    chdb_store.backend.execute(f"TRUNCATE TABLE {db}.spans")
    chdb_store.backend.execute(f"TRUNCATE TABLE {db}.spans_1m")
    rng = random.Random(seed)
    spans = _random_traces(rng, 30)
    last = _store_in_ranges(rng, spans)
    insert_spans(chdb_store, _batch(spans))
    for seq in range(1, last + 1):
        chdb_store.roll_up(seq, seq, f"rollup:{seed}:{seq}")
    got = {
        stage: {k: row[k] for k in ("calls", "errors", "tokens", "cost_known")}
        for stage, row in _by_stage(chdb_store).items()
    }
    assert got == _expected(spans)
