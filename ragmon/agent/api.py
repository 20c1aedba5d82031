"""The agent's read API on its own port: `ragmon report` and `ragmon query` ask the running agent here, since an
embedded store has one owner. Same API keys as the receivers; a key sees only its tenant's rows.

    GET  /health                                  {"status": "ok"}
    GET  /api/report?since_s=3600[&feature=F]     the report rows (see `ragmon report --json`); production traffic
         [&traffic=evaluation | &eval_run=NAME]   unless asked for every eval run's, or one (`sinks.traffic`)
    POST /api/query   {"sql": "SELECT …"}         rows as JSON objects; read-only, checked by the store
    GET  /, /static/…, /api/dashboard/…           the dashboard (`ragmon.agent.dashboard`), when one is given
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from collectors.auth import ApiKeyAuth
from sinks.errors import QueryRejected, StoreError
from sinks.traffic import Traffic

if TYPE_CHECKING:
    from ragmon.agent.dashboard import Dashboard, Response

log = logging.getLogger("ragmon.agent")

_MAX_QUERY_BODY_BYTES = 1024 * 1024
_HEADERS = {
    "Content-Type": "application/json",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}

ReportFn = Callable[[float, "str | None", "str | None", Traffic], list[dict[str, Any]]]  # since_s, feature, tenant
QueryFn = Callable[[str, "str | None"], list[dict[str, Any]]]  # sql, tenant


class ApiServer:
    def __init__(
        self,
        host: str,
        port: int,
        report: ReportFn,
        query: QueryFn,
        auth: ApiKeyAuth,
        dashboard: Dashboard | None = None,
    ) -> None:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                if url.path == "/health":
                    self._reply(200, {"status": "ok"})
                    return
                if api.dashboard is not None and api.dashboard.handles(url.path):
                    headers = {name.lower(): value for name, value in self.headers.items()}
                    self._send(api.dashboard.get(url.path, url.query, headers))
                    return
                allowed, tenant = self._tenant()
                if not allowed:
                    return
                if url.path == "/api/report":
                    params = parse_qs(url.query)
                    try:
                        since_s = float(params.get("since_s", ["3600"])[0])
                    except ValueError:
                        self._reply(400, {"error": "since_s must be a number of seconds"})
                        return
                    try:
                        traffic = Traffic.from_params(params)
                    except ValueError as exc:
                        self._reply(400, {"error": str(exc)})
                        return
                    feature = params.get("feature", [None])[0]
                    self._run(lambda: api.report(since_s, feature, tenant, traffic))
                else:
                    self._reply(404, {"error": f"no such endpoint: {url.path}"})

            def do_POST(self) -> None:
                if urlsplit(self.path).path != "/api/query":
                    self._reply(404, {"error": "no such endpoint"})
                    return
                allowed, tenant = self._tenant()
                if not allowed:
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if length > _MAX_QUERY_BODY_BYTES:
                    self._reply(413, {"error": "query body too large"})
                    return
                try:
                    sql = json.loads(self.rfile.read(length) or b"{}")["sql"]
                    if not isinstance(sql, str):
                        raise TypeError("sql must be a string")
                except (ValueError, KeyError, TypeError) as exc:
                    self._reply(400, {"error": f'expected {{"sql": "SELECT ..."}}: {exc}'})
                    return
                self._run(lambda: api.query(sql, tenant))

            def _tenant(self) -> tuple[bool, str | None]:
                """(allowed, tenant): tenant None = every tenant (no keys configured); refusals are answered."""
                if not api.auth.required:
                    return True, None
                tenant = api.auth.tenant_for(self.headers.get("Authorization"), self.headers.get("x-api-key"))
                if tenant is None:
                    self._reply(401, {"error": "a valid API key is required"})
                    return False, None
                return True, tenant

            def _run(self, fn: Callable[[], list[dict[str, Any]]]) -> None:
                try:
                    self._reply(200, fn())
                except QueryRejected as exc:
                    self._reply(400, {"error": str(exc)})
                except StoreError as exc:
                    self._reply(503 if exc.retryable else 400, {"error": str(exc)})
                except Exception as exc:  # a bug here must not take the agent down
                    log.exception("API request failed")
                    self._reply(500, {"error": f"internal error: {type(exc).__name__}"})

            def _send(self, response: Response) -> None:
                self.send_response(response.status)
                for name, value in response.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(response.body)))
                self.end_headers()
                self.wfile.write(response.body)

            def _reply(self, status: int, payload: Any) -> None:
                body = json.dumps(payload, default=str).encode()
                self.send_response(status)
                for name, value in _HEADERS.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None  # no log line per request

        self.report = report
        self.query = query
        self.auth = auth
        self.dashboard = dashboard
        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="ragmon-api", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
