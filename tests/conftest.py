"""Fixtures shared by the SDK tests: ragmon configured against an in-memory exporter, reset after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragmon
from ragmon import attributes as attr


@pytest.fixture(scope="session")
def chdb_engine_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """chDB runs one engine per process, on one path: every test that needs the embedded engine shares it
    (isolation comes from a database per test)."""
    return tmp_path_factory.mktemp("chdb-engine")


@pytest.fixture(autouse=True)
def _reset_ragmon() -> Iterator[None]:
    yield
    ragmon.shutdown()


class Captured:
    """ragmon configured with its own provider and an in-memory exporter."""

    def __init__(self, **configure_args: Any) -> None:
        self.provider = TracerProvider()
        self.exporter = InMemorySpanExporter()
        ragmon.configure(tracer_provider=self.provider, span_exporter=self.exporter, **configure_args)

    def spans(self) -> list[ReadableSpan]:
        assert ragmon.force_flush(5.0)
        return list(self.exporter.get_finished_spans())

    def by_stage(self) -> dict[str, ReadableSpan]:
        return {stage_of(s): s for s in self.spans()}


def stage_of(span: ReadableSpan) -> str:
    return attr.stage_of(span.attributes)


@pytest.fixture
def captured() -> Callable[..., Captured]:
    return Captured
