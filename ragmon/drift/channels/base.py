"""The channel interface, delivery results, and the `Dispatcher` that deduplicates and counts deliveries.

A channel sends one alert record and reports what happened; it never raises (a webhook maps transport errors and
statuses to a `Delivery`). The dispatcher sits between the evaluator and the channels: it delivers each
(alert id, state) once per channel — the evaluator may re-emit a record after a restart or replay — remembers the
last `dedup_entries` successful deliveries, and counts delivered / failed / deduplicated per channel, with failure
reasons. A record whose delivery failed is *not* remembered, so a later re-emission tries again.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ragmon.drift.record import AlertRecord

logger = logging.getLogger("ragmon.alerts")


@dataclass(frozen=True, slots=True)
class Delivery:
    ok: bool
    attempts: int = 1
    reason: str = ""  # why it failed: "http 400", "retries exhausted (http 503)", "ConnectError" ...


class Channel(Protocol):
    @property
    def name(self) -> str: ...

    def send(self, record: AlertRecord) -> Delivery: ...


@dataclass
class ChannelStats:
    delivered: int = 0
    failed: int = 0
    deduplicated: int = 0
    attempts: int = 0
    failure_reasons: Counter[str] = field(default_factory=Counter)


class Dispatcher:
    """Delivers records to the channels they name, once per (alert id, state, channel)."""

    def __init__(self, channels: Mapping[str, Channel], *, dedup_entries: int = 10_000) -> None:
        self.channels = dict(channels)
        self.dedup_entries = dedup_entries
        self.stats: dict[str, ChannelStats] = {name: ChannelStats() for name in self.channels}
        self.unknown_channel = 0
        self._delivered: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def deliver(self, record: AlertRecord) -> None:
        for name in record.channels:
            channel = self.channels.get(name)
            if channel is None:  # config validation prevents this; count rather than fail if it happens
                self.unknown_channel += 1
                continue
            key = (record.alert_id, record.state, name)
            stats = self.stats[name]
            with self._lock:
                if key in self._delivered:
                    stats.deduplicated += 1
                    continue
            try:
                result = channel.send(record)
            except Exception as exc:  # a channel bug must not reach the evaluator
                result = Delivery(False, 1, f"channel raised {type(exc).__name__}")
            with self._lock:
                stats.attempts += result.attempts
                if result.ok:
                    stats.delivered += 1
                    self._delivered[key] = None
                    while len(self._delivered) > self.dedup_entries:
                        self._delivered.popitem(last=False)
                else:
                    stats.failed += 1
                    stats.failure_reasons[result.reason] += 1
            if not result.ok and stats.failed == 1:  # the first failure per channel is logged; the rest counted
                logger.warning("alert channel %s: delivery failed: %s", name, result.reason)

    def close(self) -> None:
        """Release channel resources (the webhooks' HTTP clients)."""
        for channel in self.channels.values():
            close = getattr(channel, "close", None)
            if callable(close):
                close()
