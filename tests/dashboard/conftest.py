"""A store per test on the session's one chDB engine (a database per test), filled with known rows — reached
directly and, for the query tests, also through the ClickHouse HTTP interface (as a ClickHouse server is)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ragmon.sinks import Store, open_store

from tests.support.chhttp import ClickHouseHttpServer


@pytest.fixture(scope="session")
def http_server(chdb_engine_dir: Path) -> Iterator[ClickHouseHttpServer]:
    with ClickHouseHttpServer(chdb_engine_dir) as server:
        yield server


@pytest.fixture
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    opened = open_store(str(chdb_engine_dir), database=f"dash_{uuid.uuid4().hex[:12]}")
    yield opened
    opened.close()


@pytest.fixture(params=["chdb", "http"])
def any_store(request: pytest.FixtureRequest, chdb_engine_dir: Path) -> Iterator[Store]:
    """The same store through either backend: the dashboard's SQL and parameters must work on both."""
    database = f"dash_{uuid.uuid4().hex[:12]}"
    if request.param == "chdb":
        opened = open_store(str(chdb_engine_dir), database=database)
    else:
        opened = open_store(request.getfixturevalue("http_server").url, database=database)
    yield opened
    opened.close()
