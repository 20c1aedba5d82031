"""The store as the document views see it (`ragmon report`'s documents sections, the API's named reads, the
dashboard's documents view, `ragmon compare` and the canary): per document, how often production answers were built
on it, at which ranks, for which question groups and how they were judged; the documents that keep appearing in
answers judged bad; and the documents a question group stopped (or started) retrieving between two releases.

The SQL is `ragmon.sinks.documents_sql`'s (what a document is and which spans' documents count is said there);
here each read runs as a caller's read with the tenant filter, and its sums become shares, estimates and z scores.
"""

from __future__ import annotations

import math
import time
from typing import Any, Protocol

from ragmon.sinks.documents_sql import (
    BAD_BELOW,
    document_groups_sql,
    document_quality_sql,
    document_shift_sql,
    documents_sql,
    group_examples_sql,
    problem_documents_sql,
    reranking_sql,
)
from ragmon.sinks.quality import kept_estimate, weighted_estimate
from ragmon.sinks.schema import QUESTION_GROUPS_TABLE, TRACE_QUESTIONS_TABLE
from ragmon.sinks.store_base import StoreBase
from ragmon.sinks.traffic import PRODUCTION, Traffic


class DocumentStore(Protocol):
    """What the document views read."""

    def documents(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        limit: int = 50,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
    ) -> list[dict[str, Any]]: ...

    def problem_documents(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        min_judged: int = 3,
        limit: int = 20,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
    ) -> list[dict[str, Any]]: ...

    def document_shift(
        self,
        feature: str | None,
        release_a: str,
        release_b: str,
        since_s: float,
        *,
        group_id: str | None = None,
        limit: int = 10,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
    ) -> list[dict[str, Any]]: ...


def _z(successes_a: int, n_a: int, successes_b: int, n_b: int) -> float | None:
    """Two-proportion z score of B's share against A's (pooled); None when either side has no traces or the pooled
    share is 0 or 1 (no spread to compare against)."""
    if n_a == 0 or n_b == 0:
        return None
    pooled = (successes_a + successes_b) / (n_a + n_b)
    spread = pooled * (1 - pooled) * (1 / n_a + 1 / n_b)
    if spread <= 0:
        return None
    return (successes_b / n_b - successes_a / n_a) / math.sqrt(spread)


class DocumentMethods(StoreBase):
    """The document views' methods of `Store`."""

    def _window(self, since_s: float, now_s: float | None) -> tuple[int, int]:
        end_s = int(time.time() if now_s is None else now_s)
        return end_s - int(since_s), end_s

    def _reranking(self, start_s: int, end_s: int, traffic: Traffic, tenant: str | None) -> list[str]:
        """The features that rerank in the window, from the document rollups: the per-trace reads then read one
        stage of each feature's spans (`documents_sql.final_context`). A feature whose reranking began within the
        roll-up's last seconds counts as not reranking until its documents are rolled up."""
        sql, params = reranking_sql(self._ddl, start_s, end_s, traffic)
        return sorted(str(r["feature"]) for r in self._caller_rows(sql, params, tenant=tenant, tenant_filter=True))

    def documents(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        limit: int = 50,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
    ) -> list[dict[str, Any]]:
        """The `limit` most retrieved documents of the last `since_s` seconds: per (feature, document) how often and at
        which ranks, from how many chunks, for which question groups (the top three), and the judged quality of the
        answers built on it per metric — kept and weighted back to all traffic, with the share judged bad."""
        start_s, end_s = self._window(since_s, now_s)
        spans = self._ddl.table("spans")
        sql, params = documents_sql(self._ddl, start_s, end_s, feature, traffic, limit)
        rows = self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)
        if not rows:
            return []
        docs = sorted({str(r["doc"]) for r in rows})
        reranking = self._reranking(start_s, end_s, traffic, tenant)
        sql, params = document_groups_sql(
            spans,
            self._ddl.table(TRACE_QUESTIONS_TABLE),
            self._ddl.table(QUESTION_GROUPS_TABLE),
            start_s,
            end_s,
            feature,
            docs,
            traffic,
            reranking=reranking,
        )
        grouped = self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)
        examples: dict[tuple[str, str], str] = {}
        if grouped:
            sql, params = group_examples_sql(
                self._ddl.table(TRACE_QUESTIONS_TABLE),
                start_s,
                end_s,
                feature,
                sorted({str(g["group_id"]) for g in grouped}),
            )
            for e in self._caller_rows(sql, params, tenant=tenant, tenant_filter=True):
                examples[(str(e["feature"]), str(e["group_id"]))] = str(e["example"])
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for g in grouped:
            groups.setdefault((str(g["feature"]), str(g["doc"])), []).append(
                {
                    "group_id": str(g["group_id"]),
                    "label": str(g["label"]),
                    "example": examples.get((str(g["feature"]), str(g["group_id"])), ""),
                    "traces": int(g["traces"]),
                }
            )
        sql, params = document_quality_sql(
            spans, self._ddl.table("scores"), start_s, end_s, feature, docs, traffic, reranking=reranking
        )
        quality: dict[tuple[str, str], dict[str, Any]] = {}
        for q in self._caller_rows(sql, params, tenant=tenant, tenant_filter=True):
            quality.setdefault((str(q["feature"]), str(q["doc"])), {})[str(q["metric"])] = _metric(q)
        out = []
        for r in rows:
            key = (str(r["feature"]), str(r["doc"]))
            metrics = quality.get(key, {})
            faithfulness = metrics.get("faithfulness")
            out.append(
                {
                    "feature": key[0],
                    "doc": key[1],
                    "retrieved": int(r["retrieved"]),
                    "traces": int(r["traces"]),
                    "chunks": int(r["chunks"]),
                    "mean_rank": float(r["mean_rank"]),
                    "first": int(r["first"]),
                    # rank → retrievals at it; the last rank counts every rank from it on
                    "ranks": {str(k): int(v) for k, v in zip(r["rank_keys"], r["rank_counts"], strict=True)},
                    "groups": groups.get(key, []),
                    "quality": metrics,
                    "unfaithful_share": None if faithfulness is None else faithfulness["bad_share"],
                }
            )
        return out

    def problem_documents(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        min_judged: int = 3,
        limit: int = 20,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
    ) -> list[dict[str, Any]]:
        """Documents that keep appearing in answers judged unfaithful or unhelpful: per (feature, document) with at
        least `min_judged` judged answers built on it, how many were judged bad against the feature's rate over all
        its judged answers with documents (the baseline), only those above it, the most excess bad answers first."""
        start_s, end_s = self._window(since_s, now_s)
        sql, params = problem_documents_sql(
            self._ddl.table("spans"),
            self._ddl.table("scores"),
            start_s,
            end_s,
            feature,
            traffic,
            reranking=self._reranking(start_s, end_s, traffic, tenant),
        )
        rows = self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)
        baselines = {str(r["feature"]): r for r in rows if str(r["doc"]) == ""}
        out: list[dict[str, Any]] = []
        for r in rows:
            doc, feat = str(r["doc"]), str(r["feature"])
            judged, bad = int(r["judged"]), int(r["bad"])
            base = baselines.get(feat)
            if doc == "" or base is None or judged < min_judged:
                continue
            base_judged, base_bad = int(base["judged"]), int(base["bad"])
            base_rate = base_bad / base_judged if base_judged else 0.0
            rate = bad / judged
            if rate <= base_rate:
                continue
            expected = judged * base_rate
            spread = math.sqrt(judged * base_rate * (1 - base_rate))
            out.append(
                {
                    "feature": feat,
                    "doc": doc,
                    "judged": judged,
                    "bad": bad,
                    "unfaithful": int(r["unfaithful"]),
                    "unhelpful": int(r["unhelpful"]),
                    "bad_share": rate,
                    "baseline_share": base_rate,
                    "baseline_judged": base_judged,
                    "excess": bad - expected,
                    # how many binomial standard deviations above the baseline; None when the baseline is 0
                    "z": (bad - expected) / spread if spread > 0 else None,
                }
            )
        out.sort(key=lambda d: (-d["excess"], d["feature"], d["doc"]))
        return out[:limit]

    def document_shift(
        self,
        feature: str | None,
        release_a: str,
        release_b: str,
        since_s: float,
        *,
        group_id: str | None = None,
        limit: int = 10,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
    ) -> list[dict[str, Any]]:
        """Documents that stopped (or started) being retrieved for a question group between release A and release
        B of `feature` over the last `since_s` seconds: per group (the busiest first; `group_id` for one), each
        document's share of the group's traces in A and in B, the change and its two-proportion z score, the `limit`
        biggest changes first. What `ragmon compare` and the canary call."""
        start_s, end_s = self._window(since_s, now_s)
        sql, params = document_shift_sql(
            self._ddl.table("spans"),
            self._ddl.table(TRACE_QUESTIONS_TABLE),
            self._ddl.table(QUESTION_GROUPS_TABLE),
            feature,
            release_a,
            release_b,
            start_s,
            end_s,
            group_id,
            traffic,
            # which features rerank is read from the spans here, not the document rollups: `ragmon compare` and
            # the canary call this over spans their callers may not have rolled up
        )
        rows = self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)
        groups: dict[tuple[str, str], dict[str, Any]] = {}
        for r in rows:
            if str(r["doc"]) == "":
                groups[(str(r["feature"]), str(r["group_id"]))] = {
                    "feature": str(r["feature"]),
                    "group_id": str(r["group_id"]),
                    "label": str(r["label"]),
                    "example": str(r["example"]),
                    "traces_a": int(r["traces_a"]),
                    "traces_b": int(r["traces_b"]),
                    "documents": [],
                }
        for r in rows:
            group = groups.get((str(r["feature"]), str(r["group_id"])))
            if str(r["doc"]) == "" or group is None:
                continue
            n_a, n_b = group["traces_a"], group["traces_b"]
            a, b = int(r["traces_a"]), int(r["traces_b"])
            share_a = a / n_a if n_a else None
            share_b = b / n_b if n_b else None
            group["documents"].append(
                {
                    "doc": str(r["doc"]),
                    "traces_a": a,
                    "traces_b": b,
                    "share_a": share_a,
                    "share_b": share_b,
                    "change": None if share_a is None or share_b is None else share_b - share_a,
                    "z": _z(a, n_a, b, n_b),
                }
            )
        out = sorted(groups.values(), key=lambda g: (-(g["traces_a"] + g["traces_b"]), g["group_id"]))
        for group in out:
            group["documents"].sort(key=lambda d: (-abs(d["change"] or 0.0), d["doc"]))
            del group["documents"][limit:]
        return out


def _metric(q: dict[str, Any]) -> dict[str, Any]:
    """One metric's judged quality of the answers built on a document (see `ragmon.sinks.quality`)."""
    judged, weighted_n = int(q["judged"]), int(q["weighted_n"])
    sum_w = float(q["sum_w"] or 0.0)
    return {
        "judged": judged,
        "bad": int(q["bad"]),
        "bad_below": BAD_BELOW,
        "bad_share": int(q["bad"]) / judged if judged else None,
        # the share of all traffic built on the document whose answer is judged bad, weighted like the quality
        "weighted_bad_share": float(q["sum_w_bad"] or 0.0) / sum_w if sum_w > 0 else None,
        "unknown_weight": int(q["unknown_weight"]),
        "kept": kept_estimate(judged, float(q["sum_y"] or 0.0), float(q["sum_y2"] or 0.0)),
        "weighted": {
            "n": weighted_n,
            **weighted_estimate(
                weighted_n,
                sum_w,
                float(q["sum_wy"] or 0.0),
                float(q["sum_w2"] or 0.0),
                float(q["sum_w2y"] or 0.0),
                float(q["sum_w2y2"] or 0.0),
            ),
        },
    }
