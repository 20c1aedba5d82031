"""The tail sampler's kept share by reason over a window, from the per-minute decision counts (`sampling_1m`).

`kept_share_sql` returns the SQL and its `{name:Type}` parameters, like `ragmon.sinks.quality`; `Store.kept_share`
runs them as a caller's read, with the tenant filter, and `summarise`s the rows (the named read `kept_share` of
`ragmon report`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from ragmon.sinks.schema import SAMPLING_TABLE
from ragmon.sinks.traffic import PRODUCTION, Traffic


def kept_share_sql(
    start_s: int,
    end_s: int,
    feature: str | None = None,
    table: str = SAMPLING_TABLE,
    traffic: Traffic = PRODUCTION,
) -> tuple[str, dict[str, Any]]:
    """Traces decided per (feature, outcome, reason) in the minutes of [start_s, end_s], of `traffic`."""
    params: dict[str, Any] = {"start_s": int(start_s), "end_s": int(end_s)}
    where = [
        "minute >= toStartOfMinute(toDateTime({start_s:Int64}))",
        "minute <= toDateTime({end_s:Int64})",
        traffic.condition(params),
    ]
    if feature is not None:
        where.append("feature = {feature:String}")
        params["feature"] = feature
    sql = (
        f"SELECT feature, outcome, reason, sum(traces) AS traces FROM {table} WHERE {' AND '.join(where)}"
        " GROUP BY feature, outcome, reason ORDER BY feature, outcome, reason"
    )
    return sql, params


def summarise(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """{decided, kept, kept_by_reason: {reason: traces}, dropped, budget_refused, features: {feature: {decided,
    kept, kept_by_reason}}} from (feature, outcome, reason, traces) rows — or from the sampler's own counts."""
    features: dict[str, dict[str, Any]] = defaultdict(lambda: {"decided": 0, "kept": 0, "kept_by_reason": Counter()})
    kept_by_reason: Counter[str] = Counter()
    dropped = budget_refused = 0
    for row in rows:
        n = int(row["traces"])
        entry = features[str(row["feature"])]
        entry["decided"] += n
        if row["outcome"] == "keep":
            entry["kept"] += n
            entry["kept_by_reason"][row["reason"]] += n
            kept_by_reason[row["reason"]] += n
        elif row["outcome"] == "drop":
            dropped += n
        elif row["reason"] == "budget":
            budget_refused += n
    return {
        "decided": sum(f["decided"] for f in features.values()),
        "kept": sum(kept_by_reason.values()),
        "kept_by_reason": dict(kept_by_reason.most_common()),
        "dropped": dropped,
        "budget_refused": budget_refused,
        "features": {
            name: {**entry, "kept_by_reason": dict(entry["kept_by_reason"].most_common())}
            for name, entry in sorted(features.items())
        },
    }


def format_kept_share(summary: Mapping[str, Any]) -> str:
    """One line for all traffic (and one per feature when there are several): kept of decided, and by reason —
    each kept trace under its first reason, so the parts add up to the whole."""
    if not summary["decided"]:
        return "tail sampler: no traces decided in this window"
    lines = ["tail sampler: " + _line(summary)]
    if len(summary["features"]) > 1:
        lines += [f"  {name or '(no feature)'}: {_line(entry)}" for name, entry in summary["features"].items()]
    extra = []
    if summary.get("dropped"):
        extra.append(f"{summary['dropped']:,} dropped by rules")
    if summary.get("budget_refused"):
        extra.append(f"{summary['budget_refused']:,} refused by the keep budget")
    if extra:
        lines.append("  (" + "; ".join(extra) + ")")
    return "\n".join(lines)


def _line(entry: Mapping[str, Any]) -> str:
    decided, kept = entry["decided"], entry["kept"]
    parts = ", ".join(f"{reason} {n:,} ({_pct(n, decided)})" for reason, n in entry["kept_by_reason"].items())
    return f"kept the text of {kept:,} of {decided:,} traces ({_pct(kept, decided)})" + (f": {parts}" if parts else "")


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "-"
