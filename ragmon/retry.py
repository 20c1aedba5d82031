"""Retry policy shared by every outbound call ragmon makes (span export, judge calls, webhooks).

Errors are classified once, at the boundary, into the three kinds below; callers loop over `RetryPolicy.delays()`
and stop at the first non-retryable outcome. Backoff is exponential with full jitter, `Retry-After` wins when the
server sends one, and both the number of attempts and the total time are bounded.

The agent's long-running loops are the exception to "bounded": they must never stop, so `Recovery` retries them
forever with the same jittered backoff (capped, `FOREVER`), and `is_transient` tells a fault that passes by itself
(disk full, store down, SQLite busy) from a bug, for the log.
"""

from __future__ import annotations

import email.utils
import logging
import random
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

# OTLP/HTTP and most JSON APIs: only these are worth another try (GUIDE §3).
RETRYABLE_HTTP_STATUSES = frozenset({429, 502, 503, 504})


class Outcome(Enum):
    OK = "ok"
    RETRYABLE = "retryable"
    THROTTLED = "throttled"  # retryable, with a delay the server asked for
    PERMANENT = "permanent"


def classify_http_status(status: int) -> Outcome:
    if 200 <= status < 300:
        return Outcome.OK
    if status == 429:
        return Outcome.THROTTLED
    if status in RETRYABLE_HTTP_STATUSES:
        return Outcome.RETRYABLE
    return Outcome.PERMANENT


def parse_retry_after(value: str | None, now_s: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date); None when absent or invalid."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)  # delta-seconds; some APIs (OpenAI) send fractions
    except ValueError:
        pass
    else:
        return seconds if seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now_s is None else now_s))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 6
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 10.0
    deadline_s: float = 30.0

    def backoff_s(self, attempt: int, retry_after_s: float | None = None, rng: random.Random | None = None) -> float:
        """Delay before attempt `attempt + 1` (attempt counts from 1)."""
        if retry_after_s is not None:
            return min(retry_after_s, self.max_backoff_s * 6)  # honour the server, within reason
        ceiling = min(self.max_backoff_s, self.initial_backoff_s * (2 ** (attempt - 1)))
        return (rng or random).uniform(0.0, ceiling)

    def next_delay_s(
        self, attempt: int, elapsed_s: float, retry_after_s: float | None = None, rng: random.Random | None = None
    ) -> float | None:
        """Delay before another try after `attempt` failed, or None when attempts or the deadline are spent."""
        if attempt >= self.max_attempts:
            return None
        delay = self.backoff_s(attempt, retry_after_s, rng)
        if elapsed_s + delay > self.deadline_s:
            return None
        return delay


# -- long-running loops ------------------------------------------------------------------------------------------
# The loops that must outlive any fault (the agent's store writer, sampler, roll-ups, judge worker, alerting) retry
# for as long as it takes, with no attempt limit or deadline: only the delay between tries is bounded.
FOREVER = RetryPolicy(max_attempts=2**31, initial_backoff_s=0.2, max_backoff_s=10.0, deadline_s=float("inf"))
# Past this many failures the delay's ceiling is max_backoff_s anyway; the cap keeps 2 ** attempt a small number.
_CEILING_ATTEMPT = 32
# SQLite primary result codes (the low byte of an extended code) of faults that pass by themselves: another writer
# holding the lock, the disk full or failing for a moment, a file that cannot be opened right now.
_SQLITE_TRANSIENT = frozenset({5, 6, 10, 13, 14, 15})  # BUSY, LOCKED, IOERR, FULL, CANTOPEN, PROTOCOL
_SQLITE_TRANSIENT_TEXT = ("locked", "busy", "disk is full", "disk i/o error", "unable to open")


def is_transient(exc: BaseException) -> bool:
    """Whether a fault may pass by itself (retry it and expect success) rather than be a bug.

    Transient: an error that says so itself (`retryable = True`, as the store's StoreError does — classified once
    at the store's boundary); SQLite busy, locked, full or I/O errors; any OSError (disk full, connection refused or
    reset, timeouts). Everything else is a bug: it is retried too by a loop that must not stop, but logged as one."""
    retryable = getattr(exc, "retryable", None)
    if isinstance(retryable, bool):
        return retryable
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
        if isinstance(code, int):
            return code & 0xFF in _SQLITE_TRANSIENT
        return any(text in str(exc).lower() for text in _SQLITE_TRANSIENT_TEXT)
    return isinstance(exc, OSError)


class Recovery:
    """How one long-running loop lives through faults: every failure is retried after a jittered exponential delay
    (`FOREVER`: 0.2 s doubling up to 10 s), for as long as it takes — the loop waits that long on its stop event,
    so stopping interrupts the wait — and the log hears each distinct problem once, not once per try.

    - A transient fault (`is_transient`) is logged as a warning when a streak of failures starts or its message
      changes, and once more when the loop recovers ("resumed after N failures over S s").
    - A bug is logged with its traceback once per distinct error (its type and where it was raised) for the life
      of the process, however often it recurs.

    `failed(exc)` returns the delay before the next try; `succeeded()` ends a streak. `delay_s(n)` is the delay
    after the n-th consecutive failure of something with its own count (one of several tasks of a loop)."""

    _MAX_REMEMBERED = 256  # distinct bugs remembered; past it, a new one is still logged, an old one may be again

    def __init__(
        self,
        name: str,
        logger: logging.Logger,
        *,
        policy: RetryPolicy = FOREVER,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self.policy = policy
        self.failures = 0  # consecutive, in the current streak
        self.last_error = ""
        self._log = logger
        self._clock = clock
        self._rng = rng
        self._streak_began_s = 0.0
        self._streak_messages: set[str] = set()
        self._bugs_logged: dict[tuple[str, str, int], None] = {}  # insertion-ordered, bounded

    @property
    def failing(self) -> bool:
        return self.failures > 0

    def delay_s(self, failures: int) -> float:
        return self.policy.backoff_s(max(1, min(failures, _CEILING_ATTEMPT)), rng=self._rng)

    def failed(self, exc: BaseException) -> float:
        """Count a failure, log it if it is news, and return how long to wait before the next try."""
        if self.failures == 0:
            self._streak_began_s = self._clock()
            self._streak_messages.clear()
        self.failures += 1
        self.note(exc)
        return self.delay_s(self.failures)

    def note(self, exc: BaseException) -> None:
        """Log a failure if it is news, without counting it in the streak (a task of the loop with its own count)."""
        self.last_error = f"{type(exc).__name__}: {exc}"[:500]
        if is_transient(exc):
            message = self.last_error
            if message not in self._streak_messages and len(self._streak_messages) < self._MAX_REMEMBERED:
                self._streak_messages.add(message)
                self._log.warning("%s: %s; retrying with backoff until it passes", self.name, message)
            return
        key = _where(exc)
        if key in self._bugs_logged:
            return
        self._bugs_logged[key] = None
        while len(self._bugs_logged) > self._MAX_REMEMBERED:
            del self._bugs_logged[next(iter(self._bugs_logged))]
        self._log.error(
            "%s failed (a bug: logged once, retried with backoff): %s", self.name, self.last_error, exc_info=exc
        )

    def succeeded(self) -> None:
        """The loop made progress: end a streak of failures (and say so, if there was one)."""
        if self.failures:
            self._log.warning(
                "%s resumed after %d failure(s) over %.1f s",
                self.name,
                self.failures,
                self._clock() - self._streak_began_s,
            )
        self.failures = 0
        self.last_error = ""


def _where(exc: BaseException) -> tuple[str, str, int]:
    """An error's identity for logging it once: its type and the line that raised it (messages vary with data)."""
    frame = None
    tb = exc.__traceback__
    while tb is not None:
        frame, tb = tb, tb.tb_next
    if frame is None:
        return (type(exc).__qualname__, "", 0)
    return (type(exc).__qualname__, frame.tb_frame.f_code.co_filename, frame.tb_lineno)
