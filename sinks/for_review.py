"""The store as the review queue sees it (`ragmon.dashboard.review`): which traces may be labelled, the queue of
traces to label per score bin, a reviewer's count, a trace's labels, the labels written; and each label beside the
judge's score of the same trace (`ragmon calibrate --from-store`, the review page's agreement). Reads are the
caller's (budgeted, filtered to the tenant when one is given); labels go to the audit log `label_writes`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from ragmon.sinks.labels_sql import (
    kept_trace_sql,
    labelled_scores_sql,
    review_queue_sql,
    reviewer_label_count_sql,
    trace_labels_sql,
)
from ragmon.sinks.schema import LABEL_COLUMNS, LABEL_WRITES_TABLE
from ragmon.sinks.store_base import StoreBase


class ReviewStore(Protocol):
    """What the review queue reads and writes."""

    def is_kept_trace(self, tenant: str, trace_id: str) -> bool: ...

    def insert_labels(self, rows: Iterable[Mapping[str, Any]]) -> str: ...

    def feedback_disagreements(
        self, metric: str, *, since_s: float, threshold: float, limit: int, tenant: str | None
    ) -> list[dict[str, Any]]: ...

    def review_queue(
        self, metric: str, *, since_s: float, per_bin: int, bins: int, reviewer: str, tenant: str | None
    ) -> list[dict[str, Any]]: ...

    def trace_labels(self, trace_id: str, *, tenant: str | None) -> list[dict[str, Any]]: ...

    def reviewer_label_count(self, metric: str, reviewer: str, *, tenant: str | None) -> int: ...

    def labelled_scores(
        self, since_s: float, *, judge_version: str | None = None, tenant: str | None = None
    ) -> list[dict[str, Any]]: ...


class ReviewMethods(StoreBase):
    """The review queue's methods of `Store`."""

    def is_kept_trace(self, tenant: str, trace_id: str) -> bool:
        """Whether `tenant` has a kept trace `trace_id` (its payload): what may be labelled."""
        rows = self._caller_rows(kept_trace_sql(self._ddl), {"tenant": tenant, "trace_id": trace_id}, tenant=tenant)
        return bool(rows and rows[0]["kept"])

    def review_queue(
        self, metric: str, *, since_s: float, per_bin: int, bins: int, reviewer: str, tenant: str | None
    ) -> list[dict[str, Any]]:
        """Traces to label for `metric`, `per_bin` per score bin (`labels_sql.review_queue_sql`)."""
        params = {
            "metric": metric,
            "since_s": int(since_s),
            "per_bin": int(per_bin),
            "bins": int(bins),
            "reviewer": reviewer,
        }
        return self._caller_rows(review_queue_sql(self._ddl), params, tenant=tenant, tenant_filter=True)

    def reviewer_label_count(self, metric: str, reviewer: str, *, tenant: str | None) -> int:
        """Traces `reviewer` has labelled for `metric`."""
        params = {"metric": metric, "reviewer": reviewer}
        sql = reviewer_label_count_sql(self._ddl)
        return int(self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)[0]["n"])

    def trace_labels(self, trace_id: str, *, tenant: str | None) -> list[dict[str, Any]]:
        """A trace's current labels, every metric and reviewer."""
        return self._caller_rows(trace_labels_sql(self._ddl), {"trace_id": trace_id}, tenant=tenant, tenant_filter=True)

    def labelled_scores(
        self, since_s: float, *, judge_version: str | None = None, tenant: str | None = None
    ) -> list[dict[str, Any]]:
        """Labels of the last `since_s` seconds beside the judge's score of the same trace and metric, per judge
        version (`labels_sql.labelled_scores_sql`): what `ragmon calibrate --from-store` measures agreement on."""
        params: dict[str, Any] = {"since_s": int(since_s)}
        if judge_version is not None:
            params["judge_version"] = judge_version
        sql = labelled_scores_sql(self._ddl, one_version=judge_version is not None)
        rows = self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)
        for row in rows:
            row["label"] = bool(row["label"])
        return rows

    def insert_labels(self, rows: Iterable[Mapping[str, Any]]) -> str:
        """People's labels with keys from `schema.LABEL_COLUMNS`, into the audit log `label_writes`; its view puts
        them in `labels`, where each replaces the reviewer's earlier label of that trace and metric. No caller's
        token: two writes of the same label at different times are two audit rows."""
        return self._insert_rows(LABEL_WRITES_TABLE, LABEL_COLUMNS, rows, None)
