"""The agent's read API on its own port: `ragmon report` and `ragmon query` ask the running agent here, since an
embedded store has one owner. Same API keys as the receivers; a key sees only its tenant's rows.

    GET  /health                                  {"status": "ok"}
    GET  /api/report?since_s=3600[&feature=F]     the per-stage rows (`stages` of `ragmon report --json`);
         [&traffic=evaluation | &eval_run=NAME]   production traffic unless asked for every eval run's, or one
                                                  (`ragmon.sinks.traffic`)
    POST /api/query   {"sql": "SELECT …"[, "params": {…}][, "max_rows": N]}
                                                  rows as JSON objects; read-only, checked by the store; past
                                                  max_rows (default 10,000) the first max_rows + 1 rows
    GET  /, /static/…, /api/dashboard/…           the dashboard (`ragmon.agent.dashboard`), when one is given
    GET  /api/labels/scored?since_s=[&judge_version=V]  people's labels beside the judge's scores of the same
                                                  traces (`ragmon calibrate --from-store` beside a running agent)
    POST /api/dashboard/labels                    a reviewer's labels (`ragmon.agent.dashboard.review`)
    POST /api/judge/payloads {"tenant", "trace_ids"}  a `ragmon judge` worker's leased traces' payloads, by id
    POST /api/judge/scores   {"rows": [...]}          its score rows (idempotent: an identical re-send is dropped)

The two judge endpoints serve every tenant, so they take the token the agent writes into its data directory
(`X-Ragmon-Judge-Token`), not an API key (`ragmon.agent.judging.JudgeEndpoints`).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs, urlsplit

from ragmon.agent.label_input import MAX_BODY_BYTES as MAX_LABEL_BODY_BYTES
from ragmon.agent.reviewers import KeyAuth
from ragmon.sinks.errors import QueryRejected, StoreError
from ragmon.sinks.traffic import Traffic

if TYPE_CHECKING:
    from ragmon.agent.dashboard import Dashboard, Response

log = logging.getLogger("ragmon.agent")

_MAX_QUERY_BODY_BYTES = 1024 * 1024
_DEFAULT_MAX_ROWS, _MAX_ROWS = 10_000, 1_000_000
_HEADERS = {
    "Content-Type": "application/json",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}

ReportFn = Callable[[float, "str | None", "str | None", Traffic], list[dict[str, Any]]]  # since_s, feature, tenant
# sql, its bound {name:Type} parameters, tenant, max_rows (then one more)
QueryFn = Callable[[str, dict[str, Any], "str | None", int], list[dict[str, Any]]]
LabelledFn = Callable[[float, "str | None", "str | None"], list[dict[str, Any]]]  # since_s, judge_version, tenant
_MAX_LABEL_WINDOW_S = 10 * 366 * 86400  # labels live a year by default; a decade bounds the engine's UInt32
_MAX_JUDGE_BODY_BYTES = 64 * 1024 * 1024  # a delivery batch of score rows with explanations and claims


class JudgeApi(Protocol):
    def allows(self, presented: str | None) -> bool: ...

    def payloads(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]: ...

    def write_scores(self, rows: list[dict[str, Any]]) -> int: ...


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser that drops a request (a closed tab, a reload) is normal, not a 20-line traceback on
        stderr; anything else is logged once, through the agent's log."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            return
        log.error("API connection from %s failed", client_address[0], exc_info=error)


class ApiServer:
    def __init__(
        self,
        host: str,
        port: int,
        report: ReportFn,
        query: QueryFn,
        auth: KeyAuth,
        dashboard: Dashboard | None = None,
        judge: JudgeApi | None = None,
        *,
        labelled_scores: LabelledFn | None = None,
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
                elif url.path == "/api/labels/scored" and api.labelled_scores is not None:
                    labelled = api.labelled_scores
                    params = parse_qs(url.query)
                    try:
                        since_s = float(params.get("since_s", ["2592000"])[0])
                        if not 0 < since_s <= _MAX_LABEL_WINDOW_S:
                            raise ValueError
                    except ValueError:
                        self._reply(
                            400, {"error": f"since_s must be seconds, above 0 and at most {_MAX_LABEL_WINDOW_S}"}
                        )
                        return
                    version = params.get("judge_version", [None])[0]
                    self._run(lambda: labelled(since_s, version, tenant))
                else:
                    self._reply(404, {"error": f"no such endpoint: {url.path}"})

            def do_POST(self) -> None:
                path = urlsplit(self.path).path
                if path.startswith("/api/judge/"):
                    self._judge(path)
                    return
                if api.dashboard is not None and api.dashboard.handles_post(path):
                    headers = {name.lower(): value for name, value in self.headers.items()}
                    self._send(api.dashboard.post(path, headers, self._body(MAX_LABEL_BODY_BYTES)))
                    return
                if path != "/api/query":
                    self._reply(404, {"error": "no such endpoint"})
                    return
                raw = self._body(_MAX_QUERY_BODY_BYTES)
                allowed, tenant = self._tenant()
                if not allowed:
                    return
                if raw is None:
                    self._reply(413, {"error": "query body too large"})
                    return
                try:
                    body = json.loads(raw or b"{}")
                    sql, max_rows = body["sql"], body.get("max_rows", _DEFAULT_MAX_ROWS)
                    params = body.get("params", {})
                    if not isinstance(sql, str):
                        raise TypeError("sql must be a string")
                    if not isinstance(params, dict) or not all(
                        type(v) in (str, int, float, bool) for v in params.values()
                    ):
                        raise TypeError("params must be an object of strings and numbers")
                    if type(max_rows) is not int or not 1 <= max_rows <= _MAX_ROWS:
                        raise TypeError(f"max_rows must be an integer from 1 to {_MAX_ROWS}")
                except (ValueError, KeyError, TypeError) as exc:
                    self._reply(
                        400, {"error": f'expected {{"sql": "SELECT ...", "params": {{}}, "max_rows": N}}: {exc}'}
                    )
                    return
                self._run(lambda: api.query(sql, params, tenant, max_rows))

            def _judge(self, path: str) -> None:
                judge = api.judge
                if judge is None or path not in ("/api/judge/payloads", "/api/judge/scores"):
                    self._reply(404, {"error": f"no such endpoint: {path}"})
                    return
                raw = self._body(_MAX_JUDGE_BODY_BYTES)
                if not judge.allows(self.headers.get("X-Ragmon-Judge-Token")):
                    self._reply(403, {"error": "the judge token of this agent's data directory is required"})
                    return
                if raw is None:
                    self._reply(413, {"error": "body too large"})
                    return
                try:
                    body = json.loads(raw or b"{}")
                    if path == "/api/judge/payloads":
                        tenant, trace_ids = body["tenant"], body["trace_ids"]
                        if not isinstance(tenant, str) or not isinstance(trace_ids, list):
                            raise TypeError("tenant must be a string, trace_ids a list")
                        if not all(isinstance(t, str) for t in trace_ids):
                            raise TypeError("tenant and trace_ids must be strings")
                    else:
                        rows = body["rows"]
                        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
                            raise TypeError("rows must be a list of objects")
                except (ValueError, KeyError, TypeError) as exc:
                    self._reply(400, {"error": f"bad request: {exc}"})
                    return
                if path == "/api/judge/payloads":
                    self._run(lambda: judge.payloads(tenant, trace_ids))
                else:
                    self._run(lambda: {"written": judge.write_scores(rows)})

            def _body(self, limit: int) -> bytes | None:
                """The request's body, read before any answer (a refusal too): a kept-alive client's next request
                must not be parsed from this one's unread body. None when it is over `limit`: unread, and the
                connection closes after the answer."""
                length = int(self.headers.get("Content-Length") or 0)
                if length > limit:
                    self.close_connection = True
                    return None
                return self.rfile.read(length)

            def _tenant(self) -> tuple[bool, str | None]:
                """(allowed, tenant): tenant None = every tenant (no keys configured); refusals are answered."""
                if not api.auth.required:
                    return True, None
                tenant = api.auth.tenant_for(self.headers.get("Authorization"), self.headers.get("x-api-key"))
                if tenant is None:
                    self._reply(401, {"error": "a valid API key is required"})
                    return False, None
                return True, tenant

            def _run(self, fn: Callable[[], Any]) -> None:
                try:
                    self._reply(200, fn())
                except QueryRejected as exc:
                    self._reply(400, {"error": str(exc)})
                except StoreError as exc:
                    self._reply(503 if exc.retryable else 400, {"error": str(exc)})
                except ConnectionError:
                    raise  # the client went away mid-reply: nothing to answer (see _QuietServer)
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
        self.judge = judge
        self.labelled_scores = labelled_scores
        self._server = _QuietServer((host, port), Handler)
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
