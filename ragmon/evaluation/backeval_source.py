"""Where back-evaluation reads kept traces from: the store itself, or the running agent that owns it.

An embedded store has one owner. When no agent holds the data dir, ``ragmon backeval`` opens the store (and can
write its scores back, under the run's name); when an agent does, it asks the agent's read API
(``POST /api/query``, the path ``ragmon query`` takes) and the scores go to the run's files only. A ClickHouse
server URL is always opened directly.

Selection: the ``payloads`` of kept traces that started within ``since_s`` (optionally one feature), of production
traffic unless one evaluation run's traces are asked for (or every run's, ``evaluation``: `ragmon.sinks.traffic`),
oldest
first, read in pages. Each trace's evaluation row id (``ragmon.eval.row_id``
on its spans, set by ``ragmon eval run``) comes along, so a back-evaluation of an eval run's traces pairs with
that run's results file in ``ragmon gate``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ragmon.agent import DataDirUnavailable, claim_or_find_agent
from ragmon.data_dir import embedded_store
from ragmon.evaluation.errors import EvalInputError
from ragmon.sinks import open_store
from ragmon.sinks.backeval_sql import Query, eval_row_ids, kept_traces_page
from ragmon.sinks.errors import StoreError

PAGE_ROWS = 1_000  # under the query API's 10,000-row cap


@dataclass(frozen=True)
class KeptTrace:
    tenant: str
    trace_id: str
    feature: str = ""
    eval_run: str = ""  # the `ragmon eval run` the trace belongs to; '' = production (its scores carry it)
    release: str = ""  # the app's release the trace ran (`service.version`; its scores carry it)
    question: str = ""
    answer: str = ""
    passages: tuple[str, ...] = ()
    sampling_reason: str = ""
    inclusion_probability: float | None = None
    eval_row_id: str = ""

    @property
    def key(self) -> str:
        return f"{self.tenant}/{self.trace_id}"


@dataclass(frozen=True)
class Selection:
    since_s: float
    feature: str | None = None
    eval_run: str | None = None
    evaluation: bool = False  # every eval run's traces (with eval_run None); else production traffic only
    limit: int | None = None
    database: str = ""  # qualify tables ("db.payloads") when the store's default database is another one


class TraceSource(Protocol):
    """Kept traces for a selection; raising `EvalInputError` when the store cannot be read."""

    def select(self, selection: Selection) -> list[KeptTrace]: ...

    def close(self) -> None: ...


def _page(selection: Selection, offset: int, page_rows: int) -> Query:
    return kept_traces_page(
        since_s=selection.since_s,
        feature=selection.feature,
        eval_run=selection.eval_run,
        evaluation=selection.evaluation,
        offset=offset,
        page_rows=page_rows,
        database=selection.database,
    )


def _trace(row: dict[str, Any], row_ids: dict[tuple[str, str], str], selection: Selection) -> KeptTrace:
    tenant, trace_id = str(row.get("tenant") or ""), str(row["trace_id"])
    probability = row.get("inclusion_probability")
    return KeptTrace(
        tenant=tenant,
        trace_id=trace_id,
        feature=str(row.get("feature") or ""),
        # a payload copied before schema v7 reads '' even when its spans name the run it was selected by
        eval_run=str(row.get("eval_run") or selection.eval_run or ""),
        release=str(row.get("release") or ""),
        question=str(row.get("question") or ""),
        answer=str(row.get("answer") or ""),
        passages=tuple(str(p) for p in row.get("passage_texts") or ()),
        sampling_reason=str(row.get("sampling_reason") or ""),
        inclusion_probability=float(probability) if probability is not None else None,
        eval_row_id=row_ids.get((tenant, trace_id), ""),
    )


QueryFn = Callable[[str, dict[str, Any]], list[dict[str, Any]]]  # SQL, its bound parameters -> rows


def select_with(query: QueryFn, selection: Selection, page_rows: int = PAGE_ROWS) -> list[KeptTrace]:
    """Run the selection page by page through ``query`` (SQL and parameters → rows)."""
    traces: list[KeptTrace] = []
    for page in _pages(query, selection, page_rows):
        trace_ids = sorted({str(r["trace_id"]) for r in page})
        ids = {
            (str(r["tenant"]), str(r["trace_id"])): str(r["row_id"])
            for r in query(*eval_row_ids(trace_ids, database=selection.database))
        }
        traces.extend(_trace(row, ids, selection) for row in page)
        if selection.limit is not None and len(traces) >= selection.limit:
            return traces[: selection.limit]
    return traces


def _pages(query: QueryFn, selection: Selection, page_rows: int) -> Iterator[list[dict[str, Any]]]:
    offset = 0
    while True:
        page = query(*_page(selection, offset, page_rows))
        if page:
            yield page
        if len(page) < page_rows:
            return
        offset += page_rows


@dataclass
class StoreTraceSource:
    """Reads through `sinks.Store.query` (read-only, checked by the store's SQL guard)."""

    store: Any
    owns_store: bool = True

    def select(self, selection: Selection) -> list[KeptTrace]:
        try:
            return select_with(lambda sql, params: list(self.store.query(sql, params)), selection)
        except StoreError as exc:
            raise EvalInputError(f"cannot read kept traces from the store: {exc}") from exc

    def close(self) -> None:
        if self.owns_store:
            self.store.close()


@dataclass
class AgentTraceSource:
    """Reads through the running agent's ``POST /api/query``."""

    api_url: str
    api_key: str | None = None
    timeout_s: float = 60.0
    requests: list[str] = field(default_factory=list)

    def _query(self, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            f"{self.api_url}/api/query",
            data=json.dumps({"sql": sql, "params": params}).encode(),
            headers=headers,
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                rows: list[dict[str, Any]] = json.loads(response.read())
                return rows
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise EvalInputError(f"the agent at {self.api_url} answered {exc.code}: {detail}") from exc
        except OSError as exc:
            raise EvalInputError(f"cannot reach the agent at {self.api_url}: {exc}") from exc

    def select(self, selection: Selection) -> list[KeptTrace]:
        return select_with(self._query, selection)

    def close(self) -> None:
        return None


@dataclass
class OpenedSource:
    source: TraceSource
    store: Any | None  # the store when this process opened it (scores can be written back); None via the agent
    release: Callable[[], None]
    where: str


def open_trace_source(data_dir: Path, clickhouse_url: str | None, api_key: str | None) -> OpenedSource:
    """The store when this process may open it, else the agent that owns ``data_dir`` (see the module docstring)."""
    if clickhouse_url:
        try:
            store = open_store(clickhouse_url)
        except StoreError as exc:
            raise EvalInputError(f"cannot open the store at {clickhouse_url}: {exc}") from exc
        return OpenedSource(StoreTraceSource(store), store, store.close, clickhouse_url)
    try:
        lock = claim_or_find_agent(data_dir)
    except DataDirUnavailable as exc:
        raise EvalInputError(str(exc)) from exc
    if isinstance(lock, str):
        return OpenedSource(AgentTraceSource(lock, api_key), None, lambda: None, f"agent {lock}")
    try:
        store = open_store(embedded_store(data_dir))
    except StoreError as exc:
        lock.release()
        raise EvalInputError(f"cannot open the store in {data_dir}: {exc}") from exc

    def release() -> None:
        try:
            store.close()
        finally:
            lock.release()

    return OpenedSource(StoreTraceSource(store, owns_store=False), store, release, f"store {data_dir}")
