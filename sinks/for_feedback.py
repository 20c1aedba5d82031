"""The store as end users' feedback meets it: the receiver's writes (`POST /v1/feedback`, through the agent), and
the reads that use it — figures per feature (`ragmon report`, the API), each trace's verdict beside the judge's
score (`ragmon calibrate --from-store`) and the review queue's disagreements. The SQL and why it joins at read time:
`feedback_sql.py`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from ragmon.sinks.feedback_sql import by_question_sql, disagreements_sql, feedback_scores_sql, summary_sql
from ragmon.sinks.inserts import rows_token
from ragmon.sinks.schema import FEEDBACK_COLUMNS, FEEDBACK_WRITES_TABLE
from ragmon.sinks.store_base import StoreBase
from ragmon.sinks.traffic import PRODUCTION, Traffic


class FeedbackStore(Protocol):
    """What the feedback endpoint writes through (the agent's wiring)."""

    def insert_feedback(self, rows: Iterable[Mapping[str, Any]]) -> str: ...


class FeedbackMethods(StoreBase):
    """Feedback's methods of `Store`."""

    def insert_feedback(self, rows: Iterable[Mapping[str, Any]]) -> str:
        """Feedback rows (keys of `schema.FEEDBACK_COLUMNS`) into the log `feedback_writes`; its view puts them in
        `feedback`, where each replaces the same voter's earlier value. The deduplication token leaves out the
        arrival time, so the same batch sent again (a client's retry) is dropped by the engine, audit row included;
        one that slips past the token's window still counts once in `feedback` (same voter, same key)."""
        rows = list(rows)
        token = rows_token(FEEDBACK_WRITES_TABLE, [{k: v for k, v in r.items() if k != "received_at"} for r in rows])
        return self._insert_rows(FEEDBACK_WRITES_TABLE, FEEDBACK_COLUMNS, rows, token)

    def feedback_summary(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        tenant: str | None = None,
        traffic: Traffic = PRODUCTION,
    ) -> list[dict[str, Any]]:
        """Feedback received in the last `since_s` seconds per feature and release (`feedback_sql.summary_sql`);
        unmatched feedback (its trace not in the store) under feature ''."""
        params: dict[str, Any] = {"since_s": int(since_s)}
        if feature:
            params["feature"] = feature
        sql = summary_sql(self._ddl, feature, traffic, params)
        rows = self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)
        for row in rows:
            for name in ("mean_rating", "negative_share"):
                if row.get(name) is not None:
                    row[name] = float(row[name])
        return rows

    def feedback_by_question(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        tenant: str | None = None,
        traffic: Traffic = PRODUCTION,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        """Feedback received in the last `since_s` seconds per feature and recurring question group, the groups with
        the most negative verdicts first (`feedback_sql.by_question_sql`): where users disagree, by what they ask."""
        params: dict[str, Any] = {"since_s": int(since_s), "limit": int(limit)}
        if feature:
            params["feature"] = feature
        sql = by_question_sql(self._ddl, feature, traffic, params)
        rows = self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)
        for row in rows:
            for name in ("mean_rating", "negative_share"):
                if row.get(name) is not None:
                    row[name] = float(row[name])
        return rows

    def feedback_scores(
        self, since_s: float, *, judge_version: str | None = None, tenant: str | None = None
    ) -> list[dict[str, Any]]:
        """Each trace's end-user verdict of the last `since_s` seconds beside the judge's latest score of it, per
        metric and judge version (`feedback_sql.feedback_scores_sql`): `calibrate --from-store`'s second truth."""
        params: dict[str, Any] = {"since_s": int(since_s)}
        if judge_version is not None:
            params["judge_version"] = judge_version
        sql = feedback_scores_sql(self._ddl, one_version=judge_version is not None)
        rows = self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)
        for row in rows:
            row["label"] = bool(row["label"])
        return rows

    def feedback_disagreements(
        self, metric: str, *, since_s: float, threshold: float, limit: int, tenant: str | None
    ) -> list[dict[str, Any]]:
        """Kept traces users judged negative while the judge passed them on `metric`
        (`feedback_sql.disagreements_sql`)."""
        params = {"metric": metric, "since_s": int(since_s), "threshold": float(threshold), "limit": int(limit)}
        return self._caller_rows(disagreements_sql(self._ddl), params, tenant=tenant, tenant_filter=True)
