"""The receivers' counters (requests, spans, rejections by reason, truncations, bytes), exposed to Prometheus.

One small thread-safe object shared by the HTTP and gRPC receivers. Counters are bumped once per request, not
per span, so a lock costs nothing measurable. `collect()` makes it a prometheus_client collector: the families it
yields are read from the counts when ``GET /metrics`` is scraped (`collectors/exposition.py`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping

from prometheus_client.metrics_core import CounterMetricFamily, Metric

__all__ = ["CollectorCounters"]

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
    "ragmon_feedback_requests_total": "Feedback requests (POST /v1/feedback), by outcome (stored or why refused).",
    "ragmon_feedback_items_total": "Feedback items stored, by the kind of key that wrote them (api, feedback_key).",
}

Labels = tuple[tuple[str, str], ...]


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

    def collect(self) -> Iterator[Metric]:
        """One counter family per declared name (present with no samples until bumped)."""
        with self._lock:
            items = sorted(self._values.items())
        for name, help_text in _HELP.items():
            family = CounterMetricFamily(name.removesuffix("_total"), help_text)  # the library appends _total
            for (series, labels), value in items:
                if series == name:
                    # add_sample, not add_metric: a counter's label names differ between its series (reason on some)
                    family.add_sample(name, dict(labels), value)
            yield family
