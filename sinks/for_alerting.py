"""The store as drift alerting sees it (`ragmon.agent.alerting`): the signals' SQL, trusted text built by
`ragmon.drift` (`read`, on the read-only connection, so on the embedded engine it never waits behind the writer's
inserts), and the alert rows it writes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from ragmon.sinks.schema import ALERT_COLUMNS, Topology
from ragmon.sinks.store_base import StoreBase


class AlertingStore(Protocol):
    """What drift alerting reads (its signal source, `ragmon.drift.store_source`) and writes (its alert sink)."""

    topology: Topology

    def read(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]: ...

    def insert_alerts(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str: ...

    # the canary analysis of new releases (`ragmon.drift.canary`): the comparison `ragmon compare` reads
    def compare(
        self,
        feature: str | None,
        *,
        baseline: str | None = None,
        candidate: str | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any]: ...

    # where an alert's change is (`ragmon.drift.where`): the documents a new release stopped retrieving
    def document_shift(
        self,
        feature: str | None,
        release_a: str,
        release_b: str,
        since_s: float,
        *,
        group_id: str | None = None,
        limit: int = 10,
        tenant: str | None = None,
        now_s: float | None = None,
    ) -> list[dict[str, Any]]: ...


class AlertingMethods(StoreBase):
    """Drift alerting's methods of `Store`."""

    def read(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Rows of ragmon's own read-side SQL (the drift signals in `ragmon.drift.store_source`) — trusted
        text, unlike a user's `query` — on the read-only connection, so on the embedded engine it never waits
        behind the writer's inserts."""
        return self._select(sql, params, readonly=True)

    def insert_alerts(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str:
        """Alert state changes with keys from `schema.ALERT_COLUMNS`."""
        return self._insert_rows("alerts", ALERT_COLUMNS, rows, dedup_token)
