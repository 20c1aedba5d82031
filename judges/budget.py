"""A hard spending cap in USD, per UTC day, overall and per feature: a call that could exceed it is not made.

Before a call, the caller reserves its worst-case cost (every output token it may produce, and an upper bound
on its prompt tokens); after the reply it settles the reservation at the real cost from the reply's usage, or
keeps the worst case charged when the real cost cannot be known (a timeout after the request was sent may still
be billed). So the sum spent can exceed the limit only if a provider bills more than the worst case, and then
`overruns` counts it. Money is kept in integer nano-dollars so sums are exact; reservations round up.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

_NANO = 1_000_000_000


def to_nano(usd: float) -> int:
    return math.ceil(usd * _NANO - 1e-6)  # round up, ignoring float noise below a micro-nano-dollar


@dataclass(frozen=True, slots=True)
class Reservation:
    amount_nano: int
    feature: str
    day: str


class Budget:
    """`limit_usd` per UTC day for all calls; `per_feature_usd` caps single features within it."""

    def __init__(
        self,
        limit_usd: float,
        *,
        per_feature_usd: Mapping[str, float] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if limit_usd < 0:
            raise ValueError("limit_usd must be >= 0")
        self._limit = math.floor(limit_usd * _NANO + 1e-6)
        self._feature_limits = {k: math.floor(v * _NANO + 1e-6) for k, v in (per_feature_usd or {}).items()}
        self._clock = clock
        self._lock = threading.Lock()
        self._day = ""
        self._spent = 0
        self._reserved = 0
        self._feature_used: dict[str, int] = {}  # spent + reserved, per feature, today
        self.overruns = 0  # settlements that cost more than their reservation
        self.refused = 0  # reservations refused because they could exceed a limit

    def _roll(self) -> str:
        day = dt.datetime.fromtimestamp(self._clock(), dt.UTC).date().isoformat()
        if day != self._day:
            self._day, self._spent, self._feature_used = day, 0, {}
            # Reservations still open from yesterday stay counted: their calls are still in flight.
        return day

    def reserve(self, worst_case_usd: float, feature: str = "") -> Reservation | None:
        amount = to_nano(worst_case_usd)
        with self._lock:
            day = self._roll()
            if self._spent + self._reserved + amount > self._limit:
                self.refused += 1
                return None
            feature_limit = self._feature_limits.get(feature)
            used = self._feature_used.get(feature, 0)
            if feature_limit is not None and used + amount > feature_limit:
                self.refused += 1
                return None
            self._reserved += amount
            self._feature_used[feature] = used + amount
            return Reservation(amount, feature, day)

    def settle(self, reservation: Reservation, actual_usd: float | None) -> None:
        """Charge the real cost (None: unknown, keep the worst case charged)."""
        actual = reservation.amount_nano if actual_usd is None else to_nano(actual_usd)
        with self._lock:
            self._reserved -= reservation.amount_nano
            if actual > reservation.amount_nano:
                self.overruns += 1
            if reservation.day == self._roll():
                self._spent += actual
                self._feature_used[reservation.feature] = (
                    self._feature_used.get(reservation.feature, 0) - reservation.amount_nano + actual
                )

    def release(self, reservation: Reservation) -> None:
        """The call was not billed (refused by the server before any work, or never sent)."""
        self.settle(reservation, 0.0)

    @property
    def limit_usd(self) -> float:
        return self._limit / _NANO

    @property
    def spent_usd(self) -> float:
        with self._lock:
            self._roll()
            return self._spent / _NANO

    @property
    def reserved_usd(self) -> float:
        with self._lock:
            return self._reserved / _NANO
