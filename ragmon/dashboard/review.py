"""The review queue's HTTP surface: people label kept traces so the judge can be calibrated on production.

    GET  /api/dashboard/whoami                          {tenant, reviewer, can_label}: which key the page holds
    GET  /api/dashboard/review?metric=&since_s=&per_bin=  traces to label, `per_bin` from each score bin of the
                                                        metric (`ragmon.sinks.labels_sql`), those the caller has
                                                        labelled skipped; with each bin's size and labelled count
    GET  /api/dashboard/labels?id=<32 hex>              a trace's labels, every metric and reviewer
    GET  /api/dashboard/agreement?since_s=              the judge's agreement with the labels, per metric and
                                                        judge version (`ragmon.judges.label_agreement`)
    POST /api/dashboard/labels   (`ragmon.dashboard.label_input`)  write one trace's labels: needs a reviewer key

Reads take the read keys (a reviewer key reads too). A write needs a reviewer key of the trace's tenant: no key or
a wrong one is 401, a read key 403, a trace that is not one of the tenant's kept traces 404, a bad body 400 (413
when too large), and nothing is written on any refusal.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from ragmon.dashboard.keys import Reviewer, ReviewerKeys
from ragmon.dashboard.label_input import MAX_BODY_BYTES, TRACE_ID, BadLabels, parse_submission
from ragmon.judges.label_agreement import MIN_LABELS, agreement_by_version
from ragmon.sinks.errors import StoreError
from ragmon.sinks.for_review import ReviewStore

log = logging.getLogger("ragmon.agent")

BINS = 5
MAX_PER_BIN = 50
DEFAULT_AGREEMENT_WINDOW_S = 30 * 86400  # as `ragmon calibrate --from-store` reads by default
MAX_WINDOW_S = 400 * 86400


class ReviewError(Exception):
    """A refusal with its HTTP status (the message is the answer's `error`)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _number(params: Mapping[str, list[str]], name: str, default: float, low: float, high: float) -> float:
    text = params.get(name, [str(default)])[0]
    try:
        value = float(text)
    except ValueError:
        raise ReviewError(400, f"{name} must be a number") from None
    if not math.isfinite(value) or not low <= value <= high:
        raise ReviewError(400, f"{name} must be between {low:g} and {high:g}")
    return value


def _epoch_ms(value: Any) -> int | None:
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else None


# The review queue's filter of disagreements between end users and the judge: users said no (most of their thumbs
# and ratings negative), the judge said yes (its score at or above DISAGREEMENT_THRESHOLD).
DISAGREEMENTS = "thumbs_down_judged_good"
DISAGREEMENT_THRESHOLD = 0.5


class Review:
    GET_ENDPOINTS = frozenset({"whoami", "review", "labels", "agreement"})
    POST_PATH = "/api/dashboard/labels"

    def __init__(self, store: ReviewStore, reviewers: ReviewerKeys, metrics: Collection[str]) -> None:
        self.store = store
        self.reviewers = reviewers
        self.metrics = frozenset(metrics)

    def _reviewer_name(self, headers: Mapping[str, str], tenant: str | None) -> str:
        reviewer = self.reviewers.reviewer_for(headers.get("authorization"), headers.get("x-api-key"))
        return reviewer.name if reviewer is not None and tenant in (None, reviewer.tenant) else ""

    # -- reads ---------------------------------------------------------------------------------------------
    def get(self, name: str, params: Mapping[str, list[str]], tenant: str | None, headers: Mapping[str, str]) -> Any:
        if name == "whoami":
            reviewer = self.reviewers.reviewer_for(headers.get("authorization"), headers.get("x-api-key"))
            return {
                "tenant": tenant,
                "reviewer": reviewer.name if reviewer else None,
                "can_label": reviewer is not None,
                "labelling_configured": self.reviewers.configured,
                "metrics": sorted(self.metrics),
            }
        if name == "review":
            return self._queue(params, tenant, self._reviewer_name(headers, tenant))
        if name == "labels":
            trace_id = params.get("id", [""])[0].strip().lower()
            if not TRACE_ID.match(trace_id):
                raise ReviewError(400, "a trace id is 32 lowercase hex characters")
            return [
                {
                    "metric": row["metric"],
                    "reviewer": row["reviewer"],
                    "label": bool(row["label"]),
                    "claims": [{"claim": c["claim"], "label": bool(c["label"])} for c in row["claim_labels"] or []],
                    "note": row["note"],
                    "judge_versions": list(row["judge_versions"]),
                    "labelled_at_ms": _epoch_ms(row["labelled_at"]),
                }
                for row in self.store.trace_labels(trace_id, tenant=tenant)
            ]
        since_s = _number(params, "since_s", DEFAULT_AGREEMENT_WINDOW_S, 60, MAX_WINDOW_S)
        return {
            "since_s": since_s,
            "min_labels": MIN_LABELS,
            "versions": agreement_by_version(self.store.labelled_scores(since_s, tenant=tenant)),
        }

    def _queue(self, params: Mapping[str, list[str]], tenant: str | None, reviewer: str) -> dict[str, Any]:
        metric = params.get("metric", ["faithfulness"])[0]
        if metric not in self.metrics:
            raise ReviewError(400, f"metric {metric!r} is not a judge metric; one of {', '.join(sorted(self.metrics))}")
        since_s = _number(params, "since_s", 7 * 86400, 60, MAX_WINDOW_S)
        per_bin = int(_number(params, "per_bin", 5, 1, MAX_PER_BIN))
        chosen = params.get("filter", [""])[0]
        if chosen not in ("", DISAGREEMENTS):
            raise ReviewError(400, f"filter must be {DISAGREEMENTS} or absent, got {chosen!r}")
        if chosen == DISAGREEMENTS:
            return self._disagreements(metric, since_s, per_bin * BINS, tenant, reviewer)
        rows = self.store.review_queue(
            metric, since_s=since_s, per_bin=per_bin, bins=BINS, reviewer=reviewer, tenant=tenant
        )
        bins: dict[int, dict[str, Any]] = {}
        for row in rows:
            bins[int(row["bin"])] = {"traces": int(row["in_bin"]), "labelled": int(row["labelled_in_bin"])}
        return {
            "metric": metric,
            "reviewer": reviewer or None,
            "labelled_by_you": self.store.reviewer_label_count(metric, reviewer, tenant=tenant) if reviewer else 0,
            "bins": [
                {"low": b / BINS, "high": (b + 1) / BINS, **bins.get(b, {"traces": None, "labelled": None})}
                for b in range(BINS)
            ],
            "items": [
                {
                    "trace_id": row["trace_id"],
                    "feature": row["feature"],
                    "start_ms": _epoch_ms(row["start_time"]),
                    "question": row["question"],
                    "score": float(row["score"]),
                    "judge_version": row["version"],
                    "bin": int(row["bin"]),
                }
                for row in rows
            ],
        }

    def _disagreements(
        self, metric: str, since_s: float, limit: int, tenant: str | None, reviewer: str
    ) -> dict[str, Any]:
        """The queue filtered to "thumbs down, judged faithful": kept traces whose users' verdict is negative while
        the judge passed them (score >= 0.5), newest first — where the judge or the app is wrong."""
        rows = self.store.feedback_disagreements(
            metric, since_s=since_s, threshold=DISAGREEMENT_THRESHOLD, limit=limit, tenant=tenant
        )
        items = [
            {
                "trace_id": row["trace_id"],
                "feature": row["feature"],
                "start_ms": _epoch_ms(row["start_time"]),
                "question": row["question"],
                "score": float(row["score"]),
                "judge_version": row["version"],
                "bin": min(int(float(row["score"]) * BINS), BINS - 1),
                "feedback": {"verdicts": int(row["verdicts"]), "negative": int(row["negative"])},
            }
            for row in rows
        ]
        return {
            "metric": metric,
            "filter": DISAGREEMENTS,
            "reviewer": reviewer or None,
            "labelled_by_you": self.store.reviewer_label_count(metric, reviewer, tenant=tenant) if reviewer else 0,
            "bins": [
                {
                    "low": b / BINS,
                    "high": (b + 1) / BINS,
                    "traces": sum(1 for item in items if item["bin"] == b) or None,
                    "labelled": None,
                }
                for b in range(BINS)
            ],
            "items": items,
        }

    # -- the write -----------------------------------------------------------------------------------------
    def check_writer(self, headers: Mapping[str, str], read_tenant: str | None) -> Reviewer:
        """The reviewer whose key came with the request; raises ReviewError (401/403) when there is none. The
        API asks this before reading a body, so a request without a reviewer key costs no upload."""
        reviewer = self.reviewers.reviewer_for(headers.get("authorization"), headers.get("x-api-key"))
        if reviewer is None:
            if not self.reviewers.configured:
                raise ReviewError(403, "labelling is off: no reviewer keys are configured (agent.reviewer_keys)")
            if read_tenant is not None:
                raise ReviewError(403, "this key may read but not write labels: sign in with a reviewer key")
            raise ReviewError(401, "a reviewer key is required to write labels")
        return reviewer

    def post(self, headers: Mapping[str, str], body: bytes | None, read_tenant: str | None) -> Any:
        """Write one trace's labels; `body` None when it was larger than MAX_BODY_BYTES (not read); `read_tenant`
        is what the presented key may read (None: no read key matched, or reads are open). Raises ReviewError
        for every refusal, before anything is written."""
        reviewer = self.check_writer(headers, read_tenant)
        if body is None:
            raise ReviewError(413, f"a label submission is at most {MAX_BODY_BYTES // 1024} KiB")
        try:
            decoded = json.loads(body or b"null")
        except ValueError as exc:
            raise ReviewError(400, f"the body is not JSON: {exc}") from None
        try:
            submission = parse_submission(decoded, self.metrics)
        except BadLabels as exc:
            raise ReviewError(400, str(exc)) from None
        try:
            if not self.store.is_kept_trace(reviewer.tenant, submission.trace_id):
                raise ReviewError(404, f"no kept trace {submission.trace_id} of this tenant to label")
            self.store.insert_labels(submission.rows(reviewer.tenant, reviewer.name))
        except StoreError as exc:
            raise ReviewError(503 if exc.retryable else 500, f"store: {exc}") from exc
        log.info(
            "labels written: tenant %s, reviewer %s, trace %s, metrics %s",
            reviewer.tenant,
            reviewer.name,
            submission.trace_id,
            ",".join(label["metric"] for label in submission.labels),
        )
        return {"written": len(submission.labels), "reviewer": reviewer.name, "trace_id": submission.trace_id}
