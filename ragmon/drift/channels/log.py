"""The log channel: one line per alert state change on the `ragmon.alerts` logger (always available as "log")."""

from __future__ import annotations

import logging

from ragmon.drift.channels.base import Delivery
from ragmon.drift.record import AlertRecord

_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "critical": logging.ERROR}


class LogChannel:
    def __init__(self, name: str = "log", logger: logging.Logger | None = None) -> None:
        self._name = name
        self.logger = logger or logging.getLogger("ragmon.alerts")

    @property
    def name(self) -> str:
        return self._name

    def send(self, record: AlertRecord) -> Delivery:
        # A resolve is good news: INFO whatever the severity, so it does not page anyone on its own.
        level = _LEVELS.get(record.severity, logging.WARNING) if record.state == "firing" else logging.INFO
        traces = f" traces={','.join(record.trace_ids)}" if record.trace_ids else ""
        self.logger.log(level, "%s alert_id=%s%s", record.message, record.alert_id, traces)
        return Delivery(True)
