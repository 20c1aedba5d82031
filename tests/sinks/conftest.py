"""Shared fixtures for the store tests.

chDB hosts one engine per process, bound to one path, so every test shares one engine directory and isolates
itself with its own database. The ClickHouse-HTTP loopback server runs on that same engine; `store` is
parametrised over both backends so each behaviour is checked through chDB directly and through
clickhouse-connect over HTTP.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ragmon.sinks import Store, open_store

from tests.support.chhttp import ClickHouseHttpServer


@pytest.fixture(scope="session")
def engine_dir(chdb_engine_dir: Path) -> Path:
    return chdb_engine_dir


@pytest.fixture(scope="session")
def http_server(engine_dir: Path) -> Iterator[ClickHouseHttpServer]:
    with ClickHouseHttpServer(engine_dir) as server:
        yield server


@pytest.fixture
def database() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


def open_backend(kind: str, engine_dir: Path, server: ClickHouseHttpServer, database: str) -> Store:
    target = str(engine_dir) if kind == "chdb" else server.url
    return open_store(target, database=database)


@pytest.fixture(params=["chdb", "http"])
def store(request: pytest.FixtureRequest, engine_dir: Path, http_server: ClickHouseHttpServer, database: str):
    opened = open_backend(request.param, engine_dir, http_server, database)
    yield opened
    opened.close()


@pytest.fixture
def chdb_store(engine_dir: Path, http_server: ClickHouseHttpServer, database: str) -> Iterator[Store]:
    opened = open_store(str(engine_dir), database=database)
    yield opened
    opened.close()
