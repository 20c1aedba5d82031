"""The agent's read-only web dashboard (`ragmon serve`, on the API port): latency per stage over time, cost per
feature and model, sampling-weighted quality trends, open alerts, and kept traces opened up.

`queries.py` reads the store, `routes.py` answers HTTP requests, `assets.py` serves `static/` and plotly.js.
"""

from __future__ import annotations

from ragmon.agent.dashboard.review import Review, ReviewStore
from ragmon.agent.dashboard.routes import Dashboard, Response
from ragmon.agent.reviewers import KeyAuth, ReviewerKeys
from ragmon.judges.metrics import METRICS
from ragmon.sinks.dashboard_queries import DashboardQueries, DashboardStore

__all__ = ["Dashboard", "DashboardQueries", "DashboardStore", "Response", "create_dashboard", "create_review"]


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
