"""The store as the recurring questions see it: the agent's question stage reads each decided range's traces with
their questions and writes their groups (`ragmon.pipeline`'s question stage, `ragmon.questions`); the view of the
most common questions is a caller's read (the named read `question_groups`: `ragmon report`, the API, the
dashboard). SQL: `questions_sql.py`."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from ragmon.sinks.quality import weighted_estimate
from ragmon.sinks.questions_sql import question_groups_sql, question_view_sql, trace_questions_sql
from ragmon.sinks.schema import (
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
        sql, params = question_view_sql(self._ddl, start_s, end_s, feature, limit, traffic)
        return assemble_question_groups(self._caller_rows(sql, params, tenant=tenant, tenant_filter=True))


def _figures(row: Mapping[str, Any] | None) -> dict[str, Any]:
    if row is None:
        return {"requests": 0, "share": 0.0, "error_rate": None, "p95_ms": None, "refusal_rate": None, "quality": {}}
    requests = int(row["requests"])
    quality: dict[str, Any] = {}
    judged = refusals = 0
    for entry in row["metrics"]:  # a tuple; the Arrow path reads it as a dict of its positions
        metric, n, refused, weighted_n, *sums = entry.values() if isinstance(entry, dict) else entry
        judged, refusals = judged + int(n), refusals + int(refused)
        estimate = weighted_estimate(int(weighted_n), *(float(x or 0.0) for x in sums))
        quality[str(metric)] = {"judged": int(n), "n": int(weighted_n), **estimate}
    return {
        "requests": requests,
        "share": requests / int(row["period_requests"]) if row["period_requests"] else 0.0,
        "error_rate": int(row["errors"]) / requests if requests else None,
        "p95_ms": float(row["p95_ms"]) if row["p95_ms"] == row["p95_ms"] else None,
        "refusal_rate": refusals / judged if judged else None,
        "quality": quality,
    }


def _change(now: Any, before: Any) -> float | None:
    return None if now is None or before is None else float(now) - float(before)


def assemble_question_groups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The view's rows (one per group and period) → one entry per group, most asked first, with `previous` and
    `change` (now − before; None where either side has no value)."""
    by_group: dict[tuple[str, str, str], dict[int, dict[str, Any]]] = {}
    for row in rows:
        key = (str(row["tenant"]), str(row["feature"]), str(row["group_id"]))
        by_group.setdefault(key, {})[int(row["period"])] = row
    out = []
    for (tenant, feature, gid), periods in by_group.items():
        current, previous = periods.get(1), periods.get(0)
        if current is None:
            continue
        now, before = _figures(current), _figures(previous)
        change: dict[str, Any] = {
            key: _change(now[key], before[key]) for key in ("share", "error_rate", "p95_ms", "refusal_rate")
        }
        change["quality"] = {
            metric: _change(q["mean"], before["quality"].get(metric, {}).get("mean"))
            for metric, q in now["quality"].items()
        }
        examples = [str(e) for e in current["examples"]]
        out.append(
            {
                "tenant": tenant,
                "feature": feature,
                "group_id": gid,
                "label": str(current["label"] or (examples[0] if examples else "")),
                "examples": examples,
                **now,
                "previous": before,
                "change": change,
            }
        )
    out.sort(key=lambda g: (-g["requests"], g["group_id"]))
    return out
