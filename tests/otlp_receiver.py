"""A scripted OTLP/HTTP receiver on 127.0.0.1 for exporter tests: real HTTP, replies the test chooses."""

from __future__ import annotations

import gzip
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    rejected_spans: int = 0  # > 0: answer 200 with partial_success


class OtlpReceiver:
    """Records every export request; answers from a script of replies, then 200."""

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.requests: list[tuple[dict[str, str], ExportTraceServiceRequest | None]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                with receiver._lock:
                    reply = receiver.script.popleft() if receiver.script else Reply()
                    parsed = ExportTraceServiceRequest.FromString(body) if reply.status == 200 else None
                    receiver.requests.append((dict(self.headers), parsed))
                payload = b""
                if reply.rejected_spans:
                    response = ExportTraceServiceResponse()
                    response.partial_success.rejected_spans = reply.rejected_spans
                    response.partial_success.error_message = "scripted rejection"
                    payload = response.SerializeToString()
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def span_names(self) -> list[str]:
        with self._lock:
            return [
                span.name
                for _, request in self.requests
                if request is not None
                for rs in request.resource_spans
                for ss in rs.scope_spans
                for span in ss.spans
            ]
