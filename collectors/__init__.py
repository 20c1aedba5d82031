"""ragmon's collectors: OTLP receivers (HTTP, gRPC), decoding and normalisation of every dialect to `SpanBatch`.

The agent builds one `CollectorCounters`, one `SpanConsumer` (sampler → store) and starts the receivers::

    counters = CollectorCounters()
    auth = ApiKeyAuth(settings.agent.api_keys)
    http = HttpReceiver(consumer, port=4318, auth=auth, counters=counters).start()
    grpc = GrpcReceiver(consumer, port=4317, auth=auth, counters=counters).start()
    ...
    http.stop(); grpc.stop()
"""

from collectors.auth import ApiKeyAuth
from collectors.consumer import SpanConsumer
from collectors.counters import CollectorCounters, MetricsSource, render_metrics
from collectors.errors import (
    Backpressure,
    CollectorError,
    CompressionError,
    ConsumerUnavailable,
    DecodeError,
    JsonDecodeError,
    PayloadTooLargeError,
    ProtobufDecodeError,
)
from collectors.grpc_receiver import GrpcReceiver
from collectors.http_receiver import HttpReceiver
from collectors.ingest import ExportOutcome, Ingest
from collectors.normalise import REJECT_REASONS, NormaliseOptions, NormaliseResult, normalise_json, normalise_protobuf

__all__ = [
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
    "NormaliseOptions",
    "NormaliseResult",
    "PayloadTooLargeError",
    "ProtobufDecodeError",
    "SpanConsumer",
    "normalise_json",
    "normalise_protobuf",
    "render_metrics",
]
