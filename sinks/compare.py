"""A release comparison: for one feature, a candidate release against a baseline over the same span of traffic —
every figure with both releases' values, the delta, a 95 % interval of the delta and the sample sizes — overall and,
the point, per recurring question group, with the documents whose retrieval for that question changed most.

Which traffic. The candidate is read from its first span to its last. The baseline is read
- side by side, over the candidate's own window, when it still served there (at least a fifth as many requests as
  the candidate: a canary beside the old release); time of day and load then weigh on both alike;
- else sequentially, over the stretch just before the candidate started (up to the baseline's last span before it),
  as long as the candidate's window but at least `MIN_BASELINE_SPAN_S` — a short canary's first minutes are compared
  with an hour of the old release, not with its last five minutes.
By default the candidate is the release first seen last and the baseline the one first seen before it.

The methods of the intervals are `ragmon.sinks.intervals`'. Every row says which it used (`method`), whether its
interval lies wholly on the bad side (`regressed`) and, where a test exists, its `p_value` and the standardised
delta `z` — what the canary analysis (`ragmon.drift.canary`) adjusts for the many tests it runs.

`compare(run, feature, …)` takes the store's read (`run(sql, params) -> rows`); `Store.compare` is the named read
`compare` (`ragmon compare`, `GET /api/read/compare`, the dashboard's comparison).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from statistics import NormalDist
from typing import Any

from ragmon.sinks import compare_sql as sql
from ragmon.sinks.compare_sql import Windows
from ragmon.sinks.intervals import (
    holm,
    newcombe,
    normal_difference,
    quantile_rank,
    quantile_ranks,
    two_proportion_p,
    welch,
)
from ragmon.sinks.quality import weighted_estimate

_NORMAL = NormalDist()
Run = Callable[[str, dict[str, Any]], list[dict[str, Any]]]

MIN_BASELINE_SPAN_S = 3600
SIDE_BY_SIDE_SHARE = 0.2  # the baseline's requests in the candidate's window, per candidate request
MIN_GROUP_TRACES = 20  # per release: a question group with fewer is not compared
MAX_GROUPS = 50  # the most asked groups compared
MAX_DOCUMENTS = 5  # per group: the documents whose share changed most
# Documents' shares are counted over at most about this many grouped traces (a uniform sample by trace id beyond):
# enough for a share's interval of a few points per group and release, at a bounded cost on a busy feature.
MAX_DOCUMENT_TRACES = 20_000
EXAMPLE_TRACES = 3

# The bad direction of each figure: +1 when a rise is worse.
WORSE_UP = {"p95_ms": 1, "error_rate": 1, "cost_per_request_usd": 1, "tokens_per_request": 1, "refusal_rate": 1}
WORSE_DOWN = {"top1_score", "similarity_gap", "quality", "retrieval_share"}
# A document's share of a question's traces must fall by this much (absolute) to count as lost for the question.
MIN_SHARE_DROP = 0.3


def _direction(metric: str) -> int:
    return -1 if metric in WORSE_DOWN else 1


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat()


def _row(
    metric: str,
    *,
    part: str = "",
    baseline: float | None,
    candidate: float | None,
    interval: tuple[float, float] | None,
    n_baseline: int,
    n_candidate: int,
    method: str,
    p_value: float | None = None,
) -> dict[str, Any]:
    delta = None if baseline is None or candidate is None else candidate - baseline
    bad = _direction(metric)
    regressed = interval is not None and (interval[0] > 0 if bad > 0 else interval[1] < 0)
    z = None
    if delta is not None and p_value is not None:
        # the test's statistic, signed so that a regression is positive (capped near 8: p below 1e-15)
        z = math.copysign(_NORMAL.inv_cdf(1 - max(p_value, 1e-15) / 2), bad * delta) if p_value < 1 else 0.0
    return {
        "metric": metric,
        "part": part,
        "baseline": baseline,
        "candidate": candidate,
        "delta": delta,
        "ci_low": None if interval is None else interval[0],
        "ci_high": None if interval is None else interval[1],
        "n_baseline": n_baseline,
        "n_candidate": n_candidate,
        "method": method,
        "worse": "up" if bad > 0 else "down",
        "regressed": regressed,
        "p_value": p_value,
        "z": z,
    }


def rate_row(metric: str, x_b: int, n_b: int, x_c: int, n_c: int, part: str = "") -> dict[str, Any]:
    return _row(
        metric,
        part=part,
        baseline=x_b / n_b if n_b else None,
        candidate=x_c / n_c if n_c else None,
        interval=newcombe(x_b, n_b, x_c, n_c),
        n_baseline=n_b,
        n_candidate=n_c,
        method="Newcombe hybrid score (Wilson)",
        p_value=two_proportion_p(x_b, n_b, x_c, n_c),
    )


def mean_row(metric: str, b: tuple[float, float, int], c: tuple[float, float, int], part: str = "") -> dict[str, Any]:
    """From (mean, sample variance, n) of each side: Welch's interval."""
    result = welch(b[0], b[1], b[2], c[0], c[1], c[2])
    return _row(
        metric,
        part=part,
        baseline=b[0] if b[2] else None,
        candidate=c[0] if c[2] else None,
        interval=None if result is None else result[0],
        n_baseline=b[2],
        n_candidate=c[2],
        method="Welch normal",
        p_value=None if result is None else result[1],
    )


def weighted_row(
    metric: str, b: Mapping[str, Any] | None, c: Mapping[str, Any] | None, part: str = ""
) -> dict[str, Any]:
    """Judged quality: each side's Hájek mean and linearised variance (`quality.weighted_estimate`)."""
    sides = [_weighted(b), _weighted(c)]
    (mean_b, var_b, n_b), (mean_c, var_c, n_c) = sides
    interval, p_value = None, None
    if n_b >= 2 and n_c >= 2 and mean_b is not None and mean_c is not None:
        interval, p_value = normal_difference(mean_b, var_b, mean_c, var_c)
    return _row(
        "quality",
        part=part or metric,
        baseline=mean_b,
        candidate=mean_c,
        interval=interval,
        n_baseline=n_b,
        n_candidate=n_c,
        method="weighted (1/p) Hájek means, linearised variance, normal",
        p_value=p_value,
    )


def _weighted(sums: Mapping[str, Any] | None) -> tuple[float | None, float, int]:
    if sums is None:
        return None, 0.0, 0
    n = int(sums["weighted_n"])
    values = [float(sums[k] or 0.0) for k in ("sum_w", "sum_wy", "sum_w2", "sum_w2y", "sum_w2y2")]
    estimate = weighted_estimate(n, *values)
    mean = estimate["mean"]
    if mean is None or n < 2:
        return mean, 0.0, n
    sum_w, _, sum_w2, sum_w2y, sum_w2y2 = values
    spread = sum_w2y2 - 2 * mean * sum_w2y + mean * mean * sum_w2
    return mean, max(spread, 0.0) / (sum_w * sum_w) * n / (n - 1), n


def choose_windows(
    releases: list[dict[str, Any]],
    baseline: str | None,
    candidate: str | None,
    requests_between: Callable[[str, int, int], int],
) -> tuple[Windows, str] | str:
    """The two releases and their windows, with the mode ("side by side" or "sequential"); or why none."""
    by_name = {str(row["release"]): row for row in releases}
    ordered = [str(row["release"]) for row in sorted(releases, key=lambda row: int(row["first_ns"]))]
    if candidate is None:
        if not ordered:
            return "no release seen (spans carry none: send service.version)"
        candidate = ordered[-1]
    if candidate not in by_name:
        return f"no traffic of release {candidate!r} (releases seen: {', '.join(ordered) or 'none'})"
    if baseline is None:
        earlier = [
            name
            for name in ordered
            if name != candidate and int(by_name[name]["first_ns"]) <= int(by_name[candidate]["first_ns"])
        ]
        if not earlier:
            return f"no release before {candidate!r} to compare it with (releases seen: {', '.join(ordered)})"
        baseline = earlier[-1]
    if baseline not in by_name:
        return f"no traffic of release {baseline!r} (releases seen: {', '.join(ordered)})"
    if baseline == candidate:
        return "the baseline and the candidate are the same release"
    c_start = int(by_name[candidate]["first_ns"])
    c_end = int(by_name[candidate]["last_ns"]) + 1
    b_first, b_last = int(by_name[baseline]["first_ns"]), int(by_name[baseline]["last_ns"]) + 1
    candidate_requests = max(1, requests_between(candidate, c_start, c_end))
    if b_last > c_start and requests_between(baseline, c_start, c_end) >= SIDE_BY_SIDE_SHARE * candidate_requests:
        return Windows(baseline, candidate, c_start, c_end, c_start, c_end), "side by side"
    b_end = min(b_last, c_start) if b_first < c_start else b_last
    span = max(c_end - c_start, MIN_BASELINE_SPAN_S * 1_000_000_000)
    return Windows(baseline, candidate, max(b_first, b_end - span), b_end, c_start, c_end), "sequential"


def compare(
    run: Run,
    tables: Mapping[str, str],
    feature: str | None,
    baseline: str | None = None,
    candidate: str | None = None,
) -> dict[str, Any]:
    """The comparison document (see the module); `tables` names spans, payloads, scores and trace_questions."""
    spans = tables["spans"]
    if feature is None:
        feature = _latest_feature(run, spans)
        if feature is None:
            return {"feature": None, "problem": "no feature has a release yet (spans carry no service.version)"}
    releases = run(*sql.releases_sql(spans, feature))

    def requests_between(release: str, start_ns: int, end_ns: int) -> int:
        rows = run(*sql.requests_between_sql(spans, feature, release, start_ns, end_ns))
        return int(rows[0]["requests"]) if rows else 0

    chosen = choose_windows(releases, baseline, candidate, requests_between)
    if isinstance(chosen, str):
        return {"feature": feature, "problem": chosen, "releases": _release_list(releases)}
    windows, mode = chosen
    rows = _overall_rows(run, tables, windows, feature)
    groups = _group_rows(run, tables, windows, feature)
    side = {windows.baseline: "baseline", windows.candidate: "candidate"}
    requests = {side[str(r["release"])]: int(r["requests"]) for r in releases if str(r["release"]) in side}
    return {
        "feature": feature,
        "mode": mode,
        "baseline": _side(windows.baseline, windows.baseline_start_ns, windows.baseline_end_ns),
        "candidate": _side(windows.candidate, windows.candidate_start_ns, windows.candidate_end_ns),
        "requests_all_time": requests,
        "releases": _release_list(releases),
        "rows": rows,
        "groups": groups,
    }


def _side(release: str, start_ns: int, end_ns: int) -> dict[str, Any]:
    return {"release": release, "start": _iso(start_ns), "end": _iso(end_ns), "start_ns": start_ns, "end_ns": end_ns}


def _release_list(releases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "release": str(r["release"]),
            "first": _iso(int(r["first_ns"])),
            "last": _iso(int(r["last_ns"])),
            "requests": int(r["requests"]),
        }
        for r in sorted(releases, key=lambda row: int(row["first_ns"]))
    ]


def _latest_feature(run: Run, spans: str) -> str | None:
    """The feature with at least two releases whose newest release appeared last."""
    firsts: dict[str, list[int]] = defaultdict(list)
    for row in run(*sql.release_features_sql(spans)):
        firsts[str(row["feature"])].append(int(row["first_ns"]))
    candidates = [(max(times), feature) for feature, times in firsts.items() if len(times) >= 2]
    return max(candidates)[1] if candidates else None


def _overall_rows(run: Run, tables: Mapping[str, str], windows: Windows, feature: str) -> list[dict[str, Any]]:
    spans = tables["spans"]
    b, c = windows.baseline, windows.candidate
    out: list[dict[str, Any]] = []
    stages = run(*sql.stage_sql(spans, windows, feature))
    by_part: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in stages:
        by_part[str(row["part"])][str(row["release"])] = row
    out.extend(_p95_rows(run, spans, windows, feature, by_part))
    requests = {str(row["release"]): row for row in run(*sql.request_sql(spans, windows, feature))}
    rb, rc = requests.get(b), requests.get(c)
    n_b, n_c = (int(r["requests"]) if r else 0 for r in (rb, rc))
    out.append(rate_row("error_rate", int(rb["failed"]) if rb else 0, n_b, int(rc["failed"]) if rc else 0, n_c))
    if rb and rc and int(rb["cost_known"]) and int(rc["cost_known"]):
        out.append(mean_row("cost_per_request_usd", _moments(rb, "cost"), _moments(rc, "cost")))
    if rb and rc:
        out.append(mean_row("tokens_per_request", _moments(rb, "tokens"), _moments(rc, "tokens")))
    search = by_part.get("search", {})
    for metric, prefix in (("top1_score", "top1"), ("similarity_gap", "gap")):
        sb, sc = search.get(b), search.get(c)
        if sb and sc and int(sb[f"{prefix}_n"]) and int(sc[f"{prefix}_n"]):
            out.append(mean_row(metric, _span_moments(sb, prefix), _span_moments(sc, prefix), part="search"))
    quality: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in run(*sql.quality_sql(tables["scores"], tables["payloads"], windows, feature)):
        quality[str(row["metric"])][str(row["release"])] = row
    for metric in sorted(quality):
        out.append(weighted_row(metric, quality[metric].get(b), quality[metric].get(c)))
    refusal = _refusal_row(quality, b, c)
    if refusal is not None:
        out.append(refusal)
    return out


def _lost(document: Mapping[str, Any]) -> bool:
    """A document the question stopped retrieving: its share fell by at least MIN_SHARE_DROP, beyond chance."""
    return bool(document["regressed"]) and (document["delta"] or 0.0) <= -MIN_SHARE_DROP


def _refusal_row(quality: Mapping[str, Mapping[str, Mapping[str, Any]]], b: str, c: str) -> dict[str, Any] | None:
    """Refusals among judged answers, counted on the metric judged most often (every metric flags the same answer)."""
    if not quality:
        return None
    metric = max(quality, key=lambda m: sum(int(r["judged"]) for r in quality[m].values()))
    sb, sc = quality[metric].get(b), quality[metric].get(c)
    x_b, n_b = (int(sb["refusals"]), int(sb["judged"])) if sb else (0, 0)
    x_c, n_c = (int(sc["refusals"]), int(sc["judged"])) if sc else (0, 0)
    return rate_row("refusal_rate", x_b, n_b, x_c, n_c)


def _moments(row: Mapping[str, Any], name: str) -> tuple[float, float, int]:
    n = int(row["requests"])
    total, squares = float(row[f"{name}_sum"] or 0.0), float(row[f"{name}_sum2"] or 0.0)
    mean = total / n if n else 0.0
    variance = max(squares - n * mean * mean, 0.0) / (n - 1) if n > 1 else 0.0
    return mean, variance, n


def _span_moments(row: Mapping[str, Any], prefix: str) -> tuple[float, float, int]:
    n = int(row[f"{prefix}_n"])
    variance = float(row[f"{prefix}_var"]) if n > 1 and row[f"{prefix}_var"] is not None else 0.0
    if not math.isfinite(variance):
        variance = 0.0
    return float(row[f"{prefix}_mean"] or 0.0), variance, n


def _p95_rows(
    run: Run, spans: str, windows: Windows, feature: str, by_part: Mapping[str, Mapping[str, Mapping[str, Any]]]
) -> list[dict[str, Any]]:
    """p95 per part: the order statistic at the estimate's rank and at the ranks of its 97.5 % interval."""
    wanted: list[tuple[str, str, int, list[int]]] = []
    for part in sorted(by_part, key=lambda p: (p != "request", p)):
        for release in (windows.baseline, windows.candidate):
            row = by_part[part].get(release)
            n = int(row["spans"]) if row else 0
            if n:
                ranks = quantile_ranks(n)
                wanted.append((release, part, n, [quantile_rank(n), *(ranks or ())]))
    values: dict[tuple[str, str], list[float]] = {}
    if wanted:
        row = run(*sql.quantile_sql(spans, windows, feature, wanted))[0]
        for i, (release, part, _, _) in enumerate(wanted):
            values[(release, part)] = [float(v) for v in row[f"q{i}"]]
    out = []
    for part in sorted(by_part, key=lambda p: (p != "request", p)):
        b = values.get((windows.baseline, part))
        c = values.get((windows.candidate, part))
        interval = None
        if b and c and len(b) == 3 and len(c) == 3:
            interval = (c[1] - b[2], c[2] - b[1])
        n_b = int(by_part[part][windows.baseline]["spans"]) if windows.baseline in by_part[part] else 0
        n_c = int(by_part[part][windows.candidate]["spans"]) if windows.candidate in by_part[part] else 0
        out.append(
            _row(
                "p95_ms",
                part=part,
                baseline=b[0] if b else None,
                candidate=c[0] if c else None,
                interval=interval,
                n_baseline=n_b,
                n_candidate=n_c,
                method="order statistics (distribution-free, 97.5 % per release)",
            )
        )
    return out


def _group_rows(run: Run, tables: Mapping[str, str], windows: Windows, feature: str) -> list[dict[str, Any]]:
    b, c = windows.baseline, windows.candidate
    traffic: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in run(*sql.group_sql(tables["trace_questions"], windows, feature, EXAMPLE_TRACES)):
        traffic[str(row["group_id"])][str(row["release"])] = row
    eligible = [
        group
        for group, sides in traffic.items()
        if all(int(sides[r]["traces"]) >= MIN_GROUP_TRACES for r in (b, c) if r in sides) and len(sides) == 2
    ]
    eligible.sort(key=lambda g: -sum(int(r["traces"]) for r in traffic[g].values()))
    eligible = eligible[:MAX_GROUPS]
    if not eligible:
        return []
    quality: dict[str, dict[str, dict[str, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for row in run(*sql.group_quality_sql(tables["scores"], tables["trace_questions"], windows, feature)):
        quality[str(row["group_id"])][str(row["metric"])][str(row["release"])] = row
    documents: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    grouped = sum(int(r["traces"]) for g in eligible for r in traffic[g].values())
    stride = max(1, math.ceil(grouped / MAX_DOCUMENT_TRACES))
    docs_sql = sql.group_documents_sql(tables["spans"], tables["trace_questions"], windows, feature, eligible, stride)
    for row in run(*docs_sql):
        documents[str(row["group_id"])][str(row["document"])][str(row["release"])] = int(row["traces"])
    out: list[dict[str, Any]] = []
    total = sum(int(r["traces"]) for sides in traffic.values() for r in sides.values())
    for group in eligible:
        sides = traffic[group]
        n_b, n_c = int(sides[b]["traces"]), int(sides[c]["traces"])
        rows = [rate_row("error_rate", int(sides[b]["failed_traces_n"]), n_b, int(sides[c]["failed_traces_n"]), n_c)]
        for metric in sorted(quality[group]):
            rows.append(weighted_row(metric, quality[group][metric].get(b), quality[group][metric].get(c)))
        refusal = _refusal_row(quality[group], b, c)
        if refusal is not None:
            rows.append(refusal)
        docs = []
        counted = documents[group].pop("", {})  # the traces the shares are of (all, or the sample's)
        d_b, d_c = counted.get(b, 0), counted.get(c, 0)
        for document, counts in documents[group].items():
            row = rate_row("retrieval_share", counts.get(b, 0), d_b, counts.get(c, 0), d_c, part=document)
            row["document"] = document
            docs.append(row)
        docs.sort(key=lambda r: r["delta"] or 0.0)  # the steepest fall first
        example = str(sides[c]["example_question"] or sides[b]["example_question"])
        traces = [*sides[c]["failed_examples"], *sides[c]["some_traces"]]
        out.append(
            {
                "group_id": group,
                "question": example,
                "share": (n_b + n_c) / total if total else 0.0,
                "traces_baseline": n_b,
                "traces_candidate": n_c,
                "rows": rows,
                "documents": docs[:MAX_DOCUMENTS],
                "stopped_retrieving": [d["document"] for d in docs if _lost(d)][:3],
                "example_traces": list(dict.fromkeys(str(t) for t in traces))[:EXAMPLE_TRACES],
                "worst_z": max((r["z"] for r in (*rows, *docs) if r["z"] is not None), default=0.0),
                "regressed": any(r["regressed"] for r in rows) or any(_lost(d) for d in docs),
            }
        )
    out.sort(key=lambda g: (not g["regressed"], -float(g["worst_z"])))
    return out


__all__ = ["MIN_GROUP_TRACES", "Windows", "choose_windows", "compare", "holm", "mean_row", "rate_row", "weighted_row"]
