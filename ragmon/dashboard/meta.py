"""What the page is told about the data before it draws any (GET /api/dashboard/meta): the SDK's stages, in the
order the page lists them and with their colours, and the judge's metrics from their registry, with what each needs
and the words a reviewer labels it with. The page's scripts hold no stage or metric name of their own, so a stage
the SDK gains or a metric the registry gains reaches the page without touching them.
"""

from __future__ import annotations

from typing import Any, Final

from ragmon.attributes import STAGES
from ragmon.judges.metrics import REGISTRY

# How the page draws each stage, in the order it lists them: the request's own span first, then the stages in the
# order a request runs them (tool calls before the answer that uses them), the unclassified last.
STAGE_COLORS: Final = {
    "request": "#64748b",
    "embed": "#8b5cf6",
    "search": "#0ea5e9",
    "rerank": "#14b8a6",
    "tool": "#ec4899",
    "generate": "#f59e0b",
    "other": "#94a3b8",
}
UNCLASSIFIED = "other"


def _stage_rank(stage: str) -> tuple[bool, int]:
    # The unclassified last; a stage without a place above (one the SDK gained) just before it (sorting is stable:
    # such stages keep the SDK's order).
    placed = list(STAGE_COLORS)
    return stage == UNCLASSIFIED, placed.index(stage) if stage in STAGE_COLORS else len(placed)


def stages() -> list[dict[str, str]]:
    """The SDK's stages as the page lists them, each with its colour (a new one borrows the unclassified's)."""
    fallback = STAGE_COLORS[UNCLASSIFIED]
    return [{"name": s, "color": STAGE_COLORS.get(s, fallback)} for s in sorted(STAGES, key=_stage_rank)]


def metrics() -> list[dict[str, Any]]:
    """The judge's metrics in the registry's order (the first is the trace list's column), with what each needs
    and its review labels (yes, no), or None when the review page does not offer it."""
    return [
        {
            "name": m.name,
            "needs": sorted(field.value for field in m.needs),
            "review_labels": list(m.review_labels) if m.review_labels else None,
        }
        for m in REGISTRY
    ]


def page_meta() -> dict[str, Any]:
    return {"stages": stages(), "metrics": metrics()}
