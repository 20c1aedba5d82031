"""The store's one exception type, classified once at the backend boundary.

::

    StoreError                 (retryable: bool, code: ClickHouse error code or None)
     ├── retryable=True        engine busy, timeouts, too many parts, network down: retry with backoff
     └── retryable=False       bad SQL, unknown table, type mismatch, read-only violation: fix, don't retry
    QueryRejected(StoreError)  a read-only query refused by the guard before it reached the engine
    PartlyStored(StoreError)   a batch sent as several INSERTs stored some of them (`unstored`: what was not)

Backends map their driver's errors here (`raise StoreError(...) from exc`); nothing is swallowed.
"""

from __future__ import annotations

import re

# ClickHouse error codes worth retrying: transient load, resource or connectivity trouble.
RETRYABLE_CODES = frozenset(
    {
        159,  # TIMEOUT_EXCEEDED
        173,  # CANNOT_ALLOCATE_MEMORY
        202,  # TOO_MANY_SIMULTANEOUS_QUERIES
        209,  # SOCKET_TIMEOUT
        210,  # NETWORK_ERROR
        236,  # ABORTED
        241,  # MEMORY_LIMIT_EXCEEDED
        242,  # TABLE_IS_READ_ONLY (replica lost Keeper for a while)
        243,  # NOT_ENOUGH_SPACE
        252,  # TOO_MANY_PARTS
        279,  # ALL_CONNECTION_TRIES_FAILED
        319,  # UNKNOWN_STATUS_OF_INSERT
        425,  # SYSTEM_ERROR
        999,  # KEEPER_EXCEPTION
    }
)

_CODE_RE = re.compile(r"Code:\s*(\d+)")


class StoreError(Exception):
    """A store operation failed. `retryable` says whether the same call may succeed later."""

    def __init__(self, message: str, *, retryable: bool, code: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.code = code


class QueryRejected(StoreError):
    """A read-only query was refused before execution (not a SELECT, a forbidden function, ...)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class PartlyStored(StoreError):
    """A batch sent as several INSERTs at once (`ragmon.sinks.store.Store.insert_otlp`) stored some of them.

    `unstored` are the (start, stop) index ranges of the envelopes whose INSERT failed. Re-sending the whole batch
    is safe (each stored part's deduplication token drops its repeat); storing requests one by one after a
    permanent error must take only these, or the stored parts would be stored twice."""

    def __init__(self, cause: StoreError, unstored: list[tuple[int, int]]) -> None:
        super().__init__(f"{cause} (envelopes not stored: {unstored})", retryable=cause.retryable, code=cause.code)
        self.unstored = unstored


def error_code(message: str) -> int | None:
    """The ClickHouse error code in a `Code: N. DB::Exception: ...` message, if any."""
    match = _CODE_RE.search(message)
    return int(match.group(1)) if match else None


def classify(message: str, code: int | None = None) -> StoreError:
    """A StoreError for an engine message; retryable when its code is in RETRYABLE_CODES."""
    code = code if code is not None else error_code(message)
    return StoreError(message, retryable=code in RETRYABLE_CODES, code=code)
