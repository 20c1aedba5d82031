"""Smoke test of benchmarks/sdk_overhead.py at tiny sizes: every span created reaches its destination.

Correctness only — the sink counts what each variant delivered; no timing is asserted (the machine is shared).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

_BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "sdk_overhead.py"


def _load_benchmark() -> ModuleType:
    # benchmarks/ is a directory of scripts, not a package: load the file itself.
    spec = importlib.util.spec_from_file_location("sdk_overhead", _BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


bench = _load_benchmark()


@pytest.fixture(scope="module")
def sink() -> Iterator[object]:
    with bench.Sink() as running:
        yield running


def test_every_variant_delivers_every_span(sink: object) -> None:
    work = bench.Workload(vector_dims=64)
    variants = bench.build_variants(work, sink)
    bench.add_unbounded_otel(variants, sink, 1_000, work)
    assert [v.name for v in variants] == [
        "uninstrumented",
        "otel-noop",
        "ragmon-noop",
        "otel-otlp",
        "ragmon-otlp",
        "otel-otlp-bigq",
    ]

    result = bench.run_overhead(variants, requests=20, rounds=2, warmup=5)

    for name, blocks in result.blocks.items():
        assert len(blocks) == 2
        for block in blocks:
            expected = 0 if name == "uninstrumented" else 20 * bench.SPANS_PER_REQUEST
            assert block.created == expected, name
            assert block.delivered == block.created, name
            assert block.counted_drops in (None, 0), name
            assert block.cpu_us > 0 and block.wall_us > 0
    assert sink.stats()["bad_requests"] == 0


def test_load_children_deliver_every_span(sink: object) -> None:
    results = bench.run_load(sink, ("otel", "ragmon"), rate=100.0, seconds=0.2, vector_dims=64)

    assert [r["kind"] for r in results] == ["otel", "ragmon"]
    for r in results:
        assert r["created"] == (20 + 50) * bench.SPANS_PER_REQUEST
        assert r["received"] == r["created"], r["kind"]
        assert r["lost"] == 0
        assert r["peak_rss_mb"] >= r["rss_before_mb"] > 0  # sampled VmRSS, so never below the start
    assert results[1]["counted_drops"] == 0
