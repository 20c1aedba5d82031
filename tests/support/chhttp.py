"""A loopback ClickHouse-HTTP endpoint that executes requests in the embedded engine (chDB).

It exists so the clickhouse-connect backend is exercised end to end without a ClickHouse server (Debian ships
18.16, too old for this schema), and so HTTP tools that speak ClickHouse (clickhouse-connect, Grafana's plugin)
can read an embedded store. It implements the part of the interface clickhouse-connect uses:

- the query from the `query` URL parameter and/or the body (ClickHouse concatenates them); for
  `INSERT … FORMAT <fmt>` everything after the format name is data, streamed into the engine in that format
  (Native, RowBinary, Arrow, TabSeparated, …) — whatever the engine reads;
- `Content-Encoding` of the request body: gzip, deflate, lz4 (frame), zstd; responses go uncompressed, which the
  client accepts when no `Content-Encoding` comes back;
- `database`, `param_<name>` (server-side binding, values already in escaped text form), `default_format`, and any
  other URL parameter as a query-level setting (`SET name = value` on a fresh connection, so nothing leaks between
  requests); GET runs with `readonly = 2` as a server does;
- a trailing `FORMAT <fmt>` picks the output format (default TabSeparated), answered with `X-ClickHouse-Format`,
  `X-ClickHouse-Timezone`, `X-ClickHouse-Query-Id` and `X-ClickHouse-Summary` headers;
- errors as the server sends them: a status code, `X-ClickHouse-Exception-Code`, and `Code: N. DB::Exception: …`;
- `query_id` and `KILL QUERY WHERE query_id = '…'`: chDB has no `query_id` setting, so a query sent with one
  carries it in a comment in front of its text (`/* chhttp-query-id:… */`, kept in `system.processes.query`) and
  that KILL is run as `KILL QUERY WHERE query LIKE '%<that comment>%'`;
- `format_schema_source = 'string'` (a Protobuf schema sent with the INSERT, as the store does for servers): a
  server caches such schemas under its `format_schema_path`, but chDB would cache them in the *process's working
  directory*; so the endpoint writes the schema under the engine's data directory and names it by absolute path.

Not implemented (and answered with an error, not faked): sessions (`session_id` is accepted and ignored — every
request stands alone), multipart/external data, progress headers, `client_protocol_version` (so the client uses
protocol 0, which the engine's default Native output matches).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import re
import socket
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ragmon.sinks.backend import quote_string
from ragmon.sinks.errors import error_code

# URL parameters that steer the HTTP layer rather than being query settings.
_TRANSPORT = frozenset(
    {
        "query",
        "database",
        "default_format",
        "query_id",
        "session_id",
        "session_timeout",
        "session_check",
        "client_protocol_version",
        "compress",
        "decompress",
        "user",
        "password",
        "quota_key",
        "wait_end_of_query",
        "buffer_size",
        "enable_http_compression",
        "send_progress_in_http_headers",
        "http_headers_progress_interval_ms",
        "cancel_http_readonly_queries_on_client_close",
    }
)
_INSERT_RE = re.compile(rb"^\s*INSERT\s+INTO\s+.*?\bFORMAT\s+(\w+)[ \t]*(?:\r?\n)?", re.IGNORECASE | re.DOTALL)
_TRAILING_FORMAT_RE = re.compile(r"\bFORMAT\s+(\w+)\s*;?\s*$", re.IGNORECASE)
_SETTING_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QUERY_ID_RE = re.compile(r"^[\w-]{1,128}$")
_KILL_BY_ID_RE = re.compile(
    r"^\s*KILL\s+QUERY\s+WHERE\s+query_id\s*=\s*'([\w-]{1,128})'\s*(SYNC|ASYNC)?\s*;?\s*$", re.IGNORECASE
)

# ClickHouse's own mapping of error codes to HTTP statuses, for the codes a client is likely to meet.
_STATUS_BY_CODE = {
    62: 400,  # SYNTAX_ERROR
    27: 400,  # CANNOT_PARSE_INPUT_ASSERTION_FAILED
    115: 400,  # UNKNOWN_SETTING
    456: 400,  # UNKNOWN_QUERY_PARAMETER
    457: 400,  # BAD_QUERY_PARAMETER
    53: 400,  # TYPE_MISMATCH
    47: 404,  # UNKNOWN_IDENTIFIER
    46: 404,  # UNKNOWN_FUNCTION
    60: 404,  # UNKNOWN_TABLE
    81: 404,  # UNKNOWN_DATABASE
    164: 403,  # READONLY
}


def _decompress(data: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return data
    if encoding == "gzip":
        return gzip.decompress(data)
    if encoding == "deflate":
        return zlib.decompress(data)
    if encoding == "lz4":
        import lz4.frame

        return bytes(lz4.frame.decompress(data))
    if encoding == "zstd":
        try:
            from compression import zstd  # type: ignore[import-not-found]
        except ImportError:
            from backports import zstd  # type: ignore[import-not-found,no-redef]
        return bytes(zstd.decompress(data))
    raise ValueError(f"unsupported Content-Encoding {encoding!r}")


class _RequestError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class ClickHouseHttpServer:
    """Serve the chDB engine at `data_dir` on a loopback port: `with ClickHouseHttpServer(path) as srv: srv.url`."""

    def __init__(self, data_dir: str | Path, host: str = "127.0.0.1", port: int = 0) -> None:
        from chdb import state

        self._state = state
        self.path = str(Path(data_dir).resolve())
        probe = state.connect(self.path)  # also keeps the engine up between requests
        table = probe.query("SELECT version() AS v, timezone() AS tz", "ArrowTable").to_pylist()[0]
        self.version, self.timezone = str(table["v"]), str(table["tz"])
        self._keepalive = probe
        handler = type("Handler", (_Handler,), {"server_state": self})
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="chhttp", daemon=True)
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ClickHouseHttpServer:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop listening and cut open keep-alive connections, as a server going down would."""
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._connections_lock:
            for conn in self._connections:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        self._thread.join()
        self._keepalive.close()

    def __enter__(self) -> ClickHouseHttpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- one request ------------------------------------------------------------------------------------

    def execute(self, method: str, url_params: list[tuple[str, str]], body: bytes) -> tuple[bytes, dict[str, str]]:
        params = dict(url_params)
        bind = {k[len("param_") :]: v for k, v in params.items() if k.startswith("param_")}
        settings = {k: v for k, v in params.items() if k not in _TRANSPORT and not k.startswith("param_")}
        if method == "GET":
            settings.setdefault("readonly", "2")
        text = params.get("query", "").encode()
        combined = text + (b"\n" if text and body else b"") + body
        started_ns = time.perf_counter_ns()
        conn = self._state.connect(self.path)
        try:
            self._prepare(conn, params.get("database"), settings)
            insert = _INSERT_RE.match(combined)
            if insert:
                fmt = insert.group(1).decode()
                statement = combined[: insert.start(1)].decode().rstrip()
                statement = re.sub(r"\s*FORMAT\s*$", "", statement, flags=re.IGNORECASE)
                inserter = conn.send_insert(statement, fmt)
                try:
                    inserter.append(combined[insert.end() :])
                    result = inserter.finish()
                except BaseException:
                    inserter.cancel()
                    raise
                summary = {"written_rows": str(result.rows_written), "written_bytes": str(result.bytes_written)}
                return b"", self._headers("TabSeparated", params, summary, started_ns)
            sql = combined.decode()
            fmt = params.get("default_format", "TabSeparated")
            trailing = _TRAILING_FORMAT_RE.search(sql)
            if trailing:
                fmt = trailing.group(1)
                sql = sql[: trailing.start()]
            sql = _with_query_id(sql, params.get("query_id", ""))
            res = conn.query(sql, fmt, params=bind)
            data = res.bytes() if hasattr(res, "bytes") else bytes(res)
            summary = {
                "read_rows": str(res.rows_read()),
                "read_bytes": str(res.bytes_read()),
                "result_bytes": str(len(data)),
            }
            return data, self._headers(fmt, params, summary, started_ns)
        finally:
            conn.close()

    def _inline_schema_to_file(self, settings: dict[str, str]) -> None:
        if settings.get("format_schema_source") != "string":
            return
        schema = settings.pop("format_schema", "")
        message = settings.pop("format_schema_message_name", "")
        del settings["format_schema_source"]
        directory = Path(self.path) / "format_schemas"
        directory.mkdir(exist_ok=True)
        path = directory / f"inline_{hashlib.sha256(schema.encode()).hexdigest()[:16]}.proto"
        if not path.exists():
            partial = path.with_suffix(f".{uuid.uuid4().hex}.tmp")  # requests run on several threads
            partial.write_text(schema)
            partial.replace(path)
        settings["format_schema"] = f"{path}:{message}"

    def _prepare(self, conn: Any, database: str | None, settings: dict[str, str]) -> None:
        self._inline_schema_to_file(settings)
        if database:
            conn.query(f"USE `{database.replace('`', '')}`", "Null")
        # readonly last: once set to 1 no other setting may change.
        for name in sorted(settings, key=lambda n: n == "readonly"):
            if not _SETTING_NAME_RE.match(name):
                raise _RequestError(f"Code: 115. DB::Exception: Unknown setting '{name}'. (UNKNOWN_SETTING)", 115)
            value = settings[name]
            literal = value if re.fullmatch(r"-?\d+(\.\d+)?", value) else quote_string(value)
            if name == "additional_table_filters":
                literal = value  # a map literal, sent by the client already in SQL syntax
            conn.query(f"SET {name} = {literal}", "Null")

    def _headers(self, fmt: str, params: dict[str, str], summary: dict[str, str], started_ns: int) -> dict[str, str]:
        full = {
            "read_rows": "0",
            "read_bytes": "0",
            "written_rows": "0",
            "written_bytes": "0",
            "total_rows_to_read": "0",
            "result_rows": "0",
            "result_bytes": "0",
            **summary,
            "elapsed_ns": str(time.perf_counter_ns() - started_ns),
        }
        text_format = fmt in ("TabSeparated", "TSV", "TabSeparatedRaw", "TSVRaw", "CSV")
        return {
            "Content-Type": "text/tab-separated-values; charset=UTF-8" if text_format else "application/octet-stream",
            "X-ClickHouse-Format": fmt,
            "X-ClickHouse-Timezone": self.timezone,
            "X-ClickHouse-Query-Id": params.get("query_id") or str(uuid.uuid4()),
            "X-ClickHouse-Server-Display-Name": "ragmon-chdb",
            "X-ClickHouse-Summary": json.dumps(full),
        }


def _with_query_id(sql: str, query_id: str) -> str:
    """`sql` marked with `query_id` (see the module docstring), or a KILL by query_id as the KILL of that mark."""
    kill = _KILL_BY_ID_RE.match(sql)
    if kill:
        mode = (kill.group(2) or "").upper()
        return f"KILL QUERY WHERE query LIKE '%/* chhttp-query-id:{kill.group(1)} */%' AND query_id != queryID() {mode}"
    if query_id and _QUERY_ID_RE.match(query_id):
        return f"/* chhttp-query-id:{query_id} */ {sql}"
    return sql


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as clickhouse-connect's connection pool expects
    server_state: ClickHouseHttpServer

    def setup(self) -> None:
        super().setup()
        with self.server_state._connections_lock:
            self.server_state._connections.add(self.connection)

    def finish(self) -> None:
        with self.server_state._connections_lock:
            self.server_state._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            body = b"".join(chunks)
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        return _decompress(body, self.headers.get("Content-Encoding", ""))

    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        if split.path.rstrip("/") in ("/ping", ""):
            if split.path.rstrip("/") == "/ping":
                self._reply(200, b"Ok.\n", {"Content-Type": "text/plain; charset=UTF-8"})
                return
        else:
            self._reply(404, b"There is no handle " + split.path.encode() + b"\n", {})
            return
        try:
            body = self._read_body() if method == "POST" else b""
            if "multipart/form-data" in self.headers.get("Content-Type", ""):
                raise _RequestError("Code: 48. DB::Exception: multipart requests are not supported here", 48)
            data, headers = self.server_state.execute(method, parse_qsl(split.query, keep_blank_values=True), body)
            self._reply(200, data, headers)
        except Exception as exc:  # the engine's message, returned as a ClickHouse server would
            message = str(exc)
            code = exc.code if isinstance(exc, _RequestError) else (error_code(message) or 1001)
            if not message.startswith("Code:"):
                message = f"Code: {code}. DB::Exception: {message}"
            self._reply(
                _STATUS_BY_CODE.get(code, 500),
                (message + "\n").encode(),
                {"X-ClickHouse-Exception-Code": str(code), "Content-Type": "text/plain; charset=UTF-8"},
            )

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")
