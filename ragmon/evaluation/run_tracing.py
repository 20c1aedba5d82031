"""Tracing for evaluation runs: stamp each span with the run and the dataset row, and keep each row's spans.

Two OpenTelemetry span processors on the run's own TracerProvider (the app's ragmon calls use it once
`ragmon.configure(tracer_provider=...)` has run):

- `RowTagger.on_start` copies the current row's attributes (``ragmon.eval.run``, ``ragmon.eval.row_id``,
  ``ragmon.eval.dataset``) onto every span started while the row runs — the app needs no change, and the spans
  reach the agent tagged, so ``SELECT … FROM spans WHERE attributes['ragmon.eval.run'] = 'nightly'`` finds them.
  The row is held in a context variable, so threads the app starts with `ragmon.bind_context` carry it too.
- `RowSpanCollector.on_end` keeps the finished spans of each row in memory (as `SpanRecord`s), so metrics are
  computed from exactly the spans the app emitted, whether or not they are exported anywhere.

How the run's marker reaches every span, so the store keeps eval traffic apart from production (`eval_run`):
- the run's own provider has ``ragmon.eval.run`` as a *resource* attribute (`eval_run.traced_run`): every span it
  exports carries it, whatever context started it — a span outside any row, or in a thread the app started
  without `ragmon.bind_context`, where the row's context variable is not set;
- third-party instrumentation (OpenInference, OpenLLMetry, OpenLIT) takes its tracer from OpenTelemetry's *global*
  provider, which the app sets up and exports from itself: `tag_global_provider` adds a `RowTagger` to it, so those
  spans carry the run as a span attribute wherever the app sends them. (Not baggage: nothing copies baggage into
  span attributes unless every provider has a processor for it, and it would travel to services outside the run.)
- the store counts a whole trace as the run's when any of its spans says so (`sinks/rollup_sql.py`, the sampler),
  so a span that slipped through both — another service's, in the same trace — is still eval traffic.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import weakref
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.trace import StatusCode

from ragmon import attributes as attr
from ragmon.evaluation.trajectory import SpanRecord

_current_row: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("ragmon_eval_row", default=None)


@contextlib.contextmanager
def tagging_row(run: str, row_id: str, dataset: str = "") -> Iterator[None]:
    """Spans started inside this block belong to ``row_id`` of ``run``."""
    tags = {attr.RAGMON_EVAL_RUN: run, attr.RAGMON_EVAL_ROW_ID: row_id}
    if dataset:
        tags[attr.RAGMON_EVAL_DATASET] = dataset
    token = _current_row.set(tags)
    try:
        yield
    finally:
        _current_row.reset(token)


class RowTagger(SpanProcessor):
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        tags = _current_row.get()
        if tags:
            span.set_attributes(dict(tags))

    def on_end(self, span: ReadableSpan) -> None:
        return None


_tagged: weakref.WeakSet[TracerProvider] = weakref.WeakSet()
_tagged_lock = threading.Lock()


def tag_global_provider() -> bool:
    """Add a `RowTagger` to OpenTelemetry's global provider when it is an SDK provider (the app's), once per
    provider — processors cannot be removed, and the tagger does nothing outside a row. Whether one is there."""
    installed = trace_api.get_tracer_provider()
    if not isinstance(installed, TracerProvider):
        return False  # nothing installed (third-party spans are no-ops), or an implementation we cannot join
    with _tagged_lock:
        if installed not in _tagged:
            installed.add_span_processor(RowTagger())
            _tagged.add(installed)
    return True


class RowSpanCollector(SpanProcessor):
    """Finished spans per row id (spans outside any row are ignored)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: dict[str, list[SpanRecord]] = defaultdict(list)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        attributes: Mapping[str, Any] = span.attributes or {}
        row_id = attributes.get(attr.RAGMON_EVAL_ROW_ID)
        if row_id is None:
            return
        record = SpanRecord(
            name=span.name,
            start_ns=span.start_time or 0,
            attributes=dict(attributes),
            error=span.status.status_code is StatusCode.ERROR,
            trace_id=format(span.context.trace_id, "032x") if span.context is not None else "",
        )
        with self._lock:
            self._spans[str(row_id)].append(record)

    def take(self, row_id: str) -> list[SpanRecord]:
        """The row's spans so far, forgotten here (a run holds only the rows in flight)."""
        with self._lock:
            return self._spans.pop(row_id, [])
