"""A minimal OTLP/HTTP trace receiver for benchmarks: answers 200 and counts the spans it received.

It runs in its own process (`python benchmarks/_otlp_sink.py --port 0`) so that receiving and parsing are not
charged to the app being measured. Spans are counted by parsing each body with the official protobuf classes, so
a malformed export shows up as a 400 and a missing span as a count that falls short.

    POST /v1/traces   ExportTraceServiceRequest (protobuf, optionally gzip) -> 200, empty response
    GET  /stats       {"spans": total spans, "requests": export requests, "bad_requests": unparsable bodies}

On start it prints one line, `PORT <n>`, to stdout, so a parent can bind port 0 and learn the port.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

_lock = threading.Lock()
_totals = {"spans": 0, "requests": 0, "bad_requests": 0}


def count_spans(body: bytes) -> int:
    """Spans in a serialised ExportTraceServiceRequest."""
    request = ExportTraceServiceRequest.FromString(body)
    return sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: both exporters under test hold one persistent connection

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        try:
            if self.headers.get("Content-Encoding", "").lower() == "gzip":
                body = gzip.decompress(body)
            spans = count_spans(body)
        except Exception:
            with _lock:
                _totals["bad_requests"] += 1
            self._reply(400, b"", "text/plain")
            return
        with _lock:
            _totals["spans"] += spans
            _totals["requests"] += 1
        # An empty ExportTraceServiceResponse (no partial_success) is zero bytes of protobuf.
        self._reply(200, b"", "application/x-protobuf")

    def do_GET(self) -> None:
        if self.path != "/stats":
            self._reply(404, b"", "text/plain")
            return
        with _lock:
            body = json.dumps(_totals).encode()
        self._reply(200, body, "application/json")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None  # one log line per export request would cost more than parsing it


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed as 'PORT <n>')")
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer((args.host, args.port), _Handler)
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
