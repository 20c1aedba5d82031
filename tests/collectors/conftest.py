"""Fixtures for the collectors' tests: receivers on ephemeral ports wired to a recording consumer, and a chDB
store (one session per test process, one database per test) that normalises what they received."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from chdb import session as chdb_session
from ragmon.collectors import ApiKeyAuth, CollectorCounters, GrpcReceiver, HttpReceiver

from tests.collectors.collector_fakes import API_KEYS, RecordingConsumer
from tests.collectors.sql_store import SqlStore


@pytest.fixture(scope="session")
def chdb_dir(chdb_engine_dir: Path) -> Path:
    return chdb_engine_dir


@pytest.fixture(scope="session")
def chdb(chdb_dir: Path) -> Iterator[chdb_session.Session]:
    session = chdb_session.Session(str(chdb_dir))
    yield session
    session.close()


@pytest.fixture
def make_store(chdb: chdb_session.Session, chdb_dir: Path) -> Callable[..., SqlStore]:
    def make(**options: Any) -> SqlStore:
        return SqlStore(chdb, chdb_dir, **options)

    return make


@pytest.fixture
def store(make_store: Callable[..., SqlStore]) -> SqlStore:
    return make_store()


@pytest.fixture
def consumer(store: SqlStore) -> RecordingConsumer:
    return RecordingConsumer(store)


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
