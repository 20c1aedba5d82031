"""ragmon's collectors: OTLP receivers (HTTP, gRPC), per-request validation, and the SQL that normalises spans.

The agent builds one `CollectorCounters`, one `SpanConsumer` (sampler → store) and starts the receivers::

    counters = CollectorCounters()
    auth = ApiKeyAuth(settings.agent.api_keys)
    http = HttpReceiver(consumer, port=4318, auth=auth, counters=counters).start()
    grpc = GrpcReceiver(consumer, port=4317, auth=auth, counters=counters).start()
    ...
    http.stop(); grpc.stop()

The consumer gets validated OTLP protobuf bodies; the store seals them (`seal`) and inserts them into a Null
table whose materialized views (`normalise_select`, then `spans_select` and `content_select`) normalise every
dialect inside ClickHouse.
"""

from ragmon.collectors.auth import ApiKeyAuth
from ragmon.collectors.consumer import SpanConsumer
from ragmon.collectors.counters import CollectorCounters, MetricsSource, render_metrics
from ragmon.collectors.envelope import REJECT_REASONS, Validation, validate
from ragmon.collectors.errors import (
    Backpressure,
    CollectorError,
    CompressionError,
    ConsumerUnavailable,
    DecodeError,
    JsonDecodeError,
    PayloadTooLargeError,
    ProtobufDecodeError,
)
from ragmon.collectors.grpc_receiver import GrpcReceiver
from ragmon.collectors.http_receiver import HttpReceiver
from ragmon.collectors.ingest import ExportOutcome, Ingest
from ragmon.collectors.otlp_sql import (
    INPUT_COLUMNS,
    PROTO_MESSAGE,
    PROTO_SCHEMA,
    content_select,
    normalise_select,
    seal,
    spans_select,
)

__all__ = [
    "INPUT_COLUMNS",
    "PROTO_MESSAGE",
    "PROTO_SCHEMA",
    "REJECT_REASONS",
    "ApiKeyAuth",
    "Backpressure",
    "CollectorCounters",
    "CollectorError",
    "CompressionError",
    "ConsumerUnavailable",
    "DecodeError",
    "ExportOutcome",
    "GrpcReceiver",
    "HttpReceiver",
    "Ingest",
    "JsonDecodeError",
    "MetricsSource",
    "PayloadTooLargeError",
    "ProtobufDecodeError",
    "SpanConsumer",
    "Validation",
    "content_select",
    "normalise_select",
    "render_metrics",
    "seal",
    "spans_select",
    "validate",
]
