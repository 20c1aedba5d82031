"""Fixtures for the collectors' tests: receivers on ephemeral ports wired to a recording consumer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from collector_fakes import API_KEYS, RecordingConsumer

from collectors import ApiKeyAuth, CollectorCounters, GrpcReceiver, HttpReceiver


@pytest.fixture
def consumer() -> RecordingConsumer:
    return RecordingConsumer()


@pytest.fixture
def counters() -> CollectorCounters:
    return CollectorCounters()


@pytest.fixture
def http_receiver(consumer: RecordingConsumer, counters: CollectorCounters) -> Iterator[HttpReceiver]:
    receiver = HttpReceiver(consumer, port=0, counters=counters, max_body_bytes=256 * 1024).start()
    yield receiver
    receiver.stop(timeout_s=2.0)


@pytest.fixture
def keyed_http_receiver(consumer: RecordingConsumer, counters: CollectorCounters) -> Iterator[HttpReceiver]:
    receiver = HttpReceiver(consumer, port=0, counters=counters, auth=ApiKeyAuth(API_KEYS)).start()
    yield receiver
    receiver.stop(timeout_s=2.0)


@pytest.fixture
def grpc_receiver(consumer: RecordingConsumer, counters: CollectorCounters) -> Iterator[GrpcReceiver]:
    receiver = GrpcReceiver(
        consumer, port=0, counters=counters, auth=ApiKeyAuth(API_KEYS), max_message_bytes=256 * 1024
    ).start()
    yield receiver
    receiver.stop(timeout_s=2.0)
