"""The document views (`Store.documents`, `problem_documents`, `document_shift`) on both backends, over rows whose
answers are known: the incident in miniature — release v2 of `support` stops retrieving the refund paragraph for the
refund question and answers it from the pricing paragraph, judged unfaithful — beside a feature that does not
rerank, evaluation traffic and another tenant, which must not count.

What each view must say is computed here from the same rows: the final context is the reranker's output (a
chunk the retriever found and the reranker dropped never counts), else the retriever's; a document is its source
where the app names one, else its chunk id.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from ragmon.sinks import Store
from ragmon.sinks.named_reads import BadParameter, named_read, run_read
from ragmon.sinks.schema import (
    QUESTION_GROUP_COLUMNS,
    QUESTION_GROUPS_TABLE,
    TRACE_QUESTION_COLUMNS,
    TRACE_QUESTIONS_TABLE,
)

from tests.support.span_rows import SpanBatch, insert_spans

NOW_S = int(time.time()) // 60 * 60 - 600
REFUND_Q, INSTALL_Q = "How long do I have to return an item?", "How do I install the app?"

# (tenant, feature, release, eval_run, group, search docs [(chunk, source)], rerank docs or None, faithfulness, p)
Trace = tuple[str, str, str, str, str, list[tuple[str, str]], list[tuple[str, str]] | None, float | None, float]


def _traces() -> list[Trace]:
    out: list[Trace] = []
    noise = ("c-noise", "noise.md#p9")  # found by the retriever, dropped by the reranker
    faq = ("c-faq1", "faq.md#p1")
    for i in range(20):
        # v1: the refund paragraph first; judged faithful. v2: the pricing paragraph instead; judged unfaithful
        p = 0.5 if i % 2 else 1.0
        out.append(("acme", "support", "v1", "", "g-refund", [noise, ("c-r3", "refunds.md#p3"), faq],
                    [("c-r3", "refunds.md#p3"), faq], 0.9, p))  # fmt: skip
        out.append(("acme", "support", "v2", "", "g-refund", [noise, ("c-p2", "pricing.md#p2"), faq],
                    [("c-p2", "pricing.md#p2"), faq], 0.2, p))  # fmt: skip
    for i in range(10):
        for release in ("v1", "v2"):
            # the install paragraph, re-chunked in v2 (a new chunk id, the same paragraph)
            chunk = "c-i1" if release == "v1" else "c-i1-new"
            out.append(("acme", "support", release, "", "g-install", [(chunk, "install.md#p1"), faq],
                        [(chunk, "install.md#p1"), faq], 0.8 if i % 5 else None, 1.0))  # fmt: skip
    for _ in range(5):
        # a feature without a reranker; a chunk without a source is its own document
        out.append(("acme", "billing", "v1", "", "g-bill", [("c-b1", "billing.md#p1"), ("c-loose", "")], None,
                    None, 1.0))  # fmt: skip
    out.append(("acme", "support", "v2", "nightly", "g-refund", [("c-e", "eval-only.md")], [("c-e", "eval-only.md")],
                0.0, 1.0))  # fmt: skip
    out.append(("other", "support", "v2", "", "g-refund", [("c-o", "other-tenant.md")], [("c-o", "other-tenant.md")],
                0.0, 1.0))  # fmt: skip
    return out


def _span(batch: SpanBatch, tenant: str, trace: str, n: int, stage: str, feature: str, release: str,
          eval_run: str, start_ns: int, docs: list[tuple[str, str]]) -> None:  # fmt: skip
    values: dict[str, Any] = {
        "tenant": tenant, "trace_id": trace, "span_id": f"{int(trace[:8], 16) * 8 + n:016x}",
        "parent_span_id": "" if n == 0 else f"{int(trace[:8], 16) * 8:016x}", "name": stage, "stage": stage,
        "feature": feature, "eval_run": eval_run, "user": "", "session": "", "service": "bot", "release": release,
        "environment": "prod", "start_time": start_ns + n * 1000, "duration_ms": 10.0, "status": "ok",
        "error_type": "", "model": "", "provider": "", "input_tokens": 0, "output_tokens": 0,
        "cached_input_tokens": 0, "cost_usd": None, "top1_score": None, "similarity_gap": None,
        "norm_deviation": None, "ttft_ms": None, "retrieved_ids": [c for c, _ in docs],
        "retrieved_scores": [1.0 - 0.1 * i for i in range(len(docs))], "retrieved_sources": [s for _, s in docs],
        "attributes": {}, "ingest_seq": 1,
    }  # fmt: skip
    for name, value in values.items():
        getattr(batch, name).append(value)


def _load(store: Store) -> list[Trace]:
    traces = _traces()
    batch = SpanBatch()
    questions, scores = [], []
    scored_at = datetime.fromtimestamp(NOW_S, UTC)
    for k, (tenant, feature, release, eval_run, group, search, rerank, faith, p) in enumerate(traces):
        trace = f"{k + 1:08x}" + "0" * 24
        start_ns = (NOW_S - 1800 + k) * 10**9
        _span(batch, tenant, trace, 0, "request", feature, release, eval_run, start_ns, [])
        _span(batch, tenant, trace, 1, "search", feature, release, eval_run, start_ns, search)
        if rerank is not None:
            _span(batch, tenant, trace, 2, "rerank", feature, release, eval_run, start_ns, rerank)
        question = REFUND_Q if group == "g-refund" else INSTALL_Q if group == "g-install" else "Why was I billed?"
        questions.append(
            {
                "tenant": tenant,
                "trace_id": trace,
                "feature": feature,
                "eval_run": eval_run,
                "release": release,
                "environment": "prod",
                "start_time": datetime.fromtimestamp(start_ns / 1e9, UTC),
                "group_id": group,
                "question": question,
                "similarity": 1.0,
                "failed": 0,
                "duration_ms": 10.0,
            }
        )
        if faith is not None:
            scores.append(
                {
                    "tenant": tenant,
                    "trace_id": trace,
                    "feature": feature,
                    "eval_run": eval_run,
                    "release": release,
                    "metric": "faithfulness",
                    "judge_version": "v1",
                    "value": faith,
                    "status": "ok",
                    "run_name": "",
                    "scored_at": scored_at,
                    "inclusion_probability": p,
                }
            )
    insert_spans(store, batch)
    store.roll_up(1, 1)  # what the agent does once the sampler has decided the range (every row here is seq 1)
    store._insert_rows(TRACE_QUESTIONS_TABLE, TRACE_QUESTION_COLUMNS, questions, None)
    groups = [
        {"tenant": "acme", "feature": "support", "group_id": g, "label": label, "normalised": label.lower(),
         "grouper": "lexical", "centroid": [], "members": 1, "created_at": scored_at, "updated_at": scored_at}
        for g, label in (("g-refund", REFUND_Q), ("g-install", INSTALL_Q))
    ]  # fmt: skip
    store._insert_rows(QUESTION_GROUPS_TABLE, QUESTION_GROUP_COLUMNS, groups, None)
    store.insert_scores(scores)
    return traces


def test_per_document_retrieval_ranks_groups_and_judged_quality(store: Store) -> None:
    _load(store)
    docs = store.documents(3600, tenant="acme", now_s=NOW_S)
    by_doc = {(d["feature"], d["doc"]): d for d in docs}
    # the final context only: the reranker's output for support, the retriever's for billing; no eval run, no tenant
    assert set(by_doc) == {
        ("support", "refunds.md#p3"),
        ("support", "pricing.md#p2"),
        ("support", "faq.md#p1"),
        ("support", "install.md#p1"),
        ("billing", "billing.md#p1"),
        ("billing", "c-loose"),
    }
    assert next(d["doc"] for d in docs) == "faq.md#p1"  # the most retrieved first
    faq = by_doc[("support", "faq.md#p1")]
    assert (faq["retrieved"], faq["traces"], faq["ranks"], faq["mean_rank"]) == (60, 60, {"2": 60}, 2.0)
    assert [(g["group_id"], g["traces"]) for g in faq["groups"]] == [("g-refund", 40), ("g-install", 20)]
    assert faq["groups"][0]["label"] == REFUND_Q
    install = by_doc[("support", "install.md#p1")]
    assert (install["traces"], install["chunks"], install["first"]) == (20, 2, 20)  # re-chunked: one paragraph
    refund = by_doc[("support", "refunds.md#p3")]
    assert refund["groups"] == [{"group_id": "g-refund", "label": REFUND_Q, "example": REFUND_Q, "traces": 20}]
    faith = refund["quality"]["faithfulness"]
    assert (faith["judged"], faith["bad"], refund["unfaithful_share"]) == (20, 0, 0.0)
    assert faith["kept"]["mean"] == pytest.approx(0.9)
    pricing = by_doc[("support", "pricing.md#p2")]["quality"]["faithfulness"]
    assert (pricing["bad"], pricing["bad_share"], pricing["weighted_bad_share"]) == (20, 1.0, 1.0)
    # faq: half its judged answers bad (the v2 refund ones); weighted by 1/p, mean of 0.9 and 0.2 and 0.8 answers
    faq_q = faq["quality"]["faithfulness"]
    ys = [0.9] * 20 + [0.2] * 20 + [0.8] * 16
    ws = [1 / (0.5 if i % 2 else 1.0) for i in range(20)] * 2 + [1.0] * 16
    assert faq_q["judged"] == 56 and faq_q["bad"] == 20
    assert faq_q["weighted"]["mean"] == pytest.approx(sum(w * y for w, y in zip(ws, ys, strict=True)) / sum(ws))
    assert by_doc[("billing", "billing.md#p1")]["quality"] == {}  # not judged
    only = store.documents(3600, feature="billing", limit=1, tenant="acme", now_s=NOW_S)
    assert [d["doc"] for d in only] == ["billing.md#p1"]


def test_documents_in_answers_judged_bad_against_the_features_rate(store: Store) -> None:
    _load(store)
    rows = store.problem_documents(3600, tenant="acme", now_s=NOW_S)
    # support's judged answers with documents: 40 refund + 16 install, 20 of them unfaithful; faq.md#p1 is in every
    # one of them, so at the baseline (not above it), and the refund paragraph below it
    assert [(r["feature"], r["doc"], r["judged"], r["bad"], r["unfaithful"]) for r in rows] == [
        ("support", "pricing.md#p2", 20, 20, 20),
    ]
    top = rows[0]
    assert top["baseline_share"] == pytest.approx(20 / 56) and top["baseline_judged"] == 56
    assert top["excess"] == pytest.approx(20 - 20 * 20 / 56)
    assert top["z"] is not None and top["z"] > 3
    assert store.problem_documents(3600, min_judged=21, tenant="acme", now_s=NOW_S) == []


def test_documents_a_question_group_stopped_retrieving_between_releases(store: Store) -> None:
    _load(store)
    groups = store.document_shift("support", "v1", "v2", 3600, tenant="acme", now_s=NOW_S)
    assert [(g["group_id"], g["traces_a"], g["traces_b"], g["label"]) for g in groups] == [
        ("g-refund", 20, 20, REFUND_Q),
        ("g-install", 10, 10, INSTALL_Q),
    ]
    refund = groups[0]["documents"]
    assert [(d["doc"], d["share_a"], d["share_b"], d["change"]) for d in refund] == [
        ("pricing.md#p2", 0.0, 1.0, 1.0),
        ("refunds.md#p3", 1.0, 0.0, -1.0),
        ("faq.md#p1", 1.0, 1.0, 0.0),
    ]
    assert refund[1]["z"] is not None and refund[1]["z"] < -5
    # the install paragraph was re-chunked, not lost: by source, nothing changed
    assert {d["doc"]: d["change"] for d in groups[1]["documents"]} == {"install.md#p1": 0.0, "faq.md#p1": 0.0}
    one = store.document_shift("support", "v1", "v2", 3600, group_id="g-refund", limit=1, tenant="acme", now_s=NOW_S)
    assert [(g["group_id"], [d["doc"] for d in g["documents"]]) for g in one] == [("g-refund", ["pricing.md#p2"])]


def test_the_views_are_named_reads_with_checked_parameters(store: Store) -> None:
    _load(store)
    values = named_read("document_shift").parse(
        {"feature": ["support"], "release_a": ["v1"], "release_b": ["v2"], "group_id": ["g-refund"]}
    )
    shift = run_read(store, "document_shift", values, tenant="acme")
    assert shift[0]["group_id"] == "g-refund" and shift[0]["documents"][0]["doc"] in {"pricing.md#p2", "refunds.md#p3"}
    with pytest.raises(BadParameter, match="release_b"):
        run_read(store, "document_shift", named_read("document_shift").parse({"feature": ["support"],
                 "release_a": ["v1"]}), tenant="acme")  # fmt: skip
    docs = run_read(store, "documents", named_read("documents").parse({"limit": ["2"]}), tenant="acme")
    assert [d["doc"] for d in docs] == ["faq.md#p1", "install.md#p1"][: len(docs)] and len(docs) == 2
    with pytest.raises(BadParameter):
        named_read("problem_documents").parse({"min_judged": ["0"]})


def test_the_reports_documents_section(store: Store) -> None:
    from ragmon.commands.report import format_documents

    _load(store)
    top = store.documents(3600, feature="support", limit=10, tenant="acme", now_s=NOW_S)
    problems = store.problem_documents(3600, feature="support", limit=10, tenant="acme", now_s=NOW_S)
    lines = format_documents({"top": top, "problems": problems}).splitlines()
    assert lines[0] == "documents (the 4 most retrieved into answers' final context)"
    faq = next(line.split() for line in lines if "faq.md#p1" in line)
    # feature, document, retrieved, traces, mean rank, first, chunks, unfaithful share, the top group's question
    assert faq[:8] == ["support", "faq.md#p1", "60", "60", "2.0", "0", "1", f"{20 / 56:.0%}"]
    assert " ".join(faq[8:]) == REFUND_Q
    pricing = next(line.split() for line in lines if line.startswith("support") and "pricing.md#p2" in line)
    assert pricing[:8] == ["support", "pricing.md#p2", "20", "20", "1.0", "20", "1", "100%"]
    at = lines.index("problem documents (in answers judged unfaithful or unhelpful more often than the feature's)")
    assert lines[at + 3].split()[:5] == ["support", "pricing.md#p2", "20/20", "100%", f"{20 / 56:.0%}"]
    assert format_documents({"top": [], "problems": []}) == "documents: no retrieved documents in this window"
