"""A reviewer's labels of one trace, as the review page posts them, checked before anything is written.

    {"trace_id": "<32 hex>",
     "labels": [{"metric": "faithfulness", "label": true,           # true: faithful / relevant; false: not
                 "note": "…",                                        # optional, at most MAX_NOTE_CHARS
                 "claims": [{"claim": "…", "label": false}, …],      # optional, per claim of the judge's
                 "judge_versions": ["local:…"]}, …]}                 # the judge versions the reviewer was shown

The whole submission is refused (`BadLabels`, answered 400 with the reason) if any part is wrong, so a request
either writes every label it carries or none. The reviewer and tenant come from the key, never from the body.
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
MAX_BODY_BYTES = 256 * 1024
MAX_NOTE_CHARS = 2000
MAX_CLAIMS = 100
MAX_CLAIM_CHARS = 2000
MAX_VERSIONS = 10
MAX_VERSION_CHARS = 200


class BadLabels(ValueError):
    """The submission is malformed or out of bounds; the message says what and where."""


@dataclass(frozen=True, slots=True)
class Submission:
    trace_id: str
    labels: tuple[dict[str, Any], ...]  # rows for `Store.insert_labels`, without tenant and reviewer

    def rows(self, tenant: str, reviewer: str) -> list[dict[str, Any]]:
        return [{**label, "tenant": tenant, "trace_id": self.trace_id, "reviewer": reviewer} for label in self.labels]


def _text(value: Any, where: str, limit: int) -> str:
    if not isinstance(value, str):
        raise BadLabels(f"{where} must be a string")
    if len(value) > limit:
        raise BadLabels(f"{where} is {len(value):,} characters; at most {limit:,}")
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):  # 0/1 or "yes" would be guesses: a label is said exactly
        raise BadLabels(f"{where} must be true or false")
    return value


def _label(raw: Any, where: str, metrics: Collection[str], now_ns: int) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise BadLabels(f"{where} must be an object")
    unknown = set(raw) - {"metric", "label", "note", "claims", "judge_versions"}
    if unknown:
        raise BadLabels(f"{where} has unknown fields {sorted(unknown)}")
    metric = raw.get("metric")
    if metric not in metrics:
        raise BadLabels(f"{where}.metric {metric!r} is not a judge metric; one of {', '.join(sorted(metrics))}")
    claims = raw.get("claims", [])
    if not isinstance(claims, list) or len(claims) > MAX_CLAIMS:
        raise BadLabels(f"{where}.claims must be a list of at most {MAX_CLAIMS}")
    claim_labels = []
    for j, claim in enumerate(claims):
        if not isinstance(claim, Mapping):
            raise BadLabels(f"{where}.claims[{j}] must be an object")
        claim_labels.append(
            {
                "claim": _text(claim.get("claim"), f"{where}.claims[{j}].claim", MAX_CLAIM_CHARS),
                "label": _flag(claim.get("label"), f"{where}.claims[{j}].label"),
            }
        )
    versions = raw.get("judge_versions", [])
    if not isinstance(versions, list) or len(versions) > MAX_VERSIONS:
        raise BadLabels(f"{where}.judge_versions must be a list of at most {MAX_VERSIONS}")
    return {
        "metric": metric,
        "label": _flag(raw.get("label"), f"{where}.label"),
        "note": _text(raw.get("note", ""), f"{where}.note", MAX_NOTE_CHARS),
        "claim_labels": claim_labels,
        "judge_versions": [_text(v, f"{where}.judge_versions[{k}]", MAX_VERSION_CHARS) for k, v in enumerate(versions)],
        "labelled_at": now_ns,
    }


def parse_submission(body: Any, metrics: Collection[str], *, now_ns: int | None = None) -> Submission:
    """A decoded JSON body → the labels to write; raises BadLabels naming the first thing wrong."""
    if not isinstance(body, Mapping):
        raise BadLabels('expected {"trace_id": "<32 hex>", "labels": [{"metric": …, "label": true|false}, …]}')
    unknown = set(body) - {"trace_id", "labels"}
    if unknown:
        raise BadLabels(f"unknown fields {sorted(unknown)}")
    trace_id = body.get("trace_id")
    if not isinstance(trace_id, str) or not TRACE_ID.match(trace_id):
        raise BadLabels("trace_id must be 32 lowercase hex characters")
    raw_labels = body.get("labels")
    if not isinstance(raw_labels, list) or not raw_labels:
        raise BadLabels("labels must be a non-empty list")
    stamp = time.time_ns() if now_ns is None else now_ns
    labels = tuple(_label(raw, f"labels[{i}]", metrics, stamp) for i, raw in enumerate(raw_labels))
    seen = [label["metric"] for label in labels]
    if len(set(seen)) != len(seen):
        raise BadLabels("each metric at most once per submission")
    return Submission(trace_id, labels)
