"""/metrics through prometheus_client: label values escaped by the library, the format chosen by Accept, each
family once, and a registry per agent (never the library's global one)."""

from __future__ import annotations

from prometheus_client import REGISTRY
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families
from ragmon.collectors import CollectorCounters, metrics_registry, render_metrics
from ragmon.collectors.memory_guard import MemoryGuard

from tests.support import prometheus

HOSTILE = 'acme" } evil_total 1e9\n# TYPE x counter\\'  # a quote, a newline and a backslash in one label value


def test_a_label_value_with_a_quote_and_a_newline_is_escaped_and_parses_back() -> None:
    counters = CollectorCounters()
    counters.add("ragmon_receiver_spans_rejected_total", 2, transport="http", reason=HOSTILE)
    counters.add("ragmon_receiver_requests_total", transport="http", outcome="ok")
    for accept in ("", "application/openmetrics-text; version=1.0.0"):
        body, _ = render_metrics(metrics_registry(counters), accept=accept)
        text = body.decode()
        parse = openmetrics_families if accept else text_string_to_metric_families
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in parse(text) for s in f.samples}
        assert samples[("ragmon_receiver_spans_rejected_total", (("reason", HOSTILE), ("transport", "http")))] == 2
        assert samples[("ragmon_receiver_requests_total", (("outcome", "ok"), ("transport", "http")))] == 1
        assert not any(name.startswith("evil") or name == "x" for name, _ in samples)  # nothing injected


def test_the_format_follows_accept() -> None:
    counters = CollectorCounters()
    counters.add("ragmon_receiver_requests_total", 3, transport="grpc", outcome="ok")
    classic, classic_type = render_metrics(counters)
    assert classic_type == "text/plain; version=0.0.4; charset=utf-8"
    assert b'ragmon_receiver_requests_total{outcome="ok",transport="grpc"} 3.0\n' in classic
    scraper = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"  # Prometheus
    openmetrics, openmetrics_type = render_metrics(counters, accept=scraper)
    assert openmetrics_type.startswith("application/openmetrics-text; version=1.0.0")
    assert openmetrics.endswith(b"# EOF\n")
    [family] = [f for f in openmetrics_families(openmetrics.decode()) if f.name == "ragmon_receiver_requests"]
    assert family.type == "counter" and family.samples[0].name == "ragmon_receiver_requests_total"


def test_counter_names_keep_their_total_suffix_once() -> None:
    guard = MemoryGuard(None, read_rss=lambda: 1)
    guard.admit("http")  # not pressing: nothing counted, the family is still declared
    text = prometheus.text_of(metrics_registry(CollectorCounters(), guard))
    declared = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert "ragmon_memory_pushback_total" in declared and "ragmon_receiver_requests_total" in declared
    assert not any(name.endswith("_total_total") for name in declared)


def test_each_family_once_and_each_agent_its_own_registry() -> None:
    first, second = CollectorCounters(), CollectorCounters()
    first.add("ragmon_receiver_bytes_total", 10, transport="http")
    second.add("ragmon_receiver_bytes_total", 99, transport="http")
    registry = metrics_registry(first)
    text = prometheus.text_of(first, registry)  # the receiver's counters, then a registry holding them too
    assert text.count("# TYPE ragmon_receiver_bytes_total counter") == 1
    assert prometheus.value(text, "ragmon_receiver_bytes_total", transport="http") == 10
    assert (
        prometheus.value(prometheus.text_of(metrics_registry(second)), "ragmon_receiver_bytes_total", transport="http")
        == 99
    )
    assert REGISTRY.get_sample_value("ragmon_receiver_bytes_total", {"transport": "http"}) is None
