"""Retry policy shared by every outbound call ragmon makes (span export, judge calls, webhooks).

Errors are classified once, at the boundary, into the three kinds below; callers loop over `RetryPolicy.delays()`
and stop at the first non-retryable outcome. Backoff is exponential with full jitter, `Retry-After` wins when the
server sends one, and both the number of attempts and the total time are bounded.
"""

from __future__ import annotations

import email.utils
import random
import time
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
