"""The store's one exception type, classified once at the backend boundary.

::

    StoreError                 (retryable: bool, code: ClickHouse error code or None)
     ├── retryable=True        engine busy, timeouts, too many parts, network down: retry with backoff
     └── retryable=False       bad SQL, unknown table, type mismatch, read-only violation: fix, don't retry
    QueryRejected(StoreError)  a read-only query refused by the guard before it reached the engine
     └── QueryBudgetExceeded   a caller's read stopped by the engine at a limit of its query budget (`limit`)
    QueryCancelled(StoreError) a caller's read cancelled in the engine (`Store.cancel`, or the store closing)
    ReadersBusy(StoreError)    every read connection stayed busy for the read's whole wait (retryable)
    PartlyStored(StoreError)   a batch sent as several INSERTs stored some of them (`unstored`: what was not)

What an HTTP front end answers for each: QueryRejected and QueryBudgetExceeded 400 (the query must change — a
narrower window, fewer rows; not retryable), QueryCancelled 503 when the store is closing (`retryable`) and
nothing when the caller went away (499 in a log), ReadersBusy 503 with `Retry-After` (retryable).

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


class QueryBudgetExceeded(QueryRejected):
    """The engine stopped a caller's read at a limit of its budget (`ragmon.settings.QueryBudget`).

    A QueryRejected, not a retryable StoreError: the same query would meet the same limit again, whereas the
    writer's MEMORY_LIMIT_EXCEEDED (the engine's total, shared by every query) is worth retrying. `limit` is the
    budget field (`max_execution_time_s`, ...), `setting` the settings path that sets it for this caller."""

    def __init__(self, message: str, *, limit: str, setting: str, code: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        self.setting = setting
        self.code = code


class QueryCancelled(StoreError):
    """A caller's read was cancelled in the engine: by `Store.cancel(tag)` (the caller went away: not retryable)
    or because the store is closing (retryable elsewhere or later)."""


class ReadersBusy(StoreError):
    """Every read connection stayed busy for the whole of the read's wait: retry shortly (503 + Retry-After)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)


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
