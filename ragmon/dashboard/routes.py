"""The dashboard's HTTP surface on the agent's API port: a page, its static files and read-only JSON.

    GET /                                      the page (static; it holds no data)
    GET /static/<file>                         app.js, style.css, favicon.svg, vendor/plotly.min.js
    GET /api/dashboard/overview?since_s=&feature=     headline figures, p50/p95 per stage, cost per feature/model
    GET /api/dashboard/latency?since_s=&feature=      p50/p95 per stage over time
    GET /api/dashboard/quality?since_s=&feature=      judged quality over time, weighted by 1 / inclusion prob.
    GET /api/dashboard/alerts                         open alerts
    GET /api/dashboard/traces?since_s=&feature=&limit=    kept traces, newest first
    GET /api/dashboard/trace?id=<32 hex>              one trace: spans, passages, answer, judge verdicts
    GET /api/dashboard/eval_runs?since_s=             the eval runs with traffic in the window (the selector)
    GET /api/dashboard/meta                           the stages and the judge's metrics as the page lists them
                                                      (`ragmon.dashboard.meta`)
    GET /api/dashboard/whoami, review, labels, agreement; POST /api/dashboard/labels
                                                      the review queue (`ragmon.dashboard.review`)

Traffic. Every view but `trace` and `alerts` is of production traffic unless `traffic=evaluation` (every
`ragmon eval run`) or `eval_run=NAME` (one) says otherwise (`ragmon.sinks.traffic`); alerts come from production only.

Keys. The JSON endpoints take the API's keys (``Authorization: Bearer`` or ``x-api-key``) and read only the key's
tenant; with no keys configured they read every tenant, as `/api/report` does. The page and its files are public
(code, no data): the page asks for a key when the JSON answers 401, keeps it in `sessionStorage` (this tab only,
gone when it closes) and sends it as a header — never as a cookie, so no other site can make the browser send it
(no CSRF), and never in a URL, so it reaches no log, history or Referer.

Headers. Every answer carries a Content-Security-Policy without inline script or style (the page's script and
plotly.js load from /static/), frame-ancestors 'none' and X-Frame-Options DENY, nosniff, no-referrer; JSON is
`no-store`. The page builds every piece of trace text with `textContent`, never as HTML. With no keys configured
the Host header must name this machine (loopback or the bound address), so a page on another site cannot read the
data through a rebound DNS name.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from ragmon.dashboard.assets import Assets
from ragmon.dashboard.keys import KeyAuth
from ragmon.dashboard.meta import page_meta
from ragmon.dashboard.review import Review, ReviewError
from ragmon.sinks.dashboard_queries import MAX_TRACES, MAX_WINDOW_S, MIN_WINDOW_S, DashboardQueries
from ragmon.sinks.errors import QueryRejected, StoreError
from ragmon.sinks.traffic import Traffic

log = logging.getLogger("ragmon.agent")

API_PREFIX = "/api/dashboard/"
STATIC_PREFIX = "/static/"
DEFAULT_WINDOW_S = 3600.0

# plotly.js adds its own CSS by creating an *empty* <style> element and filling it through the CSSOM
# (insertRule, which CSP does not govern). The hash below is SHA-256 of the empty string: it admits that empty
# element and nothing with content, so no injected style (nor any inline script) can run.
EMPTY_STYLE_HASH = "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='"
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; script-src 'self'; style-src 'self' {EMPTY_STYLE_HASH}; img-src 'self' data:;"
    " font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()",
}
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class BadRequest(ValueError):
    """A parameter the caller got wrong (answered 400 with the message)."""


class NotFound(LookupError):
    """What was asked for is not there, or not the caller's (answered 404 with the message)."""


def _json(status: int, payload: Any) -> Response:
    body = json.dumps(payload, allow_nan=False, separators=(",", ":")).encode()
    return Response(
        status,
        body,
        {**SECURITY_HEADERS, "Content-Type": "application/json", "Cache-Control": "no-store"},
    )


def _window_s(params: Mapping[str, list[str]]) -> float:
    text = params.get("since_s", [str(DEFAULT_WINDOW_S)])[0]
    try:
        value = float(text)
    except ValueError:
        raise BadRequest("since_s must be a number of seconds") from None
    if not math.isfinite(value) or not MIN_WINDOW_S <= value <= MAX_WINDOW_S:
        raise BadRequest(f"since_s must be between {MIN_WINDOW_S} and {MAX_WINDOW_S} seconds")
    return value


def _feature(params: Mapping[str, list[str]]) -> str | None:
    return params.get("feature", [""])[0] or None


def _traffic(params: Mapping[str, list[str]]) -> Traffic:
    try:
        return Traffic.from_params(params)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _limit(params: Mapping[str, list[str]]) -> int:
    text = params.get("limit", ["100"])[0]
    if not text.isdigit() or not 1 <= int(text) <= MAX_TRACES:
        raise BadRequest(f"limit must be a whole number from 1 to {MAX_TRACES}")
    return int(text)


def _host_name(host_header: str) -> str:
    """The name part of a Host header: `[::1]:4320` → `::1`, `localhost:4320` → `localhost`."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


class Dashboard:
    """Routes GET requests below /, /static/ and /api/dashboard/ to a `Response`; knows nothing of the server."""

    def __init__(
        self, queries: DashboardQueries, auth: KeyAuth, *, bind_host: str = "127.0.0.1", review: Review | None = None
    ) -> None:
        self.queries = queries
        self.auth = auth
        self.review = review
        self.assets = Assets()
        self._bind_host = bind_host.strip("[]").lower()
        meta = page_meta()
        self._endpoints: dict[str, Callable[[Mapping[str, list[str]], str | None], Any]] = {
            "overview": lambda p, tenant: queries.overview(_window_s(p), tenant, _feature(p), _traffic(p)),
            "latency": lambda p, tenant: queries.latency(_window_s(p), tenant, _feature(p), _traffic(p)),
            "quality": lambda p, tenant: queries.quality(_window_s(p), tenant, _feature(p), _traffic(p)),
            "alerts": lambda p, tenant: queries.open_alerts(tenant),
            "traces": lambda p, tenant: queries.traces(_window_s(p), tenant, _feature(p), _limit(p), _traffic(p)),
            "eval_runs": lambda p, tenant: queries.eval_runs(_window_s(p), tenant),
            "meta": lambda p, tenant: meta,
            "trace": self._trace,
        }

    @staticmethod
    def handles(path: str) -> bool:
        return path in ("/", "/index.html", "/favicon.ico") or path.startswith((STATIC_PREFIX, API_PREFIX))

    def get(self, path: str, query: str, headers: Mapping[str, str]) -> Response:
        """Answer one GET; `headers` with lower-case names. Never raises."""
        try:
            if not self._host_allowed(headers.get("host", "")):
                return _json(421, {"error": "this dashboard answers only to this machine's address"})
            if path.startswith(API_PREFIX):
                return self._api(path.removeprefix(API_PREFIX), query, headers)
            if path == "/favicon.ico":
                return self._static("favicon.svg", headers)
            if path in ("/", "/index.html"):
                return self._static("index.html", headers)
            return self._static(path.removeprefix(STATIC_PREFIX), headers)
        except Exception as exc:  # a bug here must not take the agent down, nor leak a traceback
            log.exception("dashboard request failed")
            return _json(500, {"error": f"internal error: {type(exc).__name__}"})

    def handles_post(self, path: str) -> bool:
        return self.review is not None and path == Review.POST_PATH

    def refuse_post(self, path: str, headers: Mapping[str, str]) -> Response | None:
        """The answer to a POST that is refused on its head alone (wrong host, no reviewer key), before any
        body byte is read; None when the body should be read and given to `post`. Never raises."""
        try:
            if self.review is None or path != Review.POST_PATH:
                return _json(404, {"error": f"no such endpoint: {path}"})
            if not self._host_allowed(headers.get("host", "")):
                return _json(421, {"error": "this dashboard answers only to this machine's address"})
            self.review.check_writer(headers, self._read_tenant(headers))
        except ReviewError as exc:
            return _json(exc.status, {"error": str(exc)})
        except Exception as exc:  # a bug here must not take the agent down, nor leak a traceback
            log.exception("label write check failed")
            return _json(500, {"error": f"internal error: {type(exc).__name__}"})
        return None

    def _read_tenant(self, headers: Mapping[str, str]) -> str | None:
        if not self.auth.required:
            return None  # open reads prove nothing about the key
        return self.auth.tenant_for(headers.get("authorization"), headers.get("x-api-key"))

    def post(self, path: str, headers: Mapping[str, str], body: bytes | None) -> Response:
        """Answer one POST (a reviewer's labels); `headers` with lower-case names, `body` None when it was too
        large to read. Never raises."""
        try:
            if self.review is None or path != Review.POST_PATH:
                return _json(404, {"error": f"no such endpoint: {path}"})
            if not self._host_allowed(headers.get("host", "")):
                return _json(421, {"error": "this dashboard answers only to this machine's address"})
            return _json(200, self.review.post(headers, body, self._read_tenant(headers)))
        except ReviewError as exc:
            return _json(exc.status, {"error": str(exc)})
        except Exception as exc:  # a bug here must not take the agent down, nor leak a traceback
            log.exception("label write failed")
            return _json(500, {"error": f"internal error: {type(exc).__name__}"})

    def _host_allowed(self, host_header: str) -> bool:
        if self.auth.required or self._bind_host in _WILDCARD_HOSTS:
            return True  # keys guard the data; a wildcard bind answers to any name by the operator's choice
        name = _host_name(host_header)
        return name in _LOOPBACK_HOSTS or name == self._bind_host

    def _api(self, name: str, query: str, headers: Mapping[str, str]) -> Response:
        endpoint = self._endpoints.get(name)
        review = self.review if self.review is not None and name in Review.GET_ENDPOINTS else None
        if endpoint is None and review is None:
            return _json(404, {"error": f"no such dashboard endpoint: {name}"})
        tenant: str | None = None
        if self.auth.required:
            tenant = self.auth.tenant_for(headers.get("authorization"), headers.get("x-api-key"))
            if tenant is None:
                return _json(401, {"error": "a valid API key is required"})
        try:
            if review is not None:
                return _json(200, review.get(name, parse_qs(query), tenant, headers))
            assert endpoint is not None
            return _json(200, endpoint(parse_qs(query), tenant))
        except ReviewError as exc:
            return _json(exc.status, {"error": str(exc)})
        except (BadRequest, QueryRejected) as exc:
            return _json(400, {"error": str(exc)})
        except NotFound as exc:
            return _json(404, {"error": str(exc)})
        except StoreError as exc:
            return _json(503 if exc.retryable else 500, {"error": f"store: {exc}"})

    def _trace(self, params: Mapping[str, list[str]], tenant: str | None) -> dict[str, Any]:
        trace_id = params.get("id", [""])[0].strip().lower()
        try:
            found = self.queries.trace(trace_id, tenant)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        if found is None:
            raise NotFound(f"no trace {trace_id} (it may have expired, or belong to another tenant)")
        return found

    def _static(self, name: str, headers: Mapping[str, str]) -> Response:
        asset = self.assets.get(name)
        if asset is None:
            return Response(404, b"not found", {**SECURITY_HEADERS, "Content-Type": "text/plain; charset=utf-8"})
        common = {**SECURITY_HEADERS, "ETag": asset.etag, "Cache-Control": "no-cache", "Vary": "Accept-Encoding"}
        if asset.etag in (tag.strip() for tag in headers.get("if-none-match", "").split(",")):
            return Response(304, b"", common)
        gzip_ok = "gzip" in headers.get("accept-encoding", "").lower()
        body = asset.gzipped if gzip_ok else asset.body
        extra = {"Content-Encoding": "gzip"} if gzip_ok else {}
        return Response(200, body, {**common, **extra, "Content-Type": asset.content_type})
