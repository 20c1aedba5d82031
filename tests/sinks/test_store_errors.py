"""A store that is down or errors raises a typed StoreError (retryable or permanent); nothing is swallowed."""

from __future__ import annotations

import socket

import pytest
from ragmon.sinks import StoreError, open_store
from ragmon.sinks.errors import classify

from tests.support.span_rows import insert_spans
from tests.support.synth import make_batch


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_down_is_retryable() -> None:
    with pytest.raises(StoreError) as info:
        open_store(f"http://127.0.0.1:{_closed_port()}", database="x")
    assert info.value.retryable is True


def test_server_going_down_mid_life_is_retryable(engine_dir, database) -> None:
    from tests.support.chhttp import ClickHouseHttpServer

    server = ClickHouseHttpServer(engine_dir).start()
    store = open_store(server.url, database=database)
    server.close()
    with pytest.raises(StoreError) as info:
        insert_spans(store, make_batch(2))
    assert info.value.retryable is True
    store.close()


def test_bad_sql_is_permanent(store) -> None:
    with pytest.raises(StoreError) as info:
        store.backend.execute("CREATE TABLE broken (")
    assert info.value.retryable is False and info.value.code == 62


def test_closed_store_raises(store) -> None:
    store.close()
    with pytest.raises(StoreError):
        insert_spans(store, make_batch(1))


def test_codes_are_classified() -> None:
    assert classify("Code: 252. DB::Exception: Too many parts (300).").retryable is True
    assert classify("Code: 241. DB::Exception: Memory limit exceeded").retryable is True
    assert classify("Code: 60. DB::Exception: Unknown table").retryable is False
    assert classify("no code at all").code is None


def test_a_result_the_engine_cut_short_is_retryable(chdb_store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a memory cap chDB has returned no result, or one its reader cannot parse, instead of the error; a
    reader of the store (the writer's retry, a report) must be told to try again, not that the query is wrong."""
    import pyarrow as pa

    backend = chdb_store.backend
    for failure in (RuntimeError("Invalid flatbuffers message."), pa.ArrowInvalid("Expected to read 4 bytes")):

        def broken(*args: object, failure: Exception = failure, **kwargs: object) -> None:
            raise failure

        monkeypatch.setattr(backend._reader, "query", broken)
        with pytest.raises(StoreError) as info:
            backend.select("SELECT 1", readonly=True)
        assert info.value.retryable is True and "no readable result" in str(info.value)
    monkeypatch.undo()
    assert backend.select("SELECT 1 AS one", readonly=True).column("one").to_pylist() == [1]


def test_second_engine_path_in_one_process_is_refused(engine_dir, tmp_path) -> None:
    keep = open_store(str(engine_dir), database="keepalive")
    try:
        with pytest.raises(StoreError) as info:
            open_store(str(tmp_path / "other"))
        assert info.value.retryable is False
    finally:
        keep.close()
