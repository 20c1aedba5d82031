"""Helpers for the fault suite: valid OTLP requests, a raw HTTP client for 127.0.0.1, a recording consumer and the
session tally that `conftest.pytest_terminal_summary` prints."""

from __future__ import annotations

import http.client
import itertools
import os
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

LONG = os.environ.get("RAGMON_FAULTS_LONG") == "1"
HOST = "127.0.0.1"
_ids = itertools.count(1)


def suite_env_names() -> list[str]:
    """The suite's own RAGMON_FAULTS_* variables. A ragmon process refuses unknown RAGMON_* settings, so they must
    not reach the agents and workers the suite starts."""
    return [name for name in os.environ if name.startswith("RAGMON_FAULTS_")]


def scaled(short: int, long: int) -> int:
    """`short` by default, `long` with RAGMON_FAULTS_LONG=1."""
    return long if LONG else short


# --- the session tally -----------------------------------------------------------------------------------------
@dataclass
class Tally:
    requests: int = 0
    faults: int = 0
    accepted: int = 0  # answered 200 / OK (including partial_success)
    partial: int = 0  # 200 with partial_success.rejected_spans > 0
    by_status: Counter[str] = field(default_factory=Counter)
    good_sent: int = 0
    good_delivered: int = 0
    health_checks: int = 0
    health_failures: int = 0
    connections_held: int = 0
    connections_closed_by_server: int = 0
    security_probes: int = 0
    security_refused: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, status: int | str, *, fault: bool, partial: bool = False) -> None:
        with self._lock:
            self.requests += 1
            self.faults += fault
            if status in (200, "OK"):
                self.accepted += 1
                self.partial += partial
            else:
                self.by_status[str(status)] += 1

    def health(self, ok: bool) -> None:
        with self._lock:
            self.health_checks += 1
            self.health_failures += not ok


TALLY = Tally()


# --- OTLP requests -----------------------------------------------------------------------------------------------
def span(name: str = "op", *, trace_id: bytes | None = None, attributes: int = 2) -> Span:
    n = next(_ids)
    now = time.time_ns()  # recent: the store's retention drops old spans
    return Span(
        trace_id=trace_id or n.to_bytes(8, "big") + b"\x01" * 8,
        span_id=n.to_bytes(8, "big"),
        name=name,
        start_time_unix_nano=now,
        end_time_unix_nano=now + 1_000_000,
        attributes=[KeyValue(key=f"k{i}", value=AnyValue(string_value=f"v{i}")) for i in range(attributes)],
    )


def request(*spans: Span, service: str = "fault-svc") -> ExportTraceServiceRequest:
    resource = ResourceSpans()
    resource.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value=service)))
    resource.scope_spans.append(ScopeSpans(spans=list(spans)))
    return ExportTraceServiceRequest(resource_spans=[resource])


def good_body(spans: int = 3, service: str = "fault-svc") -> tuple[bytes, set[bytes]]:
    req = request(*(span(f"good-{i}") for i in range(spans)), service=service)
    return req.SerializeToString(), {s.span_id for s in req.resource_spans[0].scope_spans[0].spans}


# --- the recording consumer ----------------------------------------------------------------------------------------
class Recorder:
    """A SpanConsumer that keeps every (tenant, body, spans) it is handed."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, bytes, int]] = []
        self._lock = threading.Lock()

    def consume(self, tenant: str, body: bytes, spans: int) -> None:
        with self._lock:
            self.requests.append((tenant, body, spans))

    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def since(self, index: int) -> list[tuple[str, bytes, int]]:
        with self._lock:
            return list(self.requests[index:])


# --- HTTP on 127.0.0.1 -------------------------------------------------------------------------------------------
@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


def post(
    port: int,
    body: bytes,
    content_type: str = "application/x-protobuf",
    *,
    headers: dict[str, str] | None = None,
    path: str = "/v1/traces",
    timeout_s: float = 10.0,
) -> Reply:
    """One POST on a fresh connection (closed after)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout_s)
    try:
        all_headers = {"Content-Type": content_type, "Connection": "close", **(headers or {})}
        conn.request("POST", path, body=body, headers=all_headers)
        response = conn.getresponse()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        conn.close()


def raw_exchange(port: int, data: bytes, timeout_s: float = 5.0) -> bytes:
    """Send raw bytes, read until the server closes (or `timeout_s`); the bytes received."""
    with socket.create_connection((HOST, port), timeout=timeout_s) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):
            pass
    return b"".join(chunks)


def healthy(port: int, timeout_s: float = 5.0) -> bool:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout_s)
    try:
        conn.request("GET", "/health")
        response = conn.getresponse()
        ok = response.status == 200 and b"ok" in response.read()
    except OSError:
        ok = False
    finally:
        conn.close()
    TALLY.health(ok)
    return ok
