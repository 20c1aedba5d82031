"""The store as the report commands see it: latency, errors, tokens and cost per feature and stage from the
rollups, what the tail sampler kept and judged quality weighted back to all traffic (`ragmon report`), recent and
open alerts and how much production traffic drift rules have had (`ragmon alerts`); what the demo's run stored
(`span_activity`) and the alerts it fired (`alert_rows`).

The commands' reads are callers' reads — under the caller's budget, for one tenant when asked — and each is a named
read (`named_reads.py`), so a command runs it here or through the agent that owns the store, the same either way."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from ragmon.sinks.activity_sql import span_activity_sql
from ragmon.sinks.alerts_sql import alert_rows_sql, recent_alerts_sql
from ragmon.sinks.compare import compare as compare_releases
from ragmon.sinks.drift_sql import production_minutes as production_minutes_sql
from ragmon.sinks.kept_share import kept_share_sql, summarise
from ragmon.sinks.quality import assemble_quality, quality_sql
from ragmon.sinks.queries import assemble_report, report_sql
from ragmon.sinks.releases import Where, assemble_releases, releases_sql
from ragmon.sinks.schema import SAMPLING_TABLE, TRACE_QUESTIONS_TABLE
from ragmon.sinks.store_base import StoreBase
from ragmon.sinks.traffic import PRODUCTION, Traffic


class ReportStore(Protocol):
    """What the report commands read (`labelled_scores`, `ragmon calibrate --from-store`'s, is the review queue's:
    `for_review.py`)."""

    def report(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
        release: str | None = None,
        environment: str | None = None,
    ) -> list[dict[str, Any]]: ...

    def quality(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
        release: str | None = None,
        environment: str | None = None,
    ) -> list[dict[str, Any]]: ...

    def kept_share(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
    ) -> dict[str, Any]: ...

    def releases(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
        release: str | None = None,
        environment: str | None = None,
    ) -> list[dict[str, Any]]: ...

    def recent_alerts(self, since_s: float, limit: int, *, tenant: str | None = None) -> list[dict[str, Any]]: ...

    def production_minutes(self, *, tenant: str | None = None) -> int: ...

    def labelled_scores(
        self, since_s: float, *, judge_version: str | None = None, tenant: str | None = None
    ) -> list[dict[str, Any]]: ...

    def compare(
        self,
        feature: str | None,
        *,
        baseline: str | None = None,
        candidate: str | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any]: ...

    # end users' feedback (`for_feedback.py`): per feature, and each trace's verdict beside the judge's score
    def feedback_summary(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        tenant: str | None = None,
        traffic: Traffic = PRODUCTION,
    ) -> list[dict[str, Any]]: ...

    def feedback_scores(
        self, since_s: float, *, judge_version: str | None = None, tenant: str | None = None
    ) -> list[dict[str, Any]]: ...

    def feedback_by_question(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        tenant: str | None = None,
        traffic: Traffic = PRODUCTION,
        limit: int = 50,
    ) -> list[dict[str, Any]]: ...


class ReportMethods(StoreBase):
    """The report's methods of `Store`."""

    def report(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
        release: str | None = None,
        environment: str | None = None,
    ) -> list[dict[str, Any]]:
        """Latency, errors, tokens and cost per (feature, stage), with a per-model breakdown, over the last
        `since_s` seconds (whole minutes) of `traffic` (production unless asked), of one release and/or environment
        when named — read from the rollups only (whole hours from `spans_1h`, the edges from `spans_1m`)."""
        end_s = int(time.time() if now_s is None else now_s)
        where = Where(release, environment)
        sql, params = report_sql(self.topology, end_s - int(since_s), end_s, feature, tenant, traffic, where)
        # the tenant is a condition of the report's own SQL (`report_sql`): the rollups are read through no filter
        return assemble_report(self._caller_rows(sql, params, tenant=tenant))

    def quality(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
        release: str | None = None,
        environment: str | None = None,
    ) -> list[dict[str, Any]]:
        """Judged quality per (feature, day, metric, judge version) over the last `since_s` seconds: over the kept
        traces and weighted back to all traffic, with 95 % intervals (`ragmon.sinks.quality`); of one release and/or
        environment when named (`ragmon.sinks.releases.Where`)."""
        return self._quality(since_s, feature, tenant, now_s, traffic, Where(release, environment), "day")

    def _quality(
        self,
        since_s: float,
        feature: str | None,
        tenant: str | None,
        now_s: float | None,
        traffic: Traffic,
        where: Where,
        by: str,
    ) -> list[dict[str, Any]]:
        end_s = int(time.time() if now_s is None else now_s)
        scores, payloads = self._ddl.table("scores"), self._ddl.table("payloads")
        sql, params = quality_sql(end_s - int(since_s), end_s, feature, scores, traffic, payloads, where, by)
        return assemble_quality(self._caller_rows(sql, params, tenant=tenant, tenant_filter=True), by)

    def releases(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
        release: str | None = None,
        environment: str | None = None,
    ) -> list[dict[str, Any]]:
        """Each release seen over the last `since_s` seconds (whole minutes), per feature: first and last seen,
        requests, error rate, request p95, cost per request from the rollups, and judged quality per metric
        weighted back to all traffic (`ragmon.sinks.releases`)."""
        end_s = int(time.time() if now_s is None else now_s)
        where = Where(release, environment)
        sql, params = releases_sql(self.topology, end_s - int(since_s), end_s, feature, tenant, traffic, where)
        rows = self._caller_rows(sql, params, tenant=tenant)  # the tenant is a condition of its own SQL
        quality = self._quality(since_s, feature, tenant, end_s, traffic, where, "release")
        return assemble_releases(rows, quality)

    def kept_share(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
    ) -> dict[str, Any]:
        """What the tail sampler decided over the last `since_s` seconds (whole minutes) of `traffic`, kept traces by
        reason, from its per-minute counts (`kept_share.summarise`)."""
        end_s = int(time.time() if now_s is None else now_s)
        table = self._ddl.table(SAMPLING_TABLE)
        sql, params = kept_share_sql(end_s - int(since_s), end_s, feature, table, traffic)
        return summarise(self._caller_rows(sql, params, tenant=tenant, tenant_filter=True))

    def recent_alerts(self, since_s: float, limit: int, *, tenant: str | None = None) -> list[dict[str, Any]]:
        """Alert rows fired within the last `since_s` seconds and every alert never resolved, newest first, at most
        `limit` (`alerts_sql.recent_alerts_sql`; `ragmon alerts` collapses each alert's rows into one)."""
        sql, params = recent_alerts_sql(since_s, limit, self._ddl.table("alerts"))
        return self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)

    def production_minutes(self, *, tenant: str | None = None) -> int:
        """How many minutes of production traffic the store holds: how much baseline the drift rules have had."""
        sql, params = production_minutes_sql()
        rows = self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)
        return int(rows[0]["minutes"]) if rows else 0

    def compare(
        self,
        feature: str | None,
        *,
        baseline: str | None = None,
        candidate: str | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """`candidate` against `baseline` for `feature` (by default the two most recent releases of the feature
        whose newest release appeared last), over the same span of production traffic: overall rows and per
        question group, each delta with its 95 % interval and sample sizes (`ragmon.sinks.compare`)."""
        tables = {name: self._ddl.table(name) for name in ("spans", "payloads", "scores", TRACE_QUESTIONS_TABLE)}

        def run(sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
            return self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)

        return compare_releases(run, tables, feature, baseline, candidate)

    def span_activity(
        self, start_s: float, end_s: float | None = None, *, service: str | None = None
    ) -> dict[str, int]:
        """{spans, traces, last_s} of the spans that started in [start_s, end_s) (of `service` when named):
        `activity_sql.span_activity_sql`."""
        sql, params = span_activity_sql(self._ddl, int(start_s), None if end_s is None else int(end_s), service=service)
        rows = self._select(sql, params, readonly=True)
        row = rows[0] if rows else {}
        return {name: int(row.get(name) or 0) for name in ("spans", "traces", "last_s")}

    def alert_rows(self, alert_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Every stored row (state change) of the alerts `alert_ids` (`alerts_sql.alert_rows_sql`)."""
        if not alert_ids:
            return []
        sql, params = alert_rows_sql(self._ddl, list(alert_ids))
        return self._select(sql, params, readonly=True)
