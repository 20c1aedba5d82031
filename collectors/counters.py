"""The receivers' counters (requests, spans, rejections by reason, truncations, bytes) and their Prometheus text.

One small thread-safe object shared by the HTTP and gRPC receivers. Counters are bumped once per request, not
per span, so a lock costs nothing measurable. `render_prometheus()` gives the text exposition format served on
``GET /metrics``; other parts of the agent expose theirs through the same one-method `MetricsSource` protocol.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Protocol

__all__ = ["CollectorCounters", "MetricsSource", "render_metrics"]

# name -> help text; every counter the collectors export, declared once.
_HELP: dict[str, str] = {
    "ragmon_receiver_requests_total": "Export requests received, by transport and outcome.",
    "ragmon_receiver_spans_received_total": "Spans decoded from export requests, by transport.",
    "ragmon_receiver_spans_accepted_total": "Spans handed to the consumer and acknowledged, by transport.",
    "ragmon_receiver_spans_rejected_total": "Spans rejected individually (OTLP partial_success), by reason.",
    "ragmon_receiver_spans_refused_total": "Spans of whole requests refused (backpressure, consumer error), by reason.",
    "ragmon_receiver_values_truncated_total": "Attribute or content values cut to the size limit.",
    "ragmon_receiver_tenant_attributes_dropped_total": "ragmon.tenant attributes found on spans and dropped.",
    "ragmon_receiver_bytes_total": "Request body bytes as received (before decompression), by transport.",
}

Labels = tuple[tuple[str, str], ...]


class MetricsSource(Protocol):
    def render_prometheus(self) -> str:
        """Prometheus text exposition lines (with # HELP / # TYPE), newline-terminated."""
        ...


class CollectorCounters:
    """Monotonic counters keyed by metric name and labels."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, Labels], int] = {}

    def add(self, name: str, amount: int = 1, **labels: str) -> None:
        if name not in _HELP:
            raise KeyError(f"undeclared counter {name!r}")  # a typo must fail in tests, not vanish
        if amount <= 0:
            return
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount

    def add_many(self, name: str, amounts: Mapping[str, int], label: str, **labels: str) -> None:
        """Add one counter per entry of `amounts`, its key as the value of `label` (e.g. rejected by reason)."""
        for value, amount in amounts.items():
            self.add(name, amount, **labels, **{label: value})

    def get(self, name: str, **labels: str) -> int:
        """The value of one series; 0 when it was never bumped."""
        with self._lock:
            return self._values.get((name, tuple(sorted(labels.items()))), 0)

    def total(self, name: str) -> int:
        """The sum over all label sets of `name`."""
        with self._lock:
            return sum(v for (n, _), v in self._values.items() if n == name)

    def render_prometheus(self) -> str:
        with self._lock:
            items = sorted(self._values.items())
        lines: list[str] = []
        for name, help_text in _HELP.items():
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} counter")
            for (series, labels), value in items:
                if series == name:
                    lines.append(f"{name}{_format_labels(labels)} {value}")
        return "\n".join(lines) + "\n"


def _format_labels(labels: Labels) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_metrics(sources: Iterable[MetricsSource]) -> str:
    """Concatenate the exposition text of several sources."""
    return "".join(source.render_prometheus() for source in sources)
