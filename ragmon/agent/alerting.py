"""The alerting service inside `ragmon serve`: runs the drift rules over the store every `interval_s`, stores each
alert state change in `alerts` and sends it to the rule's channels.

    store ─▶ StoreSignalSource ─▶ AlertEvaluator ─┬▶ StoreAlertSink ─▶ alerts table
                                                  └▶ Dispatcher ─▶ log, webhooks

One background thread. Nothing here may stop the agent: a failing read is counted per rule by the evaluator, a
failing alert insert is kept (bounded) and retried on the next run, a failing webhook is counted by the dispatcher,
and an unexpected error in a run is counted and logged once per distinct error. A run that failed, or whose reads or
alert inserts failed (the store is down), is tried again after a jittered backoff (`ragmon.retry.Recovery`, from
0.2 s up to 10 s, never later than the interval) rather than a whole interval later, so the thread catches up as soon
as the store is back; it reports to the agent's health registry as `alerting` (failing with the error, then ok).
Counters go to the agent's /metrics.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from ragmon.drift import (
    AlertEvaluator,
    AlertRecord,
    AlertsConfig,
    CanaryAnalysis,
    Dispatcher,
    Locator,
    SignalSource,
    StoreSignalSource,
    build_dispatcher,
)
from ragmon.health import Component, HealthRegistry
from ragmon.retry import Recovery
from ragmon.sinks.for_alerting import AlertingStore

log = logging.getLogger("ragmon.alerts")

_PENDING_MAX = 1_000  # alert rows kept for a retry while the store refuses them
# Beyond its interval, what the thread may take without a heartbeat: a run over a slow store (reads, a webhook's
# bounded retries) and the longest backoff.
_RUN_ALLOWANCE_S = 120.0


class RunDegraded(Exception):
    """A run that finished but whose signal reads or alert inserts failed (counted and logged where they failed):
    the store is unavailable, retried like any fault that passes by itself."""

    retryable = True


class StoreAlertSink:
    """Writes each record to the `alerts` table. Rows the store refuses wait (at most `max_pending`, oldest dropped
    and counted) and go again, in order, with the next record or `flush()`. Never raises.

    Rows fit today's table: the evidence, detector, trace ids ... are folded into `labels`
    (`AlertRecord.to_row(extended=False)`), which `ragmon alerts` reads back."""

    def __init__(self, store: AlertingStore, *, max_pending: int = _PENDING_MAX) -> None:
        self.store = store
        self.pending: deque[AlertRecord] = deque()
        self.max_pending = max_pending
        self.stored = 0
        self.errors = 0
        self.dropped = 0
        self.last_error = ""
        self._lock = threading.Lock()

    def deliver(self, record: AlertRecord) -> None:
        with self._lock:
            self.pending.append(record)
            while len(self.pending) > self.max_pending:
                self.pending.popleft()
                self.dropped += 1
            self._flush()

    def flush(self) -> None:
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        rows = [record.to_row(extended=False) for record in self.pending]
        try:
            # No token: the store derives one from the rows, so the same rows sent again are dropped by the engine.
            self.store.insert_alerts(rows)
        except Exception as exc:
            self.errors += 1
            self.last_error = repr(exc)
            if self.errors == 1 or self.errors % 100 == 0:
                log.warning("could not store %d alert row(s), will retry: %r", len(rows), exc)
            return
        self.stored += len(rows)
        self.pending.clear()


class AlertingService:
    """Runs the evaluator on a thread. `run_once()` is the same work, for tests and the demo."""

    def __init__(
        self,
        config: AlertsConfig,
        store: AlertingStore,
        *,
        source: SignalSource | None = None,
        dispatcher: Dispatcher | None = None,
        clock: Callable[[], float] = time.time,
        health: HealthRegistry | None = None,
    ) -> None:
        self.config = config
        self.store_sink = StoreAlertSink(store)
        self.dispatcher = dispatcher or build_dispatcher(config)
        self.evaluator = AlertEvaluator(
            config,
            source or StoreSignalSource(store),
            clock=clock,
            sinks=[self.store_sink, self.dispatcher],  # stored first: the table is the record of what happened
            locate=Locator(store),  # each firing alert says where: the release, the question (ragmon.drift.where)
        )
        # new releases compared with the one before as their traffic grows (data time, like the rules)
        self.canary = CanaryAnalysis(config.canary, store, clock=clock)
        self.run_errors = 0
        self.health: Component | None = (
            health.component("alerting", stall_after_s=config.interval_s + _RUN_ALLOWANCE_S)
            if health is not None
            else None
        )
        self._recovery = Recovery("alerting", log)
        self._retry_in_s: float | None = None  # after a failed run: when to try again (sooner than the interval)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ragmon-alerts", daemon=True)

    def start(self) -> AlertingService:
        self._thread.start()
        return self

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self.run_once()
                wait_s = self.config.interval_s
                if self._retry_in_s is not None:
                    wait_s = min(wait_s, self._retry_in_s)
                self._stop.wait(wait_s)
        finally:
            if self.health is not None:
                self.health.stopped(expected=self._stop.is_set())

    def run_once(self) -> list[AlertRecord]:
        """One evaluation: retry alert rows the store refused, judge the windows that closed. Never raises."""
        source_errors = sum(self.evaluator.stats.source_errors.values())
        store_errors = self.store_sink.errors
        canary_errors = self.canary.errors
        try:
            self.store_sink.flush()
            records = self.evaluator.evaluate()
            for record in self.canary.evaluate():
                self.store_sink.deliver(record)  # stored first, as the evaluator's records
                self.dispatcher.deliver(record)
                records.append(record)
        except Exception as exc:  # the evaluator guards its own steps; this is the last line of defence
            self.run_errors += 1
            self._failed(exc)
            return []
        if self.canary.errors > canary_errors:
            self._failed(RunDegraded(f"reading releases for the canary analysis: {self.canary.last_error}"))
        elif sum(self.evaluator.stats.source_errors.values()) > source_errors:
            self._failed(RunDegraded(f"reading signals: {self.evaluator.stats.last_error}"))
        elif self.store_sink.errors > store_errors:
            self._failed(RunDegraded(f"storing alerts: {self.store_sink.last_error}"))
        else:
            self._recovery.succeeded()
            self._retry_in_s = None
            if self.health is not None:
                self.health.ok()
        return records

    def _failed(self, exc: Exception) -> None:
        self._retry_in_s = self._recovery.failed(exc)
        if self.health is not None:
            self.health.failing(str(exc) if isinstance(exc, RunDegraded) else exc)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self.store_sink.flush()
        self.dispatcher.close()

    # -- /metrics ------------------------------------------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        """The alerting families, read from the evaluator's, the store sink's and the dispatcher's counts."""
        stats = self.evaluator.stats
        # Counter families are named without _total: prometheus_client appends it (ragmon_alert_evaluations_total).
        yield CounterMetricFamily("ragmon_alert_evaluations", "Alert evaluation runs.", stats.runs)
        yield CounterMetricFamily(
            "ragmon_alert_evaluation_errors", "Alert evaluation runs that failed as a whole.", self.run_errors
        )
        transitions = CounterMetricFamily("ragmon_alert_transitions", "Alerts opened and resolved.", labels=["state"])
        transitions.add_metric(["firing"], stats.fired)
        transitions.add_metric(["resolved"], stats.resolved)
        yield transitions
        yield GaugeMetricFamily("ragmon_alerts_open", "Alerts firing now.", len(self.evaluator.open_alerts()))
        # Rule and channel names come from the configuration, any text: the library escapes them.
        source_errors = CounterMetricFamily(
            "ragmon_alert_source_errors", "Failed reads of a rule's signal, by rule.", labels=["rule"]
        )
        for rule, n in sorted(stats.source_errors.items()):
            source_errors.add_metric([rule], n)
        yield source_errors
        rows = CounterMetricFamily(
            "ragmon_alert_rows", "Alert rows for the alerts table, by outcome.", labels=["outcome"]
        )
        rows.add_metric(["stored"], self.store_sink.stored)
        rows.add_metric(["pending"], len(self.store_sink.pending))
        rows.add_metric(["dropped"], self.store_sink.dropped)
        yield rows
        yield CounterMetricFamily("ragmon_alert_store_errors", "Failed alert inserts.", self.store_sink.errors)
        yield CounterMetricFamily(
            "ragmon_alert_locate_errors", "Firing alerts sent without where: its read failed.", stats.locate_errors
        )
        yield CounterMetricFamily(
            "ragmon_canary_looks",
            "Comparisons of a new release with the one before (canary analysis).",
            self.canary.looks,
        )
        deliveries = CounterMetricFamily(
            "ragmon_alert_deliveries", "Alert deliveries, by channel and result.", labels=["channel", "result"]
        )
        for channel, channel_stats in sorted(self.dispatcher.stats.items()):
            for result in ("delivered", "failed", "deduplicated"):
                deliveries.add_metric([channel, result], getattr(channel_stats, result))
        yield deliveries


def start_alerting(
    alerts: AlertsConfig, store: AlertingStore, *, health: HealthRegistry | None = None
) -> AlertingService | None:
    """The running service (reporting to `health` as `alerting`), or None when `[agent.alerts] enabled = false`."""
    if not alerts.enabled:
        return None
    return AlertingService(alerts, store, health=health).start()
