"""What the dashboard shows, read from the store: per-stage latency over time, cost per feature and model, judged
quality over time (sampling-weighted), open alerts, kept traces and one trace opened up.

Every read goes through `Store.report` or `Store.query` — the read-only path whose tenant filter the engine applies
to every tenant-bearing table (`additional_table_filters`), so a dashboard key for tenant A cannot read B's rows
whatever the SQL below joins. Values reach the engine as `{name:Type}` parameters, never formatted into the text.

Latency and cost come from the rollups (every span, never only the kept ones); quality comes from the judges'
scores on kept traces, each weighted by 1 / its trace's inclusion probability (`payloads.inclusion_probability`),
so traces kept at 100 % for being slow or failing do not outvote the baseline sample they were drawn beside
(the score's own probability when the judge recorded it — it includes judge sampling — else the payload's).

Every view is of one traffic (`ragmon.sinks.traffic`): production by default, else every eval run or one — the page's
"Traffic" selector. `eval_runs` lists the runs there are, for that selector.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from ragmon.sinks.kept_share import summarise
from ragmon.sinks.schema import DURATION_LEVELS, DURATION_STATE, SAMPLING_TABLE
from ragmon.sinks.traffic import EVALUATION, PRODUCTION, Traffic

# Chart buckets: the smallest of these that gives at most ~_TARGET_POINTS points over the window. Buckets that
# are whole hours read the hourly rollup; shorter ones the per-minute rollup (its finest grain is a minute).
BUCKET_STEPS_S = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
_TARGET_POINTS = 60
MIN_WINDOW_S = 60
MAX_WINDOW_S = 400 * 86400  # the rollups' retention
MAX_TRACES = 500
TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
_QUESTION_PREVIEW_CHARS = 240
_ERROR_MESSAGE_CHARS = 2000  # an error message on the trace page; the full text stays in `spans.attributes`
_MERGE_DURATION = DURATION_STATE.replace("(", "Merge(", 1)
_SEVERITY_RANK = "multiIf(severity = 'critical', 0, severity = 'error', 1, severity = 'warning', 2, 3)"


class DashboardStore(Protocol):
    """The part of `sinks.Store` the dashboard reads through."""

    def report(
        self,
        since_s: float,
        *,
        feature: str | None = None,
        tenant: str | None = None,
        now_s: float | None = None,
        traffic: Traffic = PRODUCTION,
    ) -> list[dict[str, Any]]: ...

    def query(
        self, sql: str, params: Mapping[str, Any] | None = None, *, tenant: str | None = None, max_rows: int = 10_000
    ) -> list[dict[str, Any]]: ...


def bucket_step_s(window_s: float) -> int:
    """Seconds per chart bucket for a window: the smallest step giving at most ~60 points."""
    wanted = window_s / _TARGET_POINTS
    return next((step for step in BUCKET_STEPS_S if step >= wanted), BUCKET_STEPS_S[-1])


def _rollup_for(step_s: int) -> tuple[str, str]:
    """(table, time column) to read for buckets of `step_s` seconds."""
    return ("spans_1h", "hour") if step_s % 3600 == 0 else ("spans_1m", "minute")


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _feature_filter(feature: str | None, params: dict[str, Any], column: str = "feature") -> str:
    """` AND <column> = {feature:String}` (adding the parameter) when a feature is chosen, else nothing."""
    if feature is None:
        return ""
    params["feature"] = feature
    return f" AND {column} = {{feature:String}}"


def _epoch_ms(value: Any) -> int | None:
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else None


class DashboardQueries:
    def __init__(self, store: DashboardStore, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    def _read(self, sql: str, params: Mapping[str, Any], tenant: str | None) -> list[dict[str, Any]]:
        return self.store.query(sql, params, tenant=tenant)

    # -- numbers of every span -----------------------------------------------------------------------------
    def overview(
        self, since_s: float, tenant: str | None, feature: str | None = None, traffic: Traffic = PRODUCTION
    ) -> dict[str, Any]:
        """Headline figures, p50/p95 per stage over the window, cost and tokens per (feature, model), the
        features seen. Per-stage figures merge the sketches of every feature (not a max of per-feature p95s)."""
        report = self.store.report(since_s, tenant=tenant, now_s=self.clock(), traffic=traffic)
        rows = [row for row in report if feature is None or row["feature"] == feature]
        params, where, table = self._window(since_s, feature, traffic)
        stages = [
            {
                "stage": row["stage"],
                "spans": int(row["spans"]),
                "errors": int(row["errors"]),
                **_quantiles(row["q"]),
            }
            for row in self._read(
                f"SELECT stage, sum(spans) AS spans, sum(errors) AS errors, {_MERGE_DURATION}(duration_q) AS q"
                f" FROM {table} WHERE {where} GROUP BY stage ORDER BY stage",
                params,
                tenant,
            )
        ]
        sampling = self._kept_share(since_s, tenant, feature, traffic)
        request = next((stage for stage in stages if stage["stage"] == "request"), None)
        costs = [row["cost_usd"] for row in rows if row["cost_usd"] is not None]
        return {
            "window_s": since_s,
            "features": sorted({row["feature"] for row in report}),
            "totals": {
                "requests": request["spans"] if request else 0,
                "errors": request["errors"] if request else 0,
                "error_rate": request["errors"] / request["spans"] if request and request["spans"] else None,
                "p95_ms": request["p95_ms"] if request else None,
                "cost_usd": math.fsum(costs) if costs else None,
            },
            "stages": stages,
            "cost": _cost_per_model(rows),
            "sampling": {key: sampling[key] for key in ("decided", "kept", "kept_by_reason")},
        }

    def _kept_share(self, since_s: float, tenant: str | None, feature: str | None, traffic: Traffic) -> dict[str, Any]:
        """The tail sampler's decisions in the window: how many traces, how many kept, by first reason."""
        params = self._buckets(since_s)
        where = "minute >= toDateTime({start_s:Int64}) AND minute <= toDateTime({end_s:Int64})"
        where += _feature_filter(feature, params) + f" AND {traffic.condition(params)}"
        rows = self._read(
            f"SELECT feature, outcome, reason, sum(traces) AS traces FROM {SAMPLING_TABLE} WHERE {where}"
            " GROUP BY feature, outcome, reason",
            params,
            tenant,
        )
        return summarise(rows)

    def _buckets(self, since_s: float) -> dict[str, Any]:
        """{step, start_s, end_s} of the chart buckets for a window ending now (start on a step boundary)."""
        now_s = int(self.clock())
        step = bucket_step_s(since_s)
        return {"step": step, "start_s": (now_s - int(since_s)) // step * step, "end_s": now_s}

    def _window(
        self, since_s: float, feature: str | None, traffic: Traffic = PRODUCTION
    ) -> tuple[dict[str, Any], str, str]:
        """(params, WHERE, rollup table) for the chart buckets of a window ending now; the first bucket starts
        on a step boundary, so it may reach a little before the window (never more than one step)."""
        params = self._buckets(since_s)
        table, column = _rollup_for(params["step"])
        where = f"{column} >= toDateTime({{start_s:Int64}}) AND {column} <= toDateTime({{end_s:Int64}})"
        where += f" AND {traffic.condition(params)}"
        return params, where + _feature_filter(feature, params), table

    def eval_runs(self, since_s: float, tenant: str | None) -> list[dict[str, Any]]:
        """The eval runs with traffic in the window, latest first: {eval_run, spans, last_ms} (the selector)."""
        params, where, table = self._window(since_s, None, EVALUATION)
        column = _rollup_for(params["step"])[1]
        rows = self._read(
            f"SELECT eval_run, sum(spans) AS n, max({column}) AS last FROM {table} WHERE {where}"
            " GROUP BY eval_run ORDER BY last DESC, eval_run LIMIT 200",
            params,
            tenant,
        )
        return [
            {"eval_run": row["eval_run"], "spans": int(row["n"]), "last_ms": _epoch_ms(row["last"])} for row in rows
        ]

    def latency(
        self, since_s: float, tenant: str | None, feature: str | None = None, traffic: Traffic = PRODUCTION
    ) -> dict[str, Any]:
        """p50/p95 per stage per bucket, from the rollups: {step_s, series: [{stage, t_ms, p50_ms, p95_ms, spans,
        errors}]} with the lists aligned by bucket."""
        params, where, table = self._window(since_s, feature, traffic)
        column = _rollup_for(params["step"])[1]
        rows = self._read(
            f"SELECT toUnixTimestamp(toStartOfInterval({column}, toIntervalSecond({{step:UInt32}}))) AS t,"
            f" stage, sum(spans) AS spans, sum(errors) AS errors, {_MERGE_DURATION}(duration_q) AS q"
            f" FROM {table} WHERE {where} GROUP BY t, stage ORDER BY stage, t",
            params,
            tenant,
        )
        series: dict[str, dict[str, list[Any]]] = {}
        for row in rows:
            entry = series.setdefault(row["stage"], {"t_ms": [], "p50_ms": [], "p95_ms": [], "spans": [], "errors": []})
            quantiles = _quantiles(row["q"])
            entry["t_ms"].append(int(row["t"]) * 1000)
            entry["p50_ms"].append(quantiles["p50_ms"])
            entry["p95_ms"].append(quantiles["p95_ms"])
            entry["spans"].append(int(row["spans"]))
            entry["errors"].append(int(row["errors"]))
        return {**_range(params), "series": [{"stage": stage, **values} for stage, values in series.items()]}

    # -- judged quality of kept traces ---------------------------------------------------------------------
    def quality(
        self, since_s: float, tenant: str | None, feature: str | None = None, traffic: Traffic = PRODUCTION
    ) -> dict[str, Any]:
        """Per judge metric and bucket (by the request's time): the mean score weighted by 1 / inclusion
        probability, the plain mean beside it, how many scores and their summed weight.

        The probability is the score's own (`scores.inclusion_probability`, schema v3: P(kept and judged), so judge
        sampling on top of the tail sampler counts) and, where that is unknown, the payload's P(kept). The trend
        reaches back as far as payloads are kept (their start time places a score in time)."""
        params = self._buckets(since_s)
        feature_where = _feature_filter(feature, params, "p.feature")
        feature_where += f" AND {traffic.condition(params, 'p.eval_run')}"
        probability = "if(ifNull(s.judged_p, 0) > 0, ifNull(s.judged_p, 0), p.inclusion_probability)"
        # Online scores only (run_name ''); a re-judged (trace, metric) counts once, with its latest value.
        rows = self._read(
            "SELECT s.metric AS metric,"
            " toUnixTimestamp(toStartOfInterval(p.start_time, toIntervalSecond({step:UInt32}))) AS t,"
            f" sum(s.score / {probability}) / sum(1 / {probability}) AS weighted,"
            f" avg(s.score) AS plain, count() AS n, sum(1 / {probability}) AS weight"
            " FROM (SELECT tenant, trace_id, metric, argMax(value, scored_at) AS score,"
            "  argMax(inclusion_probability, scored_at) AS judged_p FROM scores FINAL"
            "  WHERE run_name = '' AND status = 'ok' AND value IS NOT NULL GROUP BY tenant, trace_id, metric) AS s"
            " INNER JOIN (SELECT tenant, trace_id, feature, eval_run, start_time, inclusion_probability"
            "  FROM payloads FINAL"
            "  WHERE inclusion_probability > 0) AS p ON s.tenant = p.tenant AND s.trace_id = p.trace_id"
            " WHERE p.start_time >= toDateTime({start_s:Int64}) AND p.start_time <= toDateTime({end_s:Int64})"
            f"{feature_where}"
            " GROUP BY metric, t ORDER BY metric, t",
            params,
            tenant,
        )
        series: dict[str, dict[str, list[Any]]] = {}
        for row in rows:
            entry = series.setdefault(row["metric"], {"t_ms": [], "weighted": [], "plain": [], "n": [], "weight": []})
            entry["t_ms"].append(int(row["t"]) * 1000)
            entry["weighted"].append(_finite(row["weighted"]))
            entry["plain"].append(_finite(row["plain"]))
            entry["n"].append(int(row["n"]))
            entry["weight"].append(_finite(row["weight"]))
        return {**_range(params), "series": [{"metric": metric, **values} for metric, values in series.items()]}

    # -- alerts --------------------------------------------------------------------------------------------
    def open_alerts(self, tenant: str | None, limit: int = 100) -> list[dict[str, Any]]:
        """Alerts with a firing row and no resolved row (the two share `alert_id`), worst and newest first."""
        rows = self._read(
            # Aliases differ from column names: ClickHouse would otherwise read the alias inside the aggregates.
            "SELECT tenant, alert_id, min(fired_at) AS first_fired_at, any(rule) AS a_rule,"
            " any(severity) AS a_severity, any(feature) AS a_feature, any(stage) AS a_stage, any(metric) AS a_metric,"
            " any(value) AS a_value, any(threshold) AS a_threshold, any(message) AS a_message, any(labels) AS a_labels"
            " FROM alerts FINAL GROUP BY tenant, alert_id"
            " HAVING countIf(state = 'resolved') = 0 AND countIf(state = 'firing') > 0"
            f" ORDER BY {_SEVERITY_RANK.replace('severity', 'a_severity')}, first_fired_at DESC LIMIT {{limit:UInt32}}",
            {"limit": int(limit)},
            tenant,
        )
        return [
            {
                "tenant": row["tenant"],
                "alert_id": row["alert_id"],
                "fired_at_ms": _epoch_ms(row["first_fired_at"]),
                "rule": row["a_rule"],
                "severity": row["a_severity"],
                "feature": row["a_feature"],
                "stage": row["a_stage"],
                "metric": row["a_metric"],
                "value": _finite(row["a_value"]),
                "threshold": _finite(row["a_threshold"]),
                "message": row["a_message"],
                "labels": row["a_labels"] or {},
            }
            for row in rows
        ]

    # -- kept traces ---------------------------------------------------------------------------------------
    def traces(
        self,
        since_s: float,
        tenant: str | None,
        feature: str | None = None,
        limit: int = 100,
        traffic: Traffic = PRODUCTION,
    ) -> list[dict[str, Any]]:
        """Kept traces, newest first: why kept, inclusion probability, duration, status and their judge scores."""
        now_s = int(self.clock())
        params: dict[str, Any] = {"start_s": now_s - int(since_s), "limit": max(1, min(int(limit), MAX_TRACES))}
        feature_where = _feature_filter(feature, params) + f" AND {traffic.condition(params)}"
        kept = self._read(
            "SELECT tenant, trace_id, feature, eval_run, start_time,"
            f" substring(question, 1, {_QUESTION_PREVIEW_CHARS}) AS question,"
            " sampling_reasons, inclusion_probability FROM payloads FINAL"
            f" WHERE start_time >= toDateTime({{start_s:Int64}}){feature_where}"
            " ORDER BY start_time DESC, trace_id LIMIT {limit:UInt32}",
            params,
            tenant,
        )
        if not kept:
            return []
        ids = [row["trace_id"] for row in kept]
        timing = {
            row["trace_id"]: row
            for row in self._read(
                "SELECT trace_id,"
                " (max(toUnixTimestamp64Micro(start_time) + toInt64(duration_ms * 1000))"
                "  - min(toUnixTimestamp64Micro(start_time))) / 1000 AS duration_ms,"
                " countIf(status = 'error') AS errors, count() AS spans"
                " FROM spans FINAL WHERE trace_id IN {ids:Array(String)} GROUP BY trace_id",
                {"ids": ids},
                tenant,
            )
        }
        scores: dict[str, dict[str, float | None]] = {}
        for row in self._read(
            "SELECT trace_id, metric, argMax(value, scored_at) AS latest FROM scores FINAL"
            " WHERE trace_id IN {ids:Array(String)} AND run_name = '' AND status = 'ok'"
            " GROUP BY trace_id, metric",
            {"ids": ids},
            tenant,
        ):
            scores.setdefault(row["trace_id"], {})[row["metric"]] = _finite(row["latest"])
        out = []
        for row in kept:
            spans = timing.get(row["trace_id"], {})
            out.append(
                {
                    "trace_id": row["trace_id"],
                    "feature": row["feature"],
                    "eval_run": row["eval_run"],
                    "start_ms": _epoch_ms(row["start_time"]),
                    "question": row["question"],
                    "reasons": list(row["sampling_reasons"]),
                    "inclusion_probability": _finite(row["inclusion_probability"]),
                    "duration_ms": _finite(spans.get("duration_ms")),
                    "spans": int(spans.get("spans", 0)),
                    "errors": int(spans.get("errors", 0)),
                    "scores": scores.get(row["trace_id"], {}),
                }
            )
        return out

    def trace(self, trace_id: str, tenant: str | None) -> dict[str, Any] | None:
        """One trace opened up: its spans (for the waterfall), its payload (question, passages with scores,
        answer, tool calls), the eval run it belongs to ('' for production) and every online judge score with its
        per-claim verdicts. None if not found."""
        if not TRACE_ID.match(trace_id):
            raise ValueError("a trace id is 32 lowercase hex characters")
        params = {"trace_id": trace_id}
        payloads = self._read(
            "SELECT tenant, trace_id, feature, start_time, question, answer, passages, tool_calls, messages,"
            " context_source, sampling_reasons, inclusion_probability"
            " FROM payloads FINAL WHERE trace_id = {trace_id:String} LIMIT 1",
            params,
            tenant,
        )
        spans = self._read(
            "SELECT span_id, parent_span_id, name, stage, toUnixTimestamp64Micro(start_time) AS start_us,"
            " duration_ms, status, error_type, model, provider, input_tokens, output_tokens, cost_usd,"
            " top1_score, similarity_gap, ttft_ms, eval_run,"
            # what went wrong, in the app's words: the exception's message, else the status description
            f" if(status = 'error', substring(if(attributes['exception.message'] != '',"
            f" attributes['exception.message'], attributes['otel.status_description']), 1, {_ERROR_MESSAGE_CHARS}),"
            " '') AS error_message FROM spans FINAL WHERE trace_id = {trace_id:String}"
            " ORDER BY start_time, span_id",
            params,
            tenant,
        )
        if not payloads and not spans:
            return None
        scores = self._read(
            "SELECT metric, argMax(value, scored_at) AS s_value, argMax(status, scored_at) AS s_status,"
            " argMax(explanation, scored_at) AS s_explanation, argMax(claims, scored_at) AS s_claims,"
            " argMax(judge_model, scored_at) AS s_judge_model, argMax(judge_version, scored_at) AS s_judge_version"
            " FROM scores FINAL WHERE trace_id = {trace_id:String} AND run_name = ''"
            " GROUP BY metric ORDER BY metric",
            params,
            tenant,
        )
        # the trace's, as the rollups count it: any of its spans marked (another service's may not be)
        eval_run = next((str(span["eval_run"]) for span in spans if span["eval_run"]), "")
        return {
            "trace_id": trace_id,
            "eval_run": eval_run,
            **_payload_view(payloads),
            **_waterfall(spans),
            "scores": _score_view(scores),
        }


def _range(params: Mapping[str, Any]) -> dict[str, int]:
    """What a chart's time axis spans: the bucket step and the window's first and last instant (ms)."""
    return {"step_s": params["step"], "start_ms": params["start_s"] * 1000, "end_ms": params["end_s"] * 1000}


def _quantiles(values: Sequence[float] | None) -> dict[str, float | None]:
    """The p50/p95 of a merged `DURATION_STATE` (its levels are `DURATION_LEVELS`); NaN (no spans) → None."""
    by_level = dict(zip(DURATION_LEVELS, values or (), strict=False))
    return {"p50_ms": _finite(by_level.get(0.5)), "p95_ms": _finite(by_level.get(0.95))}


def _cost_per_model(report_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Cost, tokens and calls per (feature, model) summed over stages; cost None when no call's cost was known."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for row in report_rows:
        for model in row["models"]:
            if not model["model"]:
                continue
            entry = out.setdefault(
                (row["feature"], model["model"]),
                {
                    "feature": row["feature"],
                    "model": model["model"],
                    "cost_usd": None,
                    "calls": 0,
                    "input_tokens": 0,
                    "output_tokens": 0,
                },
            )
            entry["calls"] += model["requests"]
            entry["input_tokens"] += model["input_tokens"]
            entry["output_tokens"] += model["output_tokens"]
            if model["cost_usd"] is not None:
                entry["cost_usd"] = (entry["cost_usd"] or 0.0) + model["cost_usd"]
    return sorted(out.values(), key=lambda c: (c["feature"], c["model"]))


def _payload_view(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {"kept": False}
    row = rows[0]
    return {
        "kept": True,
        "feature": row["feature"],
        "start_ms": _epoch_ms(row["start_time"]),
        "question": row["question"],
        "answer": row["answer"],
        "passages": [{"id": p["id"], "score": _finite(p["score"]), "text": p["text"]} for p in row["passages"] or []],
        "tool_calls": [dict(call) for call in row["tool_calls"] or []],
        # the answering call's prompt; with context_source 'prompt' (no retrieval span) the judge's context
        "messages": [{"role": m["role"], "content": m["content"]} for m in row["messages"] or []],
        "context_source": row["context_source"],
        "reasons": list(row["sampling_reasons"]),
        "inclusion_probability": _finite(row["inclusion_probability"]),
    }


def _waterfall(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Spans with offsets from the trace's first start, in milliseconds, parents before their children."""
    if not rows:
        return {"spans": [], "duration_ms": None}
    origin_us = min(int(row["start_us"]) for row in rows)
    by_id = {row["span_id"]: row for row in rows}
    children: dict[str, list[Mapping[str, Any]]] = {}
    roots: list[Mapping[str, Any]] = []
    for row in rows:
        parent = row["parent_span_id"]
        if parent and parent in by_id and parent != row["span_id"]:
            children.setdefault(parent, []).append(row)
        else:
            roots.append(row)
    ordered: list[dict[str, Any]] = []
    seen: set[str] = set()

    def visit(row: Mapping[str, Any], depth: int) -> None:
        if row["span_id"] in seen:  # a malformed parent loop must not recurse forever
            return
        seen.add(row["span_id"])
        ordered.append(
            {
                "span_id": row["span_id"],
                "parent_span_id": row["parent_span_id"],
                "depth": depth,
                "name": row["name"],
                "stage": row["stage"],
                "offset_ms": (int(row["start_us"]) - origin_us) / 1000,
                "duration_ms": _finite(row["duration_ms"]),
                "status": row["status"],
                "error_type": row["error_type"],
                "error_message": row["error_message"],
                "model": row["model"],
                "provider": row["provider"],
                "input_tokens": int(row["input_tokens"]),
                "output_tokens": int(row["output_tokens"]),
                "cost_usd": _finite(row["cost_usd"]),
                "top1_score": _finite(row["top1_score"]),
                "similarity_gap": _finite(row["similarity_gap"]),
                "ttft_ms": _finite(row["ttft_ms"]),
            }
        )
        for child in children.get(row["span_id"], []):
            visit(child, depth + 1)

    for root in roots:
        visit(root, 0)
    end_ms = max(span["offset_ms"] + (span["duration_ms"] or 0.0) for span in ordered)
    return {"spans": ordered, "duration_ms": end_ms}


def _score_view(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "metric": row["metric"],
            "value": _finite(row["s_value"]),
            "status": row["s_status"],
            "explanation": row["s_explanation"],
            "claims": [dict(claim) for claim in row["s_claims"] or []],
            "judge_model": row["s_judge_model"],
            "judge_version": row["s_judge_version"],
        }
        for row in rows
    ]
