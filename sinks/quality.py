"""Judged quality per feature, day, metric and judge version — over the kept traces and weighted back to all traffic.

The tail sampler keeps a trace with a known probability p (`scores.inclusion_probability`, schema v3; it includes
any judge sampling on top), so a kept trace stands for 1 / p traces. Two estimates per group:

- kept: the plain mean of the ok scores, what a dashboard over kept traces shows. Errors and slow traces are kept
  far more often than the rest, so this mean leans towards the bad cases;
- weighted: the Hájek estimator Σ w·y / Σ w with w = 1 / p, the mean over all traffic. Its variance is the
  linearised (with-replacement) one, Σ w²(y − μ)² / (Σ w)², times n / (n − 1); scores whose p is unknown (older
  rows, back-evaluation runs) are left out of it and counted in `unknown_weight`.

Both intervals are 95 % normal approximations, clipped to [0, 1] (every metric lives there); with fewer than two
scores there is no interval (None), and with few scores the interval is optimistic. Only online scores
(`run_name = ''`) count; the day is the day the trace was scored (scores carry no trace start time).

`quality_sql` returns the SQL and its `{name:Type}` parameters; `Store.quality` runs them as a caller's read, with
the tenant filter, and `assemble_quality` turns the sums into estimates (the named read `quality` of `ragmon
report`).
"""

from __future__ import annotations

import math
from typing import Any

from ragmon.sinks.releases import ANY, Where
from ragmon.sinks.traffic import PRODUCTION, Traffic

Z_95 = 1.959963984540054
# What a quality row is per, beside feature, metric and judge version: the day the trace was scored, or its release.
_GROUPS = {"day": "toString(toDate(scored_at))", "release": "release"}


def quality_sql(
    start_s: int,
    end_s: int,
    feature: str | None = None,
    table: str = "scores",
    traffic: Traffic = PRODUCTION,
    payloads_table: str = "payloads",
    release_where: Where = ANY,
    by: str = "day",
) -> tuple[str, dict[str, Any]]:
    """One row of sums per (feature, day, metric, judge version) over scores in [start_s, end_s) of `traffic`
    (production unless asked; by the score's own eval run, and for rows scored before schema v9 through their
    trace's payload: `ragmon.sinks.traffic`) and of `release_where`'s release and environment (`ragmon.sinks.releases`).
    `by="release"` groups by the score's release instead of its day (the releases read)."""
    if by not in _GROUPS:
        raise ValueError(f"quality is grouped by one of {', '.join(_GROUPS)}, not {by!r}")
    ok = "status = 'ok' AND value IS NOT NULL"
    params: dict[str, Any] = {"start_s": int(start_s), "end_s": int(end_s)}
    where = [
        "run_name = ''",
        "scored_at >= toDateTime64({start_s:Int64}, 3)",
        "scored_at < toDateTime64({end_s:Int64}, 3)",
        traffic.scores_condition(params, payloads_table),
        release_where.scores_condition(params, payloads_table),
    ]
    if feature is not None:
        where.append("feature = {feature:String}")
        params["feature"] = feature
    sql = (
        f"SELECT feature, {_GROUPS[by]} AS {by}, metric, judge_version,\n"
        "    count() AS judged, countIf(status = 'ok') AS ok,\n"
        "    countIf(has(flags, 'refusal')) AS refusals,\n"
        "    countIf(has(flags, 'unparseable_verdicts')) AS unparseable,\n"
        f"    countIf({ok} AND ifNull(inclusion_probability, 0) <= 0) AS unknown_weight,\n"
        f"    sumIf(assumeNotNull(value), {ok}) AS sum_y,\n"
        f"    sumIf(pow(assumeNotNull(value), 2), {ok}) AS sum_y2,\n"
        f"    {weighted_sums()}\n"
        f"FROM {table} FINAL\n"
        f"WHERE {' AND '.join(where)}\n"
        f"GROUP BY feature, {by}, metric, judge_version\n"
        f"ORDER BY feature, {by}, metric, judge_version"
    )
    return sql, params


def weighted_sums(of: str = "") -> str:
    """The sums `weighted_estimate` takes (weighted_n, sum_w, sum_wy, sum_w2, sum_w2y, sum_w2y2) over score rows
    whose columns are prefixed `of` (say "s."): an aggregate's SELECT list, shared by every weighted-quality read."""
    value, p = f"assumeNotNull({of}value)", f"assumeNotNull({of}inclusion_probability)"
    weighted = f"{of}status = 'ok' AND {of}value IS NOT NULL AND ifNull({of}inclusion_probability, 0) > 0"
    return (
        f"countIf({weighted}) AS weighted_n, sumIf(1 / {p}, {weighted}) AS sum_w, "
        f"sumIf({value} / {p}, {weighted}) AS sum_wy, sumIf(1 / pow({p}, 2), {weighted}) AS sum_w2, "
        f"sumIf({value} / pow({p}, 2), {weighted}) AS sum_w2y, "
        f"sumIf(pow({value}, 2) / pow({p}, 2), {weighted}) AS sum_w2y2"
    )


def _interval(mean: float, variance: float) -> tuple[float, float]:
    half = Z_95 * math.sqrt(max(variance, 0.0))
    return max(0.0, mean - half), min(1.0, mean + half)


def kept_estimate(n: int, sum_y: float, sum_y2: float) -> dict[str, Any]:
    """Mean of n scores and its 95 % interval (sample variance / n)."""
    if n == 0:
        return {"mean": None, "ci_low": None, "ci_high": None}
    mean = sum_y / n
    if n < 2:
        return {"mean": mean, "ci_low": None, "ci_high": None}
    sample_variance = max(sum_y2 - n * mean * mean, 0.0) / (n - 1)
    low, high = _interval(mean, sample_variance / n)
    return {"mean": mean, "ci_low": low, "ci_high": high}


def weighted_estimate(
    n: int, sum_w: float, sum_wy: float, sum_w2: float, sum_w2y: float, sum_w2y2: float
) -> dict[str, Any]:
    """Hájek mean Σwy / Σw and its 95 % interval from the linearised variance (see the module doc)."""
    if n == 0 or sum_w <= 0:
        return {"mean": None, "ci_low": None, "ci_high": None, "traffic": 0.0}
    mean = sum_wy / sum_w
    if n < 2:
        return {"mean": mean, "ci_low": None, "ci_high": None, "traffic": sum_w}
    spread = sum_w2y2 - 2 * mean * sum_w2y + mean * mean * sum_w2  # Σ w² (y − μ)²
    variance = max(spread, 0.0) / (sum_w * sum_w) * n / (n - 1)
    low, high = _interval(mean, variance)
    return {"mean": mean, "ci_low": low, "ci_high": high, "traffic": sum_w}


def assemble_quality(rows: list[dict[str, Any]], by: str = "day") -> list[dict[str, Any]]:
    """The SQL's sums → one row per group with `kept` and `weighted` estimates (a stable shape for --json); `by`
    as given to `quality_sql`."""
    out = []
    for row in rows:
        ok = int(row["ok"])
        weighted_n = int(row["weighted_n"])
        out.append(
            {
                "feature": str(row["feature"]),
                by: str(row[by]),
                "metric": str(row["metric"]),
                "judge_version": str(row["judge_version"]),
                "judged": int(row["judged"]),
                "ok": ok,
                "refusals": int(row["refusals"]),
                "unparseable": int(row["unparseable"]),
                "unknown_weight": int(row["unknown_weight"]),
                "kept": kept_estimate(ok, float(row["sum_y"] or 0.0), float(row["sum_y2"] or 0.0)),
                "weighted": {
                    "n": weighted_n,
                    **weighted_estimate(
                        weighted_n,
                        float(row["sum_w"] or 0.0),
                        float(row["sum_wy"] or 0.0),
                        float(row["sum_w2"] or 0.0),
                        float(row["sum_w2y"] or 0.0),
                        float(row["sum_w2y2"] or 0.0),
                    ),
                },
            }
        )
    return out
