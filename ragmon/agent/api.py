"""The agent's read API on its own port: `ragmon report`, `alerts`, `calibrate --from-store` and `query` ask the
running agent here, since an embedded store has one owner. Same API keys as the receivers; a key sees only its
tenant's rows.

    GET  /health, /health/live, /health/ready     the agent's components (`ragmon.health`): /health/live
                                                  answers 503 only when the process should be restarted,
                                                  /health/ready 503 while it should not take traffic
    GET  /metrics                                 the agent's Prometheus metrics (the receiver's port has them too)
    GET  /api/read/<name>?…                       a named read of the store (`ragmon.sinks.named_reads`: report,
                                                  kept_share, quality, releases, alerts, production_minutes,
                                                  labelled_scores), its parameters checked (400), an unknown name
                                                  404; e.g. /api/read/report?since_s=3600[&feature=F]
                                                  [&traffic=evaluation | &eval_run=NAME]
                                                  [&release=R][&environment=E]
    GET  /api/report?…, /api/labels/scored?…      the reads `report` and `labelled_scores` by their older paths
    POST /api/query   {"sql": "SELECT …"[, "params": {…}][, "max_rows": N]}
                                                  rows as JSON objects; read-only, checked by the store, run under
                                                  the tenant's query budget; past max_rows (default 10,000) the
                                                  first max_rows + 1 rows
    GET  /, /static/…, /api/dashboard/…           the dashboard (`ragmon.dashboard`), when one is given
    POST /api/dashboard/labels                    a reviewer's labels (`ragmon.dashboard.review`)
    POST /api/judge/payloads {"tenant", "trace_ids"}  a `ragmon judge` worker's leased traces' payloads, by id
    POST /api/judge/scores   {"rows": [...]}          its score rows (idempotent: an identical re-send is dropped)

The two judge endpoints serve every tenant, so they take the token the agent writes into its data directory
(`X-Ragmon-Judge-Token`), not an API key (`ragmon.pipeline.judging.JudgeEndpoints`).

It runs on the same HTTP/1.1 server as the OTLP receiver (`ragmon.collectors.http_server`): every key is checked on
the request's head, before a body byte is read; bodies over an endpoint's limit are 413 while the client is still
sending; heads and bodies have read deadlines; connections, worker threads and in-flight bytes are bounded; the
agent's memory guard refuses work (429) while memory is high. Work that reads the store runs in the server's
bounded pool; a tenant runs at most `max_queries_per_tenant` reads at once (`/api/query` and named reads together;
429 past that), so one tenant cannot take every read connection of the store; a read whose client goes away is
cancelled in the engine.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs

from ragmon.collectors.http_server import Handle, HttpServer, Reply, RequestHead
from ragmon.collectors.memory_guard import MemoryGuard
from ragmon.dashboard import MAX_LABEL_BODY_BYTES, KeyAuth
from ragmon.sinks.errors import QueryCancelled, QueryRejected, StoreError
from ragmon.sinks.named_reads import BadParameter, UnknownRead, named_read

if TYPE_CHECKING:
    from ragmon.dashboard import Dashboard, Response

log = logging.getLogger("ragmon.agent")

_MAX_QUERY_BODY_BYTES = 1024 * 1024
_DEFAULT_MAX_ROWS, _MAX_ROWS = 10_000, 1_000_000
_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
_JSON = "application/json"

# a named read (`ragmon.sinks.named_reads`): its name, its checked values, the tenant -> its JSON answer
ReadFn = Callable[[str, dict[str, Any], "str | None"], Any]
# sql, its bound {name:Type} parameters, tenant, max_rows (then one more), the tag that `cancel_query` takes
QueryFn = Callable[[str, dict[str, Any], "str | None", int, str], list[dict[str, Any]]]
HealthFn = Callable[[str], tuple[bool, dict[str, Any]]]  # "health" | "live" | "ready" -> (passing, body)
MetricsFn = Callable[[str | None], tuple[bytes, str]]  # Accept header -> (body, content type)
# The named reads' older paths, answered as before: the report's rows, the labelled scores.
_READ_PATHS = {"/api/report": "report", "/api/labels/scored": "labelled_scores"}
_READ_PREFIX = "/api/read/"
_MAX_JUDGE_BODY_BYTES = 64 * 1024 * 1024  # a delivery batch of score rows with explanations and claims


class JudgeApi(Protocol):
    def allows(self, presented: str | None) -> bool: ...

    def payloads(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]: ...

    def write_scores(self, rows: list[dict[str, Any]]) -> int: ...


def _json_reply(status: int, payload: Any, headers: Mapping[str, str] | None = None) -> Reply:
    body = json.dumps(payload, default=str).encode()
    return Reply(status, body, _JSON, {**_HEADERS, **(headers or {})})


def _error(status: int, message: str) -> Reply:
    return _json_reply(status, {"error": message})


def _from_dashboard(response: Response) -> Reply:
    headers = dict(response.headers)
    content_type = headers.pop("Content-Type", "application/octet-stream")
    return Reply(response.status, response.body, content_type, headers)


class _QueryGate:
    """How many `/api/query` reads each tenant runs at once; past the limit a tenant waits its turn (429), so
    one tenant's runaway queries never hold every read connection of the store."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._running: Counter[str | None] = Counter()
        self._lock = threading.Lock()

    def enter(self, tenant: str | None) -> bool:
        with self._lock:
            if self._running[tenant] >= self.limit:
                return False
            self._running[tenant] += 1
            return True

    def leave(self, tenant: str | None) -> None:
        with self._lock:
            self._running[tenant] -= 1
            if self._running[tenant] <= 0:
                del self._running[tenant]


class ApiServer:
    def __init__(
        self,
        host: str,
        port: int,
        reads: ReadFn,
        query: QueryFn,
        auth: KeyAuth,
        dashboard: Dashboard | None = None,
        judge: JudgeApi | None = None,
        *,
        cancel_query: Callable[[str], None] | None = None,
        read_scope: Callable[[str], AbstractContextManager[Any]] | None = None,
        health: HealthFn | None = None,
        metrics: MetricsFn | None = None,
        memory_guard: MemoryGuard | None = None,
        max_queries_per_tenant: int = 2,
        max_connections: int = 256,
        worker_threads: int = 8,
        read_timeout_s: float = 30.0,
        idle_timeout_s: float = 75.0,
    ) -> None:
        self.reads = reads
        self.query = query
        self.auth = auth
        self.dashboard = dashboard
        self.judge = judge
        self.cancel_query = cancel_query
        self.read_scope = read_scope
        self.health = health
        self.metrics = metrics
        self.refusals: Counter[str] = Counter()  # by reason, for /metrics (ragmon_api_refused_total)
        self._refusals_lock = threading.Lock()  # counted from the loop thread and the pool
        self._queries = _QueryGate(max_queries_per_tenant)
        self._tags = itertools.count()
        self._tag_prefix = f"{os.getpid()}-{id(self):x}"
        self._server = HttpServer(
            self,
            name="api",
            host=host,
            port=port,
            # A judge worker's score batch is the largest body; the budget admits one whatever its size.
            max_inflight_bytes=2 * _MAX_JUDGE_BODY_BYTES,
            worker_threads=worker_threads,
            max_connections=max_connections,
            idle_timeout_s=idle_timeout_s,
            read_timeout_s=read_timeout_s,
            memory_guard=memory_guard,
            refused=self._count,
        )

    @property
    def url(self) -> str:
        return self._server.url

    @property
    def open_connections(self) -> int:
        return self._server.open_connections

    def start(self) -> ApiServer:
        self._server.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._server.stop(timeout_s)

    def _count(self, reason: str) -> None:
        with self._refusals_lock:
            self.refusals[reason] += 1

    # --- routing (`http_server.HttpApp`: on the loop thread, before any body byte is read) -------------------
    def route(self, head: RequestHead) -> Reply | Handle:
        path, method = head.path, head.method
        if method in ("GET", "HEAD"):
            if path in ("/health", "/health/live", "/health/ready"):
                return self._health(path.removeprefix("/health").lstrip("/") or "health")
            if path == "/metrics" and self.metrics is not None:
                body, content_type = self.metrics(head.headers.get("accept"))
                return Reply(200, body, content_type, {"Cache-Control": "no-store"})
        dashboard = self.dashboard
        if dashboard is not None and method in ("GET", "HEAD") and dashboard.handles(path):
            if not path.startswith("/api/"):  # the page and its assets: in memory, answered at once
                return _from_dashboard(dashboard.get(path, head.query, head.headers))
            return self._dashboard_view(lambda: _from_dashboard(dashboard.get(path, head.query, head.headers)))
        if method == "POST" and path.startswith("/api/judge/"):
            return self._judge(head)
        if dashboard is not None and method == "POST" and dashboard.handles_post(path):
            refused = dashboard.refuse_post(path, head.headers)
            if refused is not None:
                return _from_dashboard(refused)
            return self._handle(
                lambda body: _from_dashboard(dashboard.post(path, head.headers, body)), MAX_LABEL_BODY_BYTES
            )
        if path.startswith(_READ_PREFIX) or path in _READ_PATHS:
            return self._named_read(head)
        if path != "/api/query":
            return _error(404, f"no such endpoint: {path}")
        if method != "POST":
            return _json_reply(405, {"error": "use POST"}, {"Allow": "POST"})
        tenant = self._tenant(head)
        if isinstance(tenant, Reply):
            return tenant
        return self._query_handle(tenant)

    def _tenant(self, head: RequestHead) -> str | Reply | None:
        """The tenant the request's key reads as (None: no keys configured, every tenant), or its 401."""
        if not self.auth.required:
            return None
        tenant = self.auth.tenant_for(head.headers.get("authorization"), head.headers.get("x-api-key"))
        if tenant is None:
            self._count("unauthenticated")
            return _json_reply(401, {"error": "a valid API key is required"}, {"WWW-Authenticate": "Bearer"})
        return tenant

    def _health(self, probe: str) -> Reply:
        if self.health is None:
            return _json_reply(200, {"status": "ok"})
        passing, body = self.health(probe)
        return _json_reply(200 if passing else 503, body)

    @staticmethod
    def _handle(run: Callable[[bytes], Reply], max_body_bytes: int = 0) -> Handle:
        return Handle(run=run, refusal=_error, max_body_bytes=max_body_bytes)

    def _named_read(self, head: RequestHead) -> Reply | Handle:
        """`GET /api/read/<name>` (or an older path of one): for the key's tenant, parameters checked before any
        work, in the tenant's share of reads, cancelled in the engine when its client goes away."""
        name = _READ_PATHS.get(head.path) or head.path.removeprefix(_READ_PREFIX)
        try:
            read = named_read(name)
        except UnknownRead as exc:
            return _error(404, str(exc))
        if head.method not in ("GET", "HEAD"):
            return _json_reply(405, {"error": "use GET"}, {"Allow": "GET"})
        tenant = self._tenant(head)
        if isinstance(tenant, Reply):
            return tenant
        try:
            values = read.parse(parse_qs(head.query))
        except BadParameter as exc:
            return _error(400, str(exc))

        def run(_: bytes, tag: str) -> Reply:
            with self._read_turn(tenant) as refused:
                if refused is not None:
                    return refused
                with self._scope(tag):
                    return _answer(lambda: self.reads(read.name, values, tenant))

        return self._cancellable(run)

    @contextmanager
    def _read_turn(self, tenant: str | None) -> Iterator[Reply | None]:
        """The tenant's turn to read (yields None), or the 429 that says it runs as many reads as it may."""
        if not self._queries.enter(tenant):
            self._count("tenant_queries")
            limit = self._queries.limit
            yield _json_reply(
                429,
                {"error": f"this key's tenant already runs {limit} queries at once; retry when one has finished"},
                {"Retry-After": "1"},
            )
            return
        try:
            yield None
        finally:
            self._queries.leave(tenant)

    def _scope(self, tag: str) -> AbstractContextManager[Any]:
        """The store reads made inside it carry `tag` (`Store.reading`), so the handle's abandon cancels them."""
        return self.read_scope(tag) if self.read_scope is not None else nullcontext()

    def _cancellable(self, run: Callable[[bytes, str], Reply], max_body_bytes: int = 0) -> Handle:
        """A handle whose store reads carry a tag of their own (`run(body, tag)`): when its client goes away,
        `abandon` cancels the tag's reads in the engine."""
        tag = f"{self._tag_prefix}-{next(self._tags)}"
        cancel = self.cancel_query
        return Handle(
            run=lambda body: run(body, tag),
            refusal=_error,
            max_body_bytes=max_body_bytes,
            abandon=(lambda: cancel(tag)) if cancel is not None else None,
        )

    def _dashboard_view(self, run: Callable[[], Reply]) -> Handle:
        """A dashboard view: its several reads run inside one `read_scope(tag)`, cancelled together."""

        def scoped(_: bytes, tag: str) -> Reply:
            with self._scope(tag):
                return run()

        return self._cancellable(scoped)

    def _query_handle(self, tenant: str | None) -> Handle:
        return self._cancellable(lambda body, tag: self._run_query(body, tenant, tag), _MAX_QUERY_BODY_BYTES)

    def _run_query(self, raw: bytes, tenant: str | None, tag: str) -> Reply:
        try:
            body = json.loads(raw or b"{}")
            sql, max_rows = body["sql"], body.get("max_rows", _DEFAULT_MAX_ROWS)
            params = body.get("params", {})
            if not isinstance(sql, str):
                raise TypeError("sql must be a string")
            if not isinstance(params, dict) or not all(type(v) in (str, int, float, bool) for v in params.values()):
                raise TypeError("params must be an object of strings and numbers")
            if type(max_rows) is not int or not 1 <= max_rows <= _MAX_ROWS:
                raise TypeError(f"max_rows must be an integer from 1 to {_MAX_ROWS}")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return _error(400, f'expected {{"sql": "SELECT ...", "params": {{}}, "max_rows": N}}: {exc}')
        with self._read_turn(tenant) as refused:
            if refused is not None:
                return refused
            return _answer(lambda: self.query(sql, params, tenant, max_rows, tag))

    def _judge(self, head: RequestHead) -> Reply | Handle:
        judge, path = self.judge, head.path
        if judge is None or path not in ("/api/judge/payloads", "/api/judge/scores"):
            return _error(404, f"no such endpoint: {path}")
        if not judge.allows(head.headers.get("x-ragmon-judge-token")):
            self._count("unauthenticated")
            return _error(403, "the judge token of this agent's data directory is required")

        def run(raw: bytes) -> Reply:
            try:
                body = json.loads(raw or b"{}")
                if path == "/api/judge/payloads":
                    tenant, trace_ids = body["tenant"], body["trace_ids"]
                    if not isinstance(tenant, str) or not isinstance(trace_ids, list):
                        raise TypeError("tenant must be a string, trace_ids a list")
                    if not all(isinstance(t, str) for t in trace_ids):
                        raise TypeError("tenant and trace_ids must be strings")
                    return _answer(lambda: judge.payloads(tenant, trace_ids))
                rows = body["rows"]
                if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
                    raise TypeError("rows must be a list of objects")
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                return _error(400, f"bad request: {exc}")
            return _answer(lambda: {"written": judge.write_scores(rows)})

        return self._handle(run, _MAX_JUDGE_BODY_BYTES)


def _answer(fn: Callable[[], Any]) -> Reply:
    """`fn()`'s result as a 200, or its store error as the status that tells the caller what to do: a refused
    query or one stopped by its budget 400 (the same query would meet the same limit), a store that is down or
    whose read connections are all busy 503 + Retry-After."""
    try:
        return _json_reply(200, fn())
    except QueryRejected as exc:
        return _error(400, str(exc))
    except QueryCancelled as exc:
        if exc.retryable:  # the agent is stopping: another one, or this one later, will answer
            return _json_reply(503, {"error": str(exc)}, {"Retry-After": "1"})
        return _error(400, str(exc))  # its client went away (or half-closed): the answer says so
    except StoreError as exc:
        if exc.retryable:
            return _json_reply(503, {"error": str(exc)}, {"Retry-After": "1"})
        return _error(400, str(exc))
