"""OTLP/gRPC receiver: ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` on grpcio.

Same semantics as the HTTP receiver, mapped to gRPC codes: UNAUTHENTICATED for a missing or wrong API key
(``authorization: Bearer <key>`` or ``x-api-key`` metadata), RESOURCE_EXHAUSTED with RetryInfo when the
consumer pushes back or the agent's resident memory is over its high-water mark (`collectors/memory_guard.py`),
UNAVAILABLE (+RetryInfo) when it is down, OK with ``partial_success`` when spans were
rejected, INVALID_ARGUMENT for a message that does not parse. grpcio decompresses the message and enforces
`max_message_bytes` on the decompressed size (RESOURCE_EXHAUSTED); the handler is registered with no request
deserializer, so it gets the raw bytes: they are parsed once to count invalid spans and then passed on as they
are (no re-serialisation), exactly like an OTLP/HTTP body.

RetryInfo is sent both as the standard ``grpc-status-details-bin`` (a google.rpc.Status with the detail) and as
``google.rpc.retryinfo-bin``, which is what the OpenTelemetry Python exporter reads. The OTLP specification makes
RESOURCE_EXHAUSTED retryable only when it carries RetryInfo (the Collector's exporter drops the data otherwise), so
every retryable one carries it; the oversized message's, which grpcio sends, has none on purpose: sending the same
message again cannot succeed.

Concurrency: at most `max_concurrent_rpcs` export RPCs are admitted at once (waiting for one of the
`worker_threads` or running; grpcio holds each one's whole message). Over it the RPC is answered
RESOURCE_EXHAUSTED + RetryInfo. grpcio's own `maximum_concurrent_rpcs` would answer RESOURCE_EXHAUSTED with no
details at all, so the bound is kept here instead: the handler pool counts what was submitted to it and not yet
finished, and the handler lookup — which grpcio runs on its serving thread before queueing the RPC for a worker,
where its own cap is checked too — refuses past the bound. The refusal runs on a separate one-thread pool so it
never waits behind the RPCs that fill the workers, and without reading the message, so a slow sender cannot hold
it; what waits for that thread is bounded by how fast refusals arrive, each answered in microseconds.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final, NoReturn, ParamSpec, TypeVar

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)
from ragmon.collectors.auth import ApiKeyAuth
from ragmon.collectors.consumer import SpanConsumer
from ragmon.collectors.counters import CollectorCounters
from ragmon.collectors.errors import Backpressure, ConsumerUnavailable, DecodeError
from ragmon.collectors.export_handler import ExportHandler
from ragmon.collectors.memory_guard import MemoryGuard

__all__ = ["GrpcReceiver"]

_SERVICE: Final = "opentelemetry.proto.collector.trace.v1.TraceService"
_EXPORT_METHOD: Final = f"/{_SERVICE}/Export"

_P = ParamSpec("_P")
_T = TypeVar("_T")

_log = logging.getLogger(__name__)


class GrpcReceiver:
    """OTLP/gRPC receiver. `start()` binds (OSError if the port is taken); `stop(timeout_s)` drains."""

    def __init__(
        self,
        consumer: SpanConsumer,
        *,
        host: str = "127.0.0.1",
        port: int = 4317,
        auth: ApiKeyAuth | None = None,
        counters: CollectorCounters | None = None,
        max_message_bytes: int = 16 * 1024 * 1024,
        worker_threads: int = 4,
        max_concurrent_rpcs: int = 64,
        busy_retry_after_s: float = 1.0,
        memory_guard: MemoryGuard | None = None,
    ) -> None:
        if max_concurrent_rpcs < 1 or worker_threads < 1:
            raise ValueError("max_concurrent_rpcs and worker_threads must be at least 1")
        self.host = host
        self.memory_guard = memory_guard
        self._requested_port = port
        self.auth = auth or ApiKeyAuth()
        self.counters = counters if counters is not None else CollectorCounters()
        self.handler = ExportHandler(consumer, counters=self.counters, max_body_bytes=max_message_bytes)
        self.max_message_bytes = max_message_bytes
        self._worker_threads = worker_threads
        self.max_concurrent_rpcs = max_concurrent_rpcs
        self.busy_retry_after_s = busy_retry_after_s
        self._pool: _CountingPool | None = None
        self._refusals: concurrent.futures.ThreadPoolExecutor | None = None
        self._server: grpc.Server | None = None
        self.port = 0

    def start(self) -> GrpcReceiver:
        if self._server is not None:
            raise RuntimeError("receiver already started")
        self._pool = _CountingPool(self._worker_threads, "ragmon-otlp-grpc")
        self._refusals = concurrent.futures.ThreadPoolExecutor(1, "ragmon-otlp-grpc-busy")
        # No maximum_concurrent_rpcs: the bound is _Admission's (see the module docstring).
        server = grpc.server(
            self._pool,
            options=[
                ("grpc.max_receive_message_length", self.max_message_bytes),
                ("grpc.so_reuseport", 0),  # a taken port must fail loudly, not be shared silently
            ],
        )
        service = _TraceService(self)
        export = grpc.unary_unary_rpc_method_handler(
            service.Export,
            request_deserializer=None,  # raw bytes: parsed once by ExportHandler, passed on unchanged
            response_serializer=ExportTraceServiceResponse.SerializeToString,
        )
        # Registered as client-streaming (the wire is the same for a unary client) so that grpcio does not wait for
        # the message before calling it: the refusal never reads it, and a slow sender cannot hold the refusal thread.
        busy = grpc.stream_unary_rpc_method_handler(
            _Busy(self, self._refusals),
            request_deserializer=None,
            response_serializer=ExportTraceServiceResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers((_Admission(self._pool, self.max_concurrent_rpcs, export, busy),))
        port = server.add_insecure_port(f"{self.host}:{self._requested_port}")
        if port == 0:
            self._shutdown_pools()
            raise OSError(f"cannot bind OTLP/gRPC receiver to {self.host}:{self._requested_port}")
        server.start()
        self._server = server
        self.port = port
        return self

    @property
    def rpcs_in_progress(self) -> int:
        """Export RPCs admitted and not finished (waiting for a worker or running)."""
        return self._pool.active if self._pool is not None else 0

    @property
    def endpoint(self) -> str:
        """``host:port`` for a gRPC client."""
        return f"{self.host}:{self.port}"

    def stop(self, timeout_s: float = 5.0) -> None:
        """Refuse new RPCs, give in-flight ones `timeout_s`, then cancel them."""
        if self._server is not None:
            self._server.stop(grace=timeout_s).wait(timeout_s + 1.0)
            self._server = None
        self._shutdown_pools()

    def _shutdown_pools(self) -> None:
        # grpcio never shuts down the pools it is given; without this each stopped receiver would keep its threads.
        for pool in (self._pool, self._refusals):
            if pool is not None:
                pool.shutdown(wait=False)
        self._pool = self._refusals = None

    def __enter__(self) -> GrpcReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _CountingPool(concurrent.futures.ThreadPoolExecutor):
    """The handlers' pool, counting the RPCs submitted to it and not yet finished (queued or running).

    grpcio submits each admitted RPC here and the future completes whether the RPC ran, failed or was cancelled
    while it waited, so the count cannot leak (grpcio counts its own cap the same way)."""

    def __init__(self, workers: int, name: str) -> None:
        super().__init__(workers, name)
        self._count_lock = threading.Lock()
        self.active = 0

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> concurrent.futures.Future[_T]:
        with self._count_lock:
            self.active += 1
        try:
            future = super().submit(fn, *args, **kwargs)
        except BaseException:
            self._finished(None)
            raise
        future.add_done_callback(self._finished)
        return future

    def _finished(self, _future: object) -> None:
        with self._count_lock:
            self.active -= 1


class _Admission(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc is untyped here
    """Export while fewer than `limit` RPCs are in progress, else the RESOURCE_EXHAUSTED + RetryInfo handler.

    grpcio calls `service` on its serving thread just before it submits the RPC to the pool, one RPC at a time,
    so the count read here already includes every RPC admitted before."""

    def __init__(self, pool: _CountingPool, limit: int, export: Any, busy: Any) -> None:
        self._pool = pool
        self._limit = limit
        self._export = export
        self._busy = busy

    def service(self, handler_call_details: Any) -> Any:
        if handler_call_details.method != _EXPORT_METHOD:
            return None  # grpcio answers UNIMPLEMENTED
        return self._export if self._pool.active < self._limit else self._busy


class _Busy:
    """The refusal of an RPC over the concurrency bound. grpcio runs a behaviour on its `experimental_thread_pool`
    when it has one (grpcio >= 1.60 at least): the refusals get their own thread so they are answered while every
    worker is taken. Were grpcio to drop that hook, refusals would queue behind the workers (still with RetryInfo);
    tests/collectors/test_grpc_receiver.py refuses while the only worker is held, so it would notice."""

    def __init__(self, receiver: GrpcReceiver, pool: concurrent.futures.ThreadPoolExecutor) -> None:
        self.receiver = receiver
        self.experimental_thread_pool = pool

    def __call__(self, messages: Iterator[bytes], context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        receiver = self.receiver
        receiver.counters.add("ragmon_receiver_requests_total", transport="grpc", outcome="overloaded")
        message = f"more than {receiver.max_concurrent_rpcs} export requests in progress"
        _abort_with_retry(context, grpc.StatusCode.RESOURCE_EXHAUSTED, message, receiver.busy_retry_after_s)


class _TraceService:
    def __init__(self, receiver: GrpcReceiver) -> None:
        self.receiver = receiver

    def Export(self, body: bytes, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        receiver = self.receiver
        metadata = {key.lower(): value for key, value in context.invocation_metadata()}
        authorization = metadata.get("authorization")
        api_key = metadata.get("x-api-key")
        tenant = receiver.auth.tenant_for(
            authorization if isinstance(authorization, str) else None, api_key if isinstance(api_key, str) else None
        )
        if tenant is None:
            receiver.counters.add("ragmon_receiver_requests_total", transport="grpc", outcome="unauthenticated")
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid API key")
            raise AssertionError("unreachable: context.abort raises")
        guard = receiver.memory_guard
        if guard is not None and (wait_s := guard.admit("grpc")) is not None:
            receiver.counters.add("ragmon_receiver_requests_total", transport="grpc", outcome="memory")
            _abort_with_retry(context, grpc.StatusCode.RESOURCE_EXHAUSTED, guard.reason, wait_s)
        try:
            outcome = receiver.handler.export_body(body, encoding="protobuf", tenant=tenant, transport="grpc")
        except DecodeError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Backpressure as exc:
            code = (
                grpc.StatusCode.UNAVAILABLE
                if isinstance(exc, ConsumerUnavailable)
                else grpc.StatusCode.RESOURCE_EXHAUSTED
            )
            _abort_with_retry(context, code, str(exc), exc.retry_after_s)
        except Exception:
            _log.exception("unexpected error handling an OTLP/gRPC export")
            receiver.counters.add("ragmon_receiver_requests_total", transport="grpc", outcome="internal_error")
            context.abort(grpc.StatusCode.INTERNAL, "internal error")
        response = ExportTraceServiceResponse()
        if outcome.rejected_spans:
            response.partial_success.CopyFrom(
                ExportTracePartialSuccess(rejected_spans=outcome.rejected_spans, error_message=outcome.error_message)
            )
        return response


def _abort_with_retry(context: Any, code: grpc.StatusCode, message: str, retry_after_s: float) -> NoReturn:
    seconds = max(0.0, retry_after_s)
    whole = math.floor(seconds)
    retry = error_details_pb2.RetryInfo(
        retry_delay=duration_pb2.Duration(seconds=whole, nanos=int((seconds - whole) * 1e9))
    )
    detail = any_pb2.Any()
    detail.Pack(retry)
    status = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    context.set_trailing_metadata(
        (
            ("grpc-status-details-bin", status.SerializeToString()),
            ("google.rpc.retryinfo-bin", retry.SerializeToString()),
        )
    )
    context.abort(code, message)
    raise AssertionError("unreachable: context.abort raises")
