"""The store fixtures of tests/sinks (one engine per process, a database per test, chDB and HTTP backends)."""

from tests.sinks.conftest import database, engine_dir, http_server, store

__all__ = ["database", "engine_dir", "http_server", "store"]
