"""Real OTLP logs receivers on 127.0.0.1 for the evaluation-event tests: OTLP/gRPC (grpcio with opentelemetry-proto's
generated LogsService) and OTLP/HTTP (`POST /v1/logs`), each decoding every `ExportLogsServiceRequest` it accepts.
Replies follow a script the test sets (`fail_with`), then succeed. `GarbageServer` answers any connection with bytes
that are not HTTP at all. Everything binds port 0 on loopback and stops in `stop()`."""

from __future__ import annotations

import socket
import threading
import time
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class Event:
    """One decoded LogRecord, with what it came with."""

    event_name: str
    trace_id: str  # hex, '' when absent
    span_id: str
    severity_number: int
    time_unix_nano: int
    attributes: dict[str, Any]
    service_name: str
    scope_name: str
    headers: dict[str, str]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def decode(request: ExportLogsServiceRequest, headers: dict[str, str]) -> list[Event]:
    events: list[Event] = []
    for resource_logs in request.resource_logs:
        resource = {a.key: _value(a.value) for a in resource_logs.resource.attributes}
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                events.append(
                    Event(
                        event_name=record.event_name,
                        trace_id=record.trace_id.hex(),
                        span_id=record.span_id.hex(),
                        severity_number=record.severity_number,
                        time_unix_nano=record.time_unix_nano,
                        attributes={a.key: _value(a.value) for a in record.attributes},
                        service_name=str(resource.get("service.name", "")),
                        scope_name=scope_logs.scope.name,
                        headers=headers,
                    )
                )
    return events


class _Recorder:
    """What both receivers share: the decoded events, the requests seen, the scripted failures."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.requests = 0
        self.failures_left = 0
        self._lock = threading.Lock()

    def fail_with(self, times: int) -> None:
        """Fail the next `times` requests (the receiver's own way: 503 or UNAVAILABLE); then accept."""
        with self._lock:
            self.failures_left = times

    def _take(self, request: ExportLogsServiceRequest | None, headers: dict[str, str]) -> bool:
        """Count the request; True when it is to be accepted (and then its events are recorded)."""
        with self._lock:
            self.requests += 1
            if self.failures_left:
                self.failures_left -= 1
                return False
            if request is not None:
                self.events.extend(decode(request, headers))
            return True

    def wait_for(self, count: int, timeout_s: float = 30.0) -> list[Event]:
        """The events, once at least `count` arrived (a state, polled), else AssertionError with what did."""
        deadline = time.monotonic() + timeout_s
        while len(self.events) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.events)} of {count} events arrived in {timeout_s} s")
            time.sleep(0.02)
        with self._lock:
            return list(self.events)


class GrpcLogsReceiver(_Recorder):
    """OTLP/gRPC LogsService on 127.0.0.1; a scripted failure is UNAVAILABLE (retryable)."""

    def __init__(self) -> None:
        super().__init__()
        recorder = self

        class Servicer(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(
                self, request: ExportLogsServiceRequest, context: grpc.ServicerContext
            ) -> ExportLogsServiceResponse:
                headers = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
                if not recorder._take(request, headers):
                    context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: unavailable")
                return ExportLogsServiceResponse()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Servicer(), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.stop(grace=None)


class HttpLogsReceiver(_Recorder):
    """OTLP/HTTP `POST /v1/logs` on 127.0.0.1; a scripted failure is 503 with `Retry-After: 0`."""

    def __init__(self) -> None:
        super().__init__()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/v1/logs":
                    self._reply(404)
                    return
                try:
                    request = ExportLogsServiceRequest.FromString(body)
                except Exception:
                    self._reply(400)
                    return
                if recorder._take(request, {k.lower(): v for k, v in self.headers.items()}):
                    self._reply(200, ExportLogsServiceResponse().SerializeToString())
                else:
                    self._reply(503, headers={"Retry-After": "0"})

            def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class GarbageServer:
    """Accepts connections on 127.0.0.1 and answers each with bytes that are not HTTP, then hangs up."""

    def __init__(self, reply: bytes = b"\x00\x01garbage, not HTTP\r\n\r\n") -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._socket.settimeout(0.1)
        self.port = self._socket.getsockname()[1]
        self.connections = 0
        self._reply = reply
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            with connection:
                connection.settimeout(1.0)
                try:
                    connection.recv(65536)
                    connection.sendall(self._reply)
                except OSError:
                    pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self._socket.close()


def unused_port() -> int:
    """A loopback port nothing listens on (bound, then released): connections to it are refused."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port: int = probe.getsockname()[1]
    return port
