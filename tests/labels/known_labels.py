"""Kept traces, judge scores and people's labels with known values, written through the store as the agent and
the judge write them (tests of the labels' store, `calibrate --from-store` and the review API share them)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ragmon.sinks import Store

JUDGE = "local:test-v1:lexical"
OTHER_JUDGE = "llm:test-v2"


def trace_id(i: int) -> str:
    return f"{i:032x}"


def keep(store: Store, tenant: str, ids: Sequence[str], *, feature: str = "faq") -> None:
    """Payload rows: the traces are kept (and so may be labelled)."""
    now_ns = time.time_ns()
    store.insert_payloads(
        [
            {
                "tenant": tenant,
                "trace_id": t,
                "feature": feature,
                "start_time": now_ns - 60_000_000_000,
                "question": f"question {t[-4:]}",
                "answer": f"answer {t[-4:]}",
                "passages": [{"id": "p1", "score": 0.9, "text": f"passage {t[-4:]}"}],
                "inclusion_probability": 1.0,
            }
            for t in ids
        ]
    )


def score(
    store: Store, tenant: str, scored: dict[str, float | None], *, metric: str = "faithfulness", version: str = JUDGE
) -> None:
    """Online scores of `metric` (None: the judge failed on that trace)."""
    store.insert_scores(
        [
            {
                "tenant": tenant,
                "trace_id": t,
                "feature": "faq",
                "metric": metric,
                "judge_version": version,
                "value": value,
                "status": "ok" if value is not None else "parse_error",
                "claims": [{"claim": "the sky is blue", "verdict": "supported", "reason": ""}],
                "scored_at": time.time_ns(),
            }
            for t, value in scored.items()
        ]
    )


def label(
    store: Store,
    tenant: str,
    labels: dict[str, bool],
    *,
    metric: str = "faithfulness",
    reviewer: str = "alice",
    note: str = "",
    at_ns: int | None = None,
) -> None:
    rows: list[dict[str, Any]] = [
        {
            "tenant": tenant,
            "trace_id": t,
            "metric": metric,
            "reviewer": reviewer,
            "label": value,
            "note": note,
            "judge_versions": [JUDGE],
            "labelled_at": at_ns or time.time_ns(),
        }
        for t, value in labels.items()
    ]
    store.insert_labels(rows)
