"""Prometheus exposition of the agent's metrics, written by `prometheus_client` from one registry per agent.

Each part keeps its own plain counts on its hot path (an int bumped under a lock, once per request or batch) and is
a *collector*: `collect()` yields prometheus_client metric families (`CounterMetricFamily`, `GaugeMetricFamily`)
read from those counts when ``/metrics`` is scraped, so a scrape costs the parts nothing in between. The agent
registers its parts in a `CollectorRegistry` of its own (`metrics_registry`) — never the library's global
``REGISTRY``: several agents run in one test process and a shared registry would mix their series — and
`render_metrics` writes it in the format the scraper's ``Accept`` asks for (OpenMetrics 1.0 or the classic text
format). The library does the escaping of HELP text and label values, so a tenant, a rule name or a rejection reason
with a quote or a newline cannot break a line of the exposition.

Counter families are named without ``_total`` (``CounterMetricFamily("ragmon_spans_stored", ...)``): the library
appends it to the sample, and to the family in the classic format, so the exposed names are ``..._total``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

__all__ = ["MetricsSource", "metrics_registry", "render_metrics"]


class MetricsSource(Protocol):
    """A prometheus_client collector: the metric families of one part, read when scraped."""

    def collect(self) -> Iterable[Metric]: ...


def metrics_registry(*sources: MetricsSource) -> CollectorRegistry:
    """A registry of its own holding `sources` (auto_describe off: a source is never collected to register it)."""
    registry = CollectorRegistry(auto_describe=False)
    for source in sources:
        registry.register(source)
    return registry


def render_metrics(*sources: MetricsSource, accept: str | None = None) -> tuple[bytes, str]:
    """(body, content type) of the exposition of `sources` (usually one registry), in the format `accept` asks
    for: OpenMetrics for ``application/openmetrics-text``, else the classic text format (0.0.4)."""
    encode, content_type = choose_encoder(accept or "")
    return encode(_Families(sources)), content_type


class _Families:
    """Several sources as one collector, each metric family once.

    The OTLP/HTTP receiver serves its own counters followed by what it was given — for an agent, the agent's
    registry, which holds those same counters: the first family of a name is the one exposed, and a name exposed
    twice would be invalid exposition anyway."""

    def __init__(self, sources: Iterable[MetricsSource]) -> None:
        self._sources = tuple(sources)

    def collect(self) -> Iterator[Metric]:
        seen: set[str] = set()
        for source in self._sources:
            for family in source.collect():
                if family.name not in seen:
                    seen.add(family.name)
                    yield family
