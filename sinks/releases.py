"""Releases: which release of the app (`service.version`) and where it runs (`deployment.environment.name`) a read
covers, and the releases read — each release seen in a window, per feature, with its numbers side by side.

The store keeps both on spans, payloads and the rollups' keys (schema v10: the trace's release is its outermost
span's that has one), and the release on scores (the judge copies it from the payload it judged). So:

- `Where` narrows a read to one release and/or one environment: a condition on the columns of the rollups, spans
  or payloads (`condition`), and on scores (`scores_condition`: their own release; their environment through their
  trace's payload, the one place a score's environment is kept — so while payloads last, 14 days by default);
- `releases_sql` reads, per (feature, release), requests, errors, the request p95 and the cost per request from the
  rollups (whole hours from `spans_1h`, the edges from `spans_1m`, as the report), and when each release was first
  and last seen from the minute rollup (to the minute); its judged quality is the report's weighted estimate,
  grouped by release instead of by day (`ragmon.sinks.quality`), joined on in `assemble_releases`.

The sampler's per-minute counts are not kept per release, so the kept share has no release filter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ragmon.sinks.queries import full_hours
from ragmon.sinks.schema import DURATION_LEVELS, DURATION_STATE, HOUR_ROLLUP_TABLE, ROLLUP_TABLE, Ddl, Topology
from ragmon.sinks.traffic import PRODUCTION, Traffic

_MERGE_DURATION_IF = DURATION_STATE.replace("(", "MergeIf(", 1)
_P95 = DURATION_LEVELS.index(0.95) + 1


@dataclass(frozen=True, slots=True)
class Where:
    """One release and/or one environment (None: any). '' is a name too: the traffic that sent none."""

    release: str | None = None
    environment: str | None = None

    @property
    def is_any(self) -> bool:
        return self.release is None and self.environment is None

    def condition(self, params: dict[str, Any], prefix: str = "") -> str:
        """A SQL condition on `{prefix}release` / `{prefix}environment` ('1' for any); names are parameters."""
        parts = []
        if self.release is not None:
            params["release"] = self.release
            parts.append(f"{prefix}release = {{release:String}}")
        if self.environment is not None:
            params["environment"] = self.environment
            parts.append(f"{prefix}environment = {{environment:String}}")
        return " AND ".join(parts) or "1"

    def scores_condition(self, params: dict[str, Any], payloads_table: str = "payloads") -> str:
        """A condition on a `scores` row (unqualified columns, for a WHERE over `scores` alone): its own release,
        its environment through its trace's payload."""
        parts = []
        if self.release is not None:
            params["release"] = self.release
            parts.append("release = {release:String}")
        if self.environment is not None:
            params["environment"] = self.environment
            traces = f"SELECT trace_id FROM {payloads_table} WHERE environment = {{environment:String}}"
            parts.append(f"trace_id IN ({traces})")
        return " AND ".join(parts) or "1"

    def label(self) -> str:
        parts = []
        if self.release is not None:
            parts.append(f"release {self.release or '(none)'}")
        if self.environment is not None:
            parts.append(f"environment {self.environment or '(none)'}")
        return ", ".join(parts) or "every release"


ANY = Where()


def releases_sql(
    topology: Topology,
    start_s: int,
    end_s: int,
    feature: str | None,
    tenant: str | None,
    traffic: Traffic = PRODUCTION,
    where: Where = ANY,
) -> tuple[str, dict[str, Any]]:
    """Per (feature, release) over whole minutes in [start_s, end_s] of `traffic`: requests and errors (root spans),
    their p95, cost over every stage, the environments, and the first and last minute the release was seen."""
    first_hour, end_hour = full_hours(int(start_s), int(end_s))
    params: dict[str, Any] = {"start_s": int(start_s), "end_s": int(end_s), "h0": first_hour, "h1": end_hour}
    filters = [traffic.condition(params), where.condition(params)]
    if tenant is not None:
        filters.append("tenant = {tenant:String}")
        params["tenant"] = tenant
    if feature is not None:
        filters.append("feature = {feature:String}")
        params["feature"] = feature
    window = ["minute >= toStartOfMinute(toDateTime({start_s:Int64}))", "minute <= toDateTime({end_s:Int64})"]
    outside_hours = "NOT (minute >= toDateTime({h0:Int64}) AND minute < toDateTime({h1:Int64}))"
    minute_where = " AND ".join([*window, outside_hours, *filters])
    hour_where = " AND ".join(["hour >= toDateTime({h0:Int64})", "hour < toDateTime({h1:Int64})", *filters])
    seen_where = " AND ".join([*window, "stage = 'request'", *filters])
    ddl = Ddl(topology)
    columns = "feature, release, environment, stage, spans, errors, duration_q, cost_usd, cost_known"
    request = "stage = 'request'"
    sql = f"""
SELECT n.feature AS feature, n.release AS release, n.environments AS environments, n.requests AS requests,
    n.errors AS errors, n.duration_quantiles AS duration_quantiles, n.cost_usd AS cost_usd,
    n.cost_known AS cost_known, s.first_seen AS first_seen, s.last_seen AS last_seen
FROM (
    SELECT feature, release, arraySort(groupUniqArrayIf(environment, environment != '')) AS environments,
        sumIf(spans, {request}) AS requests, sumIf(errors, {request}) AS errors,
        {_MERGE_DURATION_IF}(duration_q, {request}) AS duration_quantiles,
        sum(cost_usd) AS cost_usd, sum(cost_known) AS cost_known
    FROM (
        SELECT {columns} FROM {ddl.table(HOUR_ROLLUP_TABLE)} WHERE {hour_where}
        UNION ALL
        SELECT {columns} FROM {ddl.table(ROLLUP_TABLE)} WHERE {minute_where}
    )
    GROUP BY feature, release
) AS n
LEFT JOIN (
    -- to the minute, whatever the numbers above were read from
    SELECT feature, release, toUnixTimestamp(min(minute)) AS first_seen, toUnixTimestamp(max(minute)) AS last_seen
    FROM {ddl.table(ROLLUP_TABLE)} WHERE {seen_where}
    GROUP BY feature, release
) AS s ON n.feature = s.feature AND n.release = s.release
ORDER BY feature, first_seen, release"""
    return sql, params


def _iso_minute(value: Any) -> str | None:
    """Unix seconds as ISO 8601 text (UTC); None for 0, the join's default for a release with no root span here."""
    seconds = int(value or 0)
    return datetime.fromtimestamp(seconds, UTC).isoformat() if seconds > 0 else None


def assemble_releases(rows: Iterable[Mapping[str, Any]], quality: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One dict per (feature, release): first/last seen, requests, error rate, request p95, cost per request, and
    `quality`: per (metric, judge version) the judged count and the estimates of `assemble_quality(by="release")`."""
    judged: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for q in quality:
        judged.setdefault((str(q["feature"]), str(q["release"])), []).append(
            {key: q[key] for key in ("metric", "judge_version", "judged", "ok", "kept", "weighted")}
        )
    out = []
    for row in rows:
        requests = int(row["requests"])
        quantiles = list(row["duration_quantiles"] or ())
        p95 = quantiles[_P95 - 1] if len(quantiles) >= _P95 and requests else None
        cost = float(row["cost_usd"]) if row["cost_known"] else None  # no span had a known cost: unknown, not 0
        key = (str(row["feature"]), str(row["release"]))
        out.append(
            {
                "feature": key[0],
                "release": key[1],
                "environments": list(row["environments"] or ()),
                "first_seen": _iso_minute(row.get("first_seen")),
                "last_seen": _iso_minute(row.get("last_seen")),
                "requests": requests,
                "errors": int(row["errors"]),
                "error_rate": int(row["errors"]) / requests if requests else None,
                "p95_ms": None if p95 is None or p95 != p95 else float(p95),
                "cost_per_request_usd": cost / requests if cost is not None and requests else None,
                "quality": judged.get(key, []),
            }
        )
    return out
