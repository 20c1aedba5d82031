"""The agent's read-only web dashboard (`ragmon serve`, on the API port): latency per stage over time, cost per
feature and model, sampling-weighted quality trends, open alerts, and kept traces opened up.

`queries.py` reads the store, `routes.py` answers HTTP requests, `assets.py` serves `static/` and plotly.js.
"""

from __future__ import annotations

from ragmon.agent.dashboard.routes import Dashboard, Response
from ragmon.collectors.auth import ApiKeyAuth
from ragmon.sinks.dashboard_queries import DashboardQueries, DashboardStore

__all__ = ["Dashboard", "DashboardQueries", "DashboardStore", "Response", "create_dashboard"]


def create_dashboard(store: DashboardStore, auth: ApiKeyAuth, *, bind_host: str = "127.0.0.1") -> Dashboard:
    """The dashboard over `store`, behind the agent's API keys."""
    return Dashboard(DashboardQueries(store), auth, bind_host=bind_host)
