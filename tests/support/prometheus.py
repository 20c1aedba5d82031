"""Read a Prometheus exposition back the way a scraper does (prometheus_client's parser), for tests that check
/metrics: by name and labels rather than by the text of a line, which the library formats (3 is written 3.0)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from ragmon.collectors import MetricsSource, render_metrics

Series = tuple[str, frozenset[tuple[str, str]]]


def parse(text: str) -> dict[Series, float]:
    """Every sample of the text, keyed by (sample name, labels); the parser raises on a malformed line."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    """One sample's value (None when the series is absent)."""
    return parse(text).get((name, frozenset(labels.items())))


def families(text: str) -> dict[str, str]:
    """Family name -> type, as the text declares them (a counter's family is named without _total)."""
    return {family.name: family.type for family in text_string_to_metric_families(text)}


class Listed:
    """Metric families already made (a function's result) as a collector."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> list[Metric]:
        return self.families


def text_of(*sources: MetricsSource) -> str:
    """The classic text exposition of `sources`, as GET /metrics without an Accept header serves it."""
    body, _ = render_metrics(*sources)
    return body.decode()
