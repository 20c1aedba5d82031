"""ragmon's collectors: OTLP receivers (HTTP, gRPC), decoding, per-request validation, API-key auth, counters.

The agent builds one `CollectorCounters`, one `SpanConsumer` (sampler → store) and starts the receivers::

    counters = CollectorCounters()
    auth = ApiKeyAuth(settings.agent.api_keys)
    http = HttpReceiver(consumer, port=4318, auth=auth, counters=counters).start()
    grpc = GrpcReceiver(consumer, port=4317, auth=auth, counters=counters).start()
    ...
    http.stop(); grpc.stop()

The consumer gets validated OTLP protobuf bodies; what happens to them next (the write-ahead log, the store's
envelope and its normalising SQL) is the agent's and the store's business, not the receivers'.
"""

from ragmon.collectors.auth import ApiKeyAuth
from ragmon.collectors.consumer import SpanConsumer
from ragmon.collectors.counters import CollectorCounters
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
from ragmon.collectors.export_handler import ExportHandler, ExportOutcome
from ragmon.collectors.exposition import MetricsSource, metrics_registry, render_metrics
from ragmon.collectors.feedback_endpoint import FEEDBACK_PATH, FeedbackEndpoint, FeedbackWriter
from ragmon.collectors.feedback_keys import FeedbackKeys
from ragmon.collectors.grpc_receiver import GrpcReceiver
from ragmon.collectors.http_receiver import HttpReceiver
from ragmon.collectors.validate import REJECT_REASONS, Validation, validate

__all__ = [
    "FEEDBACK_PATH",
    "REJECT_REASONS",
    "ApiKeyAuth",
    "Backpressure",
    "CollectorCounters",
    "CollectorError",
    "CompressionError",
    "ConsumerUnavailable",
    "DecodeError",
    "ExportHandler",
    "ExportOutcome",
    "FeedbackEndpoint",
    "FeedbackKeys",
    "FeedbackWriter",
    "GrpcReceiver",
    "HttpReceiver",
    "JsonDecodeError",
    "MetricsSource",
    "PayloadTooLargeError",
    "ProtobufDecodeError",
    "SpanConsumer",
    "Validation",
    "metrics_registry",
    "render_metrics",
    "validate",
]
