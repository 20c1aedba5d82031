"""Adapters from the worker's `PayloadSource` / `ScoreSink` to the ClickHouse store (`sinks.Store`).

The store is being reworked, so this module is the one place that knows its API:

- `StorePayloadSource` reads a kept trace's payload with `Store.query` (the public read-only SELECT path; it pays
  for the SQL guard on every call). A store method `payload(tenant, trace_id)` — or a batched one — would replace
  it without touching the worker.
- `StoreScoreSink` writes rows with `Store.insert_scores`, which rejects keys the scores table lacks. The sink
  projects each row onto the table's columns (`SCORE_COLUMNS`): per-claim fields go into the `claims` tuple where
  it has them, else into a parallel `claim_<field>` array column (schema v3: `claim_flags`, `claim_support`).
  Whatever the table still cannot take is counted in `dropped_keys`, so an older table breaks nothing and hides
  nothing.

Both call the synchronous store from worker threads, one call at a time (chDB runs one engine per process).
"""

from __future__ import annotations

import asyncio
import importlib
import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from judges.types import RagSample


class StoredPayload(RagSample):
    """A payload row as the store keeps it: the sample plus the trace's feature and sampling facts."""

    feature: str = ""
    sampling_reason: str = ""
    inclusion_probability: float | None = None


class _QueryStore(Protocol):
    def query(
        self, sql: str, params: Mapping[str, Any] | None = None, *, tenant: str | None = None, max_rows: int = ...
    ) -> list[dict[str, Any]]: ...


class _ScoreStore(Protocol):
    def insert_scores(self, rows: Any, dedup_token: str | None = None) -> str: ...


def payload_sql(database: str) -> str:
    table = "`" + database.replace("`", "") + "`.payloads"
    return (
        "SELECT feature, question, answer, arrayMap(p -> tupleElement(p, 'text'), passages) AS passage_texts,"
        f" sampling_reason, inclusion_probability FROM {table} FINAL"
        " WHERE tenant = {tenant:String} AND trace_id = {trace_id:String} LIMIT 1"
    )


class StorePayloadSource:
    def __init__(self, store: _QueryStore, *, database: str | None = None, lock: threading.Lock | None = None) -> None:
        self._store = store
        topology = getattr(store, "topology", None)
        self._sql = payload_sql(database or str(getattr(topology, "database", "ragmon")))
        self._lock = lock or threading.Lock()

    async def payload(self, tenant: str, trace_id: str) -> RagSample | None:
        return await asyncio.to_thread(self._payload, tenant, trace_id)

    def _payload(self, tenant: str, trace_id: str) -> StoredPayload | None:
        with self._lock:
            rows = self._store.query(self._sql, {"tenant": tenant, "trace_id": trace_id}, tenant=tenant, max_rows=1)
        if not rows:
            return None
        row = rows[0]
        probability = row.get("inclusion_probability")
        return StoredPayload(
            question=str(row.get("question") or ""),
            answer=str(row.get("answer") or ""),
            passages=[str(p) for p in row.get("passage_texts") or []],
            feature=str(row.get("feature") or ""),
            sampling_reason=str(row.get("sampling_reason") or ""),
            inclusion_probability=float(probability) if probability is not None else None,
        )


# Per-claim fields kept beside the `claims` tuple, each in its own array column (one entry per claim).
_PARALLEL_CLAIM_COLUMNS = {"flag": "claim_flags", "support": "claim_support"}
_CLAIM_DEFAULTS: dict[str, Any] = {"flag": "", "support": None}


def _tuple_fields(ch_type: str) -> list[str]:
    """Member names of an `Array(Tuple(name Type, ...))` column type."""
    match = re.fullmatch(r"Array\(Tuple\((.*)\)\)", ch_type.strip())
    if not match:
        return []
    return [member.strip().split(" ", 1)[0] for member in match.group(1).split(",")]


class StoreScoreSink:
    """`ScoreSink` over `Store.insert_scores`, projecting rows onto `columns` (default: sinks.schema.SCORE_COLUMNS)."""

    def __init__(
        self,
        store: _ScoreStore,
        *,
        columns: Sequence[tuple[str, str]] | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        if columns is None:
            schema: Any = importlib.import_module("sinks.schema")
            columns = tuple(schema.SCORE_COLUMNS)
        self._store = store
        self._columns = {name: ch_type for name, ch_type in columns}
        self._claim_fields = _tuple_fields(self._columns.get("claims", ""))
        self._lock = lock or threading.Lock()
        self.dropped_keys: Counter[str] = Counter()  # row keys (and claims.<field>) the table could not take

    def project(self, row: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in row.items():
            if key not in self._columns:
                self.dropped_keys[key] += 1
                continue
            if key == "claims" and self._claim_fields:
                claims = list(value or [])
                for extra in sorted({k for c in claims for k in c} - set(self._claim_fields)):
                    parallel = _PARALLEL_CLAIM_COLUMNS.get(extra)
                    if parallel in self._columns:
                        # One entry per claim, in claim order, so claims[i] and claim_<field>[i] belong together.
                        out[parallel] = [c.get(extra, _CLAIM_DEFAULTS.get(extra)) for c in claims]
                    else:
                        self.dropped_keys[f"claims.{extra}"] += 1
                value = [{f: c.get(f, "") for f in self._claim_fields} for c in claims]
            out[key] = value
        return out

    def write(self, rows: list[dict[str, Any]]) -> None:
        projected = [self.project(row) for row in rows]
        with self._lock:
            # No token: the store derives one from the rows' content, so an identical re-send is dropped.
            self._store.insert_scores(projected)


@dataclass(frozen=True, slots=True)
class StoreSide:
    """What `ragmon judge` needs from the store, and the store to close."""

    payloads: StorePayloadSource
    sink: StoreScoreSink
    store: Any

    def close(self) -> None:
        self.store.close()


def open_store_side(clickhouse_url: str | None, data_dir: str | Path) -> StoreSide:
    """Open the store (`sinks.open_store`: a ClickHouse URL, else `<data_dir>/chdb`) and wrap it. Imported by
    name at run time, so the judges package does not depend on the store's internals while they are reworked."""
    sinks: Any = importlib.import_module("sinks")
    store = sinks.open_store(clickhouse_url or Path(data_dir) / "chdb")
    lock = threading.Lock()  # one call into the store at a time (chDB: one engine per process)
    return StoreSide(StorePayloadSource(store, lock=lock), StoreScoreSink(store, lock=lock), store)
