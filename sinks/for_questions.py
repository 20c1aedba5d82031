"""The store as the recurring questions see it: the agent's question stage reads each decided range's traces with
their questions and writes their groups (`ragmon.pipeline`'s question stage, `ragmon.questions`); the view of the
most common questions is a caller's read (the named read `question_groups`: `ragmon report`, the API, the
dashboard). SQL: `questions_sql.py`."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from ragmon.sinks.quality import weighted_estimate
from ragmon.sinks.questions_sql import (
    question_details_sql,
    question_figures_sql,
    question_groups_sql,
    trace_questions_sql,
)
from ragmon.sinks.schema import (
    DURATION_LEVELS,
    QUESTION_GROUP_COLUMNS,
    QUESTION_GROUPS_TABLE,
    TRACE_QUESTION_COLUMNS,
    TRACE_QUESTIONS_TABLE,
)
from ragmon.sinks.store_base import StoreBase
from ragmon.sinks.traffic import PRODUCTION, Traffic


class QuestionStore(Protocol):
    """What the agent's question stage depends on."""

    def trace_questions(
        self, seq_from: int, seq_to: int, context_from: int, context_to: int | None = None
    ) -> list[dict[str, Any]]: ...

    def question_groups_held(self, per_feature: int) -> list[dict[str, Any]]: ...

    def insert_trace_questions(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str: ...

    def insert_question_groups(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str: ...


class QuestionViewStore(Protocol):
    """What the named read `question_groups` runs on."""

    def question_groups(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        limit: int = 20,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
    ) -> list[dict[str, Any]]: ...


class QuestionMethods(StoreBase):
    """The question stage's methods of `Store`, and the question-group view."""

    def trace_questions(
        self, seq_from: int, seq_to: int, context_from: int, context_to: int | None = None
    ) -> list[dict[str, Any]]:
        """One row per trace whose root span was stored in [seq_from, seq_to], its spans read from context_from to
        context_to (None: all stored): `questions_sql.trace_questions_sql`."""
        params = {
            "seq_from": int(seq_from),
            "seq_to": int(seq_to),
            "context_from": int(min(context_from, seq_from)),
            "context_to": 2**64 - 1 if context_to is None else int(context_to),
        }
        # a trace is whole on one shard: the IN subqueries run shard by shard
        return self._select(
            trace_questions_sql(self._ddl), params, readonly=True, settings={"distributed_product_mode": "local"}
        )

    def question_groups_held(self, per_feature: int) -> list[dict[str, Any]]:
        """The stored groups' latest state, the `per_feature` most asked of each (tenant, feature)."""
        return self._select(question_groups_sql(self._ddl), {"per_feature": int(per_feature)}, readonly=True)

    def insert_trace_questions(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str:
        return self._insert_rows(TRACE_QUESTIONS_TABLE, TRACE_QUESTION_COLUMNS, rows, dedup_token)

    def insert_question_groups(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str:
        return self._insert_rows(QUESTION_GROUPS_TABLE, QUESTION_GROUP_COLUMNS, rows, dedup_token)

    def question_groups(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        limit: int = 20,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
    ) -> list[dict[str, Any]]:
        """The `limit` most asked question groups of the last `since_s` seconds, most asked first: share of the
        grouped requests, requests, examples, error rate, p95 duration, judged quality per metric weighted by
        inclusion probability and the refusal rate — and each as it was over the `since_s` before (`previous`)."""
        end_s = int(time.time() if now_s is None else now_s)
        start_s = end_s - int(since_s)
        # two reads: every group's counts (from the hourly rollup and the window's edges), then the details of
        # the `limit` most asked only — examples, label, judged quality — so no part runs over every trace
        sql, params = question_figures_sql(self._ddl, start_s, end_s, feature, traffic)
        figures = self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)
        top = ranked_groups(figures, limit)
        if not top:
            return []
        groups = sorted({gid for _, _, gid in top})
        sql, params = question_details_sql(self._ddl, start_s, end_s, feature, groups, traffic)
        details = self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)
        return assemble_question_groups(figures, details, top)


_P95 = DURATION_LEVELS.index(0.95)


def ranked_groups(figures: list[dict[str, Any]], limit: int) -> list[tuple[str, str, str]]:
    """The `limit` groups with the most requests in the window (`period` 1), most first; ties by group id."""
    current = [r for r in figures if int(r["period"]) == 1]
    current.sort(key=lambda r: (-int(r["requests"]), str(r["group_id"])))
    return [(str(r["tenant"]), str(r["feature"]), str(r["group_id"])) for r in current[: max(int(limit), 0)]]


def _figures(row: Mapping[str, Any] | None, period_requests: int, judged: list[dict[str, Any]]) -> dict[str, Any]:
    if row is None:
        return {"requests": 0, "share": 0.0, "error_rate": None, "p95_ms": None, "refusal_rate": None, "quality": {}}
    requests = int(row["requests"])
    quality: dict[str, Any] = {}
    n_judged = refusals = 0
    for entry in judged:
        n, weighted_n = int(entry["judged"]), int(entry["weighted_n"])
        n_judged, refusals = n_judged + n, refusals + int(entry["refusals"])
        sums = (float(entry[k] or 0.0) for k in ("sum_w", "sum_wy", "sum_w2", "sum_w2y", "sum_w2y2"))
        quality[str(entry["metric"])] = {"judged": n, "n": weighted_n, **weighted_estimate(weighted_n, *sums)}
    quantiles = row["duration_quantiles"] or []
    p95 = float(quantiles[_P95]) if len(quantiles) > _P95 else float("nan")
    return {
        "requests": requests,
        "share": requests / period_requests if period_requests else 0.0,
        "error_rate": int(row["errors"]) / requests if requests else None,
        "p95_ms": p95 if p95 == p95 else None,
        "refusal_rate": refusals / n_judged if n_judged else None,
        "quality": quality,
    }


def _change(now: Any, before: Any) -> float | None:
    return None if now is None or before is None else float(now) - float(before)


def assemble_question_groups(
    figures: list[dict[str, Any]], details: list[dict[str, Any]], top: list[tuple[str, str, str]]
) -> list[dict[str, Any]]:
    """The two reads' rows → one entry per group of `top`, in its order, with `previous` (the window before) and
    `change` (now − before; None where either side has no value). Shares are of every grouped request of the
    period (all groups, not only `top`)."""
    totals = {0: 0, 1: 0}
    by_key: dict[tuple[str, str, str], dict[int, dict[str, Any]]] = {}
    for row in figures:
        period = int(row["period"])
        totals[period] = totals.get(period, 0) + int(row["requests"])
        by_key.setdefault((str(row["tenant"]), str(row["feature"]), str(row["group_id"])), {})[period] = row
    judged: dict[tuple[str, str, str, int], list[dict[str, Any]]] = {}
    traces: dict[tuple[str, str, str], set[str]] = {}
    described: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in details:
        key = (str(row["tenant"]), str(row["feature"]), str(row["group_id"]))
        if row["metric"]:
            judged.setdefault((*key, int(row["period"])), []).append(row)
            if int(row["period"]) == 1:  # a judged row's `examples` are its trace ids
                traces.setdefault(key, set()).update(str(t) for t in row["examples"] or [])
        else:
            described[key] = row
    out = []
    for key in top:
        periods = by_key.get(key, {})
        now = _figures(periods.get(1), totals[1], judged.get((*key, 1), []))
        before = _figures(periods.get(0), totals[0], judged.get((*key, 0), []))
        change: dict[str, Any] = {
            name: _change(now[name], before[name]) for name in ("share", "error_rate", "p95_ms", "refusal_rate")
        }
        change["quality"] = {
            metric: _change(q["mean"], before["quality"].get(metric, {}).get("mean"))
            for metric, q in now["quality"].items()
        }
        about = described.get(key, {})
        examples = [str(e) for e in about.get("examples") or []]
        tenant, feature, gid = key
        out.append(
            {
                "tenant": tenant,
                "feature": feature,
                "group_id": gid,
                "label": str(about.get("label") or (examples[0] if examples else "")),
                "examples": examples,
                "trace_ids": sorted(traces.get(key, set()))[:10],  # judged traces of the window: the trace view's
                **now,
                "previous": before,
                "change": change,
            }
        )
    return out
