"""The agent's read-only web dashboard (`ragmon serve`, on the API port): latency per stage over time, cost per
feature and model, sampling-weighted quality trends, open alerts, and kept traces opened up.

`ragmon.sinks.dashboard_queries` reads the store, `routes.py` answers HTTP requests, `assets.py` serves `static/`
and plotly.js, `meta.py` tells the page the stages and metrics it lists (the SDK's and the judge registry's),
`review.py` is the review queue, `keys.py` the reviewers' and readers' keys.
"""

from __future__ import annotations

from ragmon.dashboard.keys import KeyAuth, ReadKeys, ReviewerKeys
from ragmon.dashboard.label_input import MAX_BODY_BYTES as MAX_LABEL_BODY_BYTES
from ragmon.dashboard.review import Review
from ragmon.dashboard.routes import Dashboard, Response
from ragmon.judges.metrics import METRICS
from ragmon.sinks.dashboard_queries import DashboardQueries, DashboardStore
from ragmon.sinks.for_review import ReviewStore

__all__ = [
    "MAX_LABEL_BODY_BYTES",
    "Dashboard",
    "DashboardQueries",
    "DashboardStore",
    "KeyAuth",
    "ReadKeys",
    "Response",
    "ReviewerKeys",
    "create_dashboard",
    "create_review",
]


def create_dashboard(
    store: DashboardStore,
    auth: KeyAuth,
    *,
    bind_host: str = "127.0.0.1",
    review: Review | None = None,
) -> Dashboard:
    """The dashboard over `store`, behind the agent's read keys; with `review` (`create_review`), the review
    queue too."""
    return Dashboard(DashboardQueries(store), auth, bind_host=bind_host, review=review)


def create_review(store: ReviewStore, reviewers: ReviewerKeys) -> Review:
    """The review queue over `store`: labels of the judge's metrics, written with `reviewers`' keys."""
    return Review(store, reviewers, METRICS)
