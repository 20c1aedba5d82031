"""Getting evaluation events out of the judge: the OpenTelemetry SDK's logs pipeline with a queue that counts.

`EvaluationEvents.emit` builds a score's `gen_ai.evaluation.result` record (judges/evaluation_events.py) and hands
it to an SDK `Logger`, whose `LoggerProvider` stamps the resource and instrumentation scope. The provider's one
processor, `CountingLogProcessor`, is the only part on the judge's path: one append to a bounded deque, no lock,
no I/O — a collector that is down costs the judge nothing but the events it cannot hold. One export thread sends
batches through a real `LogRecordExporter` (the OTLP/HTTP or OTLP/gRPC log exporter in production).

Retries are the exporter's: opentelemetry-python's OTLP exporters retry 429/502/503/504 (gRPC: UNAVAILABLE,
RESOURCE_EXHAUSTED, ...) and connection errors with jittered exponential backoff, honour Retry-After, and give
up at their timeout or at shutdown. A batch they give up on is counted here as dropped.

Why not the SDK's BatchLogRecordProcessor: it reports queue overflow only to an OTel meter, forgets what is still
queued at shutdown without counting it, and ignores the exporter's result — three ways to lose events silently.

Every event that does not reach the exporter's destination is counted by reason in `EventStats.dropped`:
`queue_full` (the judge outran the export; the newest event is the one dropped, so a burst's first events go
out), `export_failed` (the exporter gave up: collector down, rejected, timed out), `exporter_error` (it raised),
`shutdown` (still queued, or being retried, when the judge stopped), `build_error` (a bug building the record).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor, ReadableLogRecord, ReadWriteLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource
from ragmon.judges.evaluation_events import evaluation_event

from ragmon.batch_queue import BatchQueue
from ragmon.version import __version__

log = logging.getLogger("ragmon.judges")

SCOPE_NAME = "ragmon.judges"


@dataclass
class EventStats:
    """Counters of the event path. Plain ints and a Counter: one export thread writes them, the judge's thread
    only `queue_full`; readers tolerate a torn read."""

    emitted: int = 0  # scores the judge offered (each is then exported or dropped with a reason)
    exported: int = 0  # accepted by the exporter's destination
    batches: int = 0
    dropped: Counter[str] = field(default_factory=Counter)  # reason -> events

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def drop(self, reason: str, events: int = 1) -> None:
        with self._lock:  # both threads drop (queue_full here, export_failed there, shutdown in either)
            self.dropped[reason] += events

    def dropped_by_reason(self) -> dict[str, int]:
        """A copy, taken under the lock: the export thread may be adding a reason while /metrics reads."""
        with self._lock:
            return dict(self.dropped)

    def as_dict(self) -> dict[str, Any]:
        return {
            "emitted": self.emitted,
            "exported": self.exported,
            "batches": self.batches,
            "dropped": self.dropped_by_reason(),
        }


class CountingLogProcessor(LogRecordProcessor):
    """Bounded queue + one export thread (the SDK's `ragmon.batch_queue`, which the span export uses too) around a
    `LogRecordExporter`. Never blocks or raises on the caller."""

    def __init__(
        self,
        exporter: LogRecordExporter,
        *,
        queue_max_events: int = 10_000,
        batch_max_events: int = 512,
        flush_interval_s: float = 1.0,
    ) -> None:
        self.stats = EventStats()
        self._exporter = exporter
        self._queue: BatchQueue[ReadWriteLogRecord] = BatchQueue(
            self._send,
            on_drop=self.stats.drop,
            queue_max=queue_max_events,
            batch_max=batch_max_events,
            flush_interval_s=flush_interval_s,
            thread_name="ragmon-judge-events",
        )

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    # -- the judge's side ----------------------------------------------------------------------------------
    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        self.stats.emitted += 1
        self._queue.offer(log_record)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Send everything queued now; False if that took longer than the timeout (the thread carries on)."""
        return self._queue.flush(timeout_millis / 1000)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Flush within `timeout_s`, then stop: what is still queued or being retried is counted as `shutdown`."""
        # The exporter's shutdown interrupts a retry backoff, so a collector that is down cannot hold us here; a
        # thread still inside the exporter then counts its batch itself (as shutdown).
        self._queue.close(timeout_s, interrupt=self._shutdown_exporter)

    def _shutdown_exporter(self) -> None:
        try:
            self._exporter.shutdown()  # type: ignore[no-untyped-call]  # untyped in the SDK
        except Exception as exc:
            log.warning("evaluation event exporter shutdown raised: %r", exc)

    # -- the export thread ---------------------------------------------------------------------------------
    def _send(self, batch: list[ReadWriteLogRecord], stop: threading.Event) -> None:
        readable = [
            ReadableLogRecord(
                log_record=record.log_record,
                resource=record.resource or Resource.get_empty(),
                instrumentation_scope=record.instrumentation_scope,
                limits=record.limits,
            )
            for record in batch
        ]
        self.stats.batches += 1
        try:
            result = self._exporter.export(readable)
        except Exception as exc:  # a broken exporter must never take the export thread down
            if not stop.is_set():
                log.warning("evaluation event exporter raised: %r", exc)
            self.stats.drop("shutdown" if stop.is_set() else "exporter_error", len(batch))
            return
        if result is LogRecordExportResult.SUCCESS:
            self.stats.exported += len(batch)
        else:
            # The exporter logged why; a failure caused by our own shutdown interrupting its retries is ours.
            self.stats.drop("shutdown" if stop.is_set() else "export_failed", len(batch))


class EvaluationEvents:
    """Scores out as `gen_ai.evaluation.result` events, through one exporter. `emit` never blocks or raises."""

    def __init__(
        self,
        exporter: LogRecordExporter,
        *,
        service_name: str = "ragmon-judge",
        resource_attributes: Mapping[str, str] | None = None,
        queue_max_events: int = 10_000,
        batch_max_events: int = 512,
        flush_interval_s: float = 1.0,
    ) -> None:
        self.processor = CountingLogProcessor(
            exporter,
            queue_max_events=queue_max_events,
            batch_max_events=batch_max_events,
            flush_interval_s=flush_interval_s,
        )
        resource = Resource.create({**(resource_attributes or {}), "service.name": service_name})
        # Shut down by its owner (the agent's judging, `ragmon judge`), with a deadline, not at interpreter exit.
        self._provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
        self._provider.add_log_record_processor(self.processor)
        self._logger = self._provider.get_logger(SCOPE_NAME, __version__)

    @property
    def stats(self) -> EventStats:
        return self.processor.stats

    def emit(self, row: Mapping[str, Any], *, span_id: str = "", faithfulness_threshold: float | None = None) -> None:
        try:
            record = evaluation_event(row, span_id=span_id, faithfulness_threshold=faithfulness_threshold)
            self._logger.emit(record)
        except Exception:  # an event about a score must never cost the score (a bug here: say it once)
            self.processor.stats.emitted += 1
            self.processor.stats.drop("build_error")
            if self.processor.stats.dropped_by_reason()["build_error"] == 1:
                log.exception("could not build an evaluation event (counted as dropped: build_error)")

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        return self.processor.force_flush(int(timeout_s * 1000))

    def shutdown(self, timeout_s: float = 5.0) -> None:
        self.processor.shutdown(timeout_s)
        self._provider.shutdown()  # the processor is closed already; this marks the provider shut down too
