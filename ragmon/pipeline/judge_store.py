"""Adapters from the judge worker's `PayloadSource` / `ScoreSink` to the ClickHouse store (`ragmon.sinks.Store`).

The judges know nothing of the store; this module, on the agent's side, is the one place that joins them:

- `StorePayloadSource` reads kept traces' payloads with `Store.payloads_for_judging`, many traces per query.
- `StoreScoreSink` writes rows with `Store.insert_scores`, which rejects keys the scores table lacks. The sink
  projects each row onto the table's columns (`SCORE_COLUMNS`): per-claim fields go into the `claims` tuple where
  it has them, else into a parallel `claim_<field>` array column (schema v3: `claim_flags`, `claim_support`).
  Whatever the table still cannot take is counted in `dropped_keys`, so an older table breaks nothing and hides
  nothing.

Both call the synchronous store from worker threads, one call at a time (chDB runs one engine per process).
"""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragmon.data_dir import embedded_store
from ragmon.judges.agent_client import AgentStoreClient
from ragmon.judges.types import RagSample, Turn
from ragmon.sinks import open_store
from ragmon.sinks.for_judge import JudgeStore
from ragmon.sinks.schema import SCORE_COLUMNS


class StoredPayload(RagSample):
    """A payload row as the store keeps it: the sample plus the trace's feature, eval run, release and sampling
    facts."""

    feature: str = ""
    eval_run: str = ""  # the `ragmon eval run` the trace belongs to; '' = production
    release: str = ""  # the app's release the trace ran (`service.version`); '' when not sent
    sampling_reason: str = ""
    inclusion_probability: float | None = None


class StorePayloadSource:
    """Payloads read in batches: the worker asks per trace, for a round of leased traces at a time; the asks that
    arrive within `window_s` of each other are answered by one query per tenant (`Store.payloads_for_judging`).
    One query per trace spent more of the agent's CPU on planning than the judging itself, beside the ingest it
    competes with."""

    def __init__(
        self,
        store: JudgeStore,
        *,
        lock: threading.Lock | None = None,
        window_s: float = 0.01,
        max_batch: int = 500,
    ) -> None:
        self._store = store
        self._lock = lock or threading.Lock()
        self.window_s = window_s
        self.max_batch = max_batch
        self._asked: dict[tuple[str, str], list[asyncio.Future[StoredPayload | None]]] = {}
        self._fetcher: asyncio.Task[None] | None = None
        self.queries = 0

    async def payload(self, tenant: str, trace_id: str) -> RagSample | None:
        future: asyncio.Future[StoredPayload | None] = asyncio.get_running_loop().create_future()
        self._asked.setdefault((tenant, trace_id), []).append(future)
        if self._fetcher is None or self._fetcher.done():
            self._fetcher = asyncio.create_task(self._fetch_asked())
        return await future

    async def _fetch_asked(self) -> None:
        await asyncio.sleep(self.window_s)  # let the rest of the round ask
        while self._asked:
            batch = dict(itertools.islice(self._asked.items(), self.max_batch))
            for key in batch:
                del self._asked[key]
            by_tenant: dict[str, list[str]] = {}
            for tenant, trace_id in batch:
                by_tenant.setdefault(tenant, []).append(trace_id)
            for tenant, trace_ids in by_tenant.items():
                try:
                    found = await asyncio.to_thread(self._fetch, tenant, trace_ids)
                except Exception as exc:  # the store is down: every ask of this query fails, the worker retries
                    for trace_id in trace_ids:
                        for future in batch[(tenant, trace_id)]:
                            if not future.done():
                                future.set_exception(exc)
                    continue
                for trace_id in trace_ids:
                    for future in batch[(tenant, trace_id)]:
                        if not future.done():  # a worker that gave up waiting cancelled it
                            future.set_result(found.get(trace_id))

    def _fetch(self, tenant: str, trace_ids: list[str]) -> dict[str, StoredPayload]:
        with self._lock:
            rows = self._store.payloads_for_judging(tenant, trace_ids)
            self.queries += 1
        return {trace_id: _stored_payload(row) for trace_id, row in rows.items()}


def _stored_payload(row: Mapping[str, Any]) -> StoredPayload:
    probability = row.get("inclusion_probability")
    return StoredPayload(
        question=str(row.get("question") or ""),
        answer=str(row.get("answer") or ""),
        passages=[str(p) for p in row.get("passage_texts") or []],
        context_source=str(row.get("context_source") or ""),
        feature=str(row.get("feature") or ""),
        eval_run=str(row.get("eval_run") or ""),
        release=str(row.get("release") or ""),
        sampling_reason=str(row.get("sampling_reason") or ""),
        inclusion_probability=float(probability) if probability is not None else None,
        earlier_turns=[
            Turn(question=str(t.get("question") or ""), answer=str(t.get("answer") or ""))
            for t in row.get("earlier_turns") or []
        ],
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
    """`ScoreSink` over `Store.insert_scores`, projecting rows onto `columns` (default:
    ragmon.sinks.schema.SCORE_COLUMNS)."""

    def __init__(
        self,
        store: JudgeStore,
        *,
        columns: Sequence[tuple[str, str]] | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        if columns is None:
            columns = SCORE_COLUMNS
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
    """Open the store (`ragmon.sinks.open_store`: a ClickHouse URL, else `<data_dir>/chdb`) and wrap it."""
    store = open_store(clickhouse_url or embedded_store(data_dir))
    lock = threading.Lock()  # one call into the store at a time (chDB: one engine per process)
    return StoreSide(StorePayloadSource(store, lock=lock), StoreScoreSink(store, lock=lock), store)


def agent_store_side(data_dir: str | Path) -> StoreSide:
    """The store through the running agent that owns `<data_dir>` (`ragmon.judges.agent_client`): for a worker beside
    `ragmon serve` on the embedded store, which one process only may open."""
    client = AgentStoreClient(data_dir)
    # A lock each, not one shared: a payload ask need not wait behind a score delivery (the agent orders its store)
    return StoreSide(StorePayloadSource(client), StoreScoreSink(client), client)
