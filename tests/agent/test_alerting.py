"""The alerting service over a real store (embedded engine, a database per test): a latency shift written into the
store raises an alert that lands in `alerts` (as `ragmon alerts` reads it) and reaches a real webhook on 127.0.0.1;
a store or webhook that fails is counted, retried and never stops the service."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from ragmon.sinks import Store, open_store
from ragmon.sinks.traffic import Traffic

from ragmon.agent.alerting import AlertingService
from ragmon.commands.alerts import collapse_alert_rows
from ragmon.drift import AlertsConfig
from ragmon.drift.store_source import StoreSignalSource
from tests.support import prometheus
from tests.support.prometheus import text_of
from tests.support.span_rows import insert_spans
from tests.support.synth import make_batch

BASELINE_MINUTES = 60
SHIFT_MINUTES = 10
SLOWDOWN = 4.0


class Hook:
    """A webhook receiver on 127.0.0.1 answering with scripted statuses (then 200), keeping what it got."""

    def __init__(self) -> None:
        self.script: list[int] = []
        self.bodies: list[Any] = []
        self.lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                with hook.lock:
                    status = hook.script.pop(0) if hook.script else 200
                    if status == 200:
                        hook.bodies.append(body)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    receiver = Hook()
    yield receiver
    receiver.close()


@pytest.fixture
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    opened = open_store(str(chdb_engine_dir), database=f"t_{uuid.uuid4().hex[:12]}")
    yield opened
    opened.close()


def _config(hook_url: str, rule_name: str = "generate_latency", **overrides: Any) -> AlertsConfig:
    """One latency rule sized for a test's hour of data (the defaults want a day of baseline)."""
    return AlertsConfig.model_validate(
        {
            "interval_s": 0.05,
            "settle_s": 0,
            "default_rules": False,
            "rules": [
                {
                    "name": rule_name,
                    "signal": "latency_p95_ms",
                    "scope": {"stages": ["generate"]},
                    "channels": ["log", "hook"],
                    "baseline_minutes": BASELINE_MINUTES,
                    "baseline_lag_minutes": 0,
                    "warmup_windows": SHIFT_MINUTES + 5,
                    "detector": {"type": "cusum", "min_count": 5, "min_baseline_windows": 20},
                }
            ],
            "channels": {
                "hook": {
                    "type": "webhook",
                    "url": hook_url,
                    "max_attempts": 2,
                    "initial_backoff_s": 0.01,
                    "deadline_s": 5,
                }
            },
            **overrides,
        }
    )


def _fill(store: Store, *, slowdown: float = SLOWDOWN, eval_run: str = "", seed: int = 5) -> tuple[float, set[str]]:
    """An hour and a quarter of traffic (one feature), the generate stage `slowdown` times slower in the last 10
    minutes (production traffic, or an eval run's). Returns the end of the data (minute-aligned) and the slowed
    traces."""
    end_s = (int(time.time()) // 60 - 2) * 60
    start_s = end_s - (BASELINE_MINUTES + 5 + SHIFT_MINUTES) * 60
    shift_s = end_s - SHIFT_MINUTES * 60
    batch = make_batch(
        40 * (end_s - start_s) // 60,
        seed=seed,
        start_ns=start_s * 10**9,
        spread_s=end_s - start_s - 30,
        features=("qa",),
        error_rate=0.0,
        eval_run=eval_run,
    )
    slowed: set[str] = set()
    for i in range(len(batch)):
        if batch.stage[i] == "generate" and batch.start_time[i] >= shift_s * 10**9 and slowdown != 1.0:
            batch.duration_ms[i] *= slowdown
            slowed.add(batch.trace_id[i])
    assert max(batch.start_time) < end_s * 10**9
    insert_spans(store, batch)
    store.roll_up(0, 0)  # as the agent does once the sampler has decided the traces
    return float(end_s), slowed


def _alert_rows(store: Store) -> list[dict[str, Any]]:
    return store.read("SELECT * FROM alerts")


def test_a_latency_shift_lands_in_the_alerts_table_and_the_webhook(store: Store, hook: Hook) -> None:
    end_s, slowed = _fill(store)
    service = AlertingService(_config(hook.url), store, clock=lambda: end_s)
    records = service.run_once()
    service.stop()

    assert [r.state for r in records] == ["firing"]
    [record] = records
    assert (record.rule, record.feature, record.stage, record.metric) == (
        "generate_latency",
        "qa",
        "generate",
        "latency_p95_ms",
    )
    assert end_s - SHIFT_MINUTES * 60 < record.fired_at_s <= end_s  # fired inside the shifted minutes
    assert record.current_value is not None and record.baseline_value is not None
    assert record.current_value > 2 * record.baseline_value

    [stored] = collapse_alert_rows(_alert_rows(store))  # what `ragmon alerts` prints
    assert stored["alert_id"] == record.alert_id and stored["state"] == "firing"
    assert stored["detector"] == "cusum" and stored["metric"] == "latency_p95_ms"
    assert stored["evidence"]["baseline_windows"] >= 20 and "baseline_mean" in stored["evidence"]
    assert stored["trace_ids"] and set(stored["trace_ids"]) <= slowed  # examples are the slow requests

    [sent] = hook.bodies
    assert sent["type"] == "ragmon.alert"
    assert sent["alert"]["alert_id"] == record.alert_id and sent["alert"]["state"] == "firing"
    assert service.dispatcher.stats["hook"].delivered == 1


def test_a_shift_only_in_an_eval_runs_traffic_raises_no_alert(store: Store, hook: Hook) -> None:
    """An eval run slower than production (a candidate model, say) in the same feature and minutes: production is
    steady, so nothing fires. The same rule over the eval run's traffic does fire, so the data holds a shift and it
    is the production-only reading that keeps it out."""
    end_s, _ = _fill(store, slowdown=1.0)
    _, slowed = _fill(store, eval_run="candidate-7", seed=6)
    production = AlertingService(_config(hook.url), store, clock=lambda: end_s)
    assert production.run_once() == []
    production.stop()
    assert _alert_rows(store) == [] and hook.bodies == []

    run = StoreSignalSource(store, Traffic.of(eval_run="candidate-7"))
    evaluation = AlertingService(_config(hook.url), store, clock=lambda: end_s, source=run)
    [record] = evaluation.run_once()
    evaluation.stop()
    assert (record.state, record.stage, record.metric) == ("firing", "generate", "latency_p95_ms")
    assert record.trace_ids and set(record.trace_ids) <= slowed


def test_the_next_run_does_not_fire_the_same_alert_again(store: Store, hook: Hook) -> None:
    end_s, _ = _fill(store)
    now = [end_s]
    service = AlertingService(_config(hook.url), store, clock=lambda: now[0])
    assert len(service.run_once()) == 1
    now[0] += 60  # a minute later, no new data: nothing new to judge
    assert service.run_once() == []
    service.stop()
    assert len(_alert_rows(store)) == 1 and len(hook.bodies) == 1


class FlakyStore:
    """The real store, except that alert inserts fail while `failing` is set."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.topology = store.topology
        self.failing = True

    def read(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        return self.store.read(sql, params)

    def insert_alerts(self, rows: Any, dedup_token: str | None = None) -> str:
        if self.failing:
            raise ConnectionError("store unavailable")
        return self.store.insert_alerts(rows, dedup_token)


def test_a_failing_store_and_webhook_are_counted_retried_and_survived(store: Store, hook: Hook) -> None:
    end_s, _ = _fill(store)
    flaky = FlakyStore(store)
    hook.script = [503, 503]  # both attempts of the first delivery fail
    service = AlertingService(_config(hook.url), flaky, clock=lambda: end_s)

    [record] = service.run_once()
    assert _alert_rows(store) == []
    assert service.store_sink.errors == 1 and len(service.store_sink.pending) == 1
    assert service.dispatcher.stats["hook"].failed == 1 and hook.bodies == []
    metrics = text_of(service)
    assert prometheus.value(metrics, "ragmon_alert_rows_total", outcome="pending") == 1
    assert prometheus.value(metrics, "ragmon_alert_store_errors_total") == 1
    assert prometheus.value(metrics, "ragmon_alert_deliveries_total", channel="hook", result="failed") == 1

    flaky.failing = False  # the store is back: the next run stores the row it kept
    service.run_once()
    [stored] = collapse_alert_rows(_alert_rows(store))
    assert stored["alert_id"] == record.alert_id
    assert prometheus.value(text_of(service), "ragmon_alert_rows_total", outcome="stored") == 1
    # A failed delivery is not remembered, so the same record sent again (a replay) reaches the recovered webhook.
    service.dispatcher.deliver(record)
    assert [b["alert"]["alert_id"] for b in hook.bodies] == [record.alert_id]
    service.stop()


class BrokenReads(FlakyStore):
    def read(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        raise ConnectionError("store unavailable")


def test_the_thread_keeps_running_while_reads_fail(store: Store, hook: Hook) -> None:
    service = AlertingService(_config(hook.url), BrokenReads(store), clock=time.time).start()
    try:
        deadline = time.monotonic() + 30
        while service.evaluator.stats.runs < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert service.evaluator.stats.runs >= 3
        assert service.evaluator.stats.source_errors["generate_latency"] >= 3
        assert service._thread.is_alive()
        assert prometheus.value(text_of(service), "ragmon_alert_source_errors_total", rule="generate_latency")
    finally:
        service.stop()
    assert not service._thread.is_alive()


def test_a_rule_name_with_a_quote_and_a_newline_is_escaped_on_metrics(store: Store, hook: Hook) -> None:
    """Rule names are the operator's text; written into /metrics by hand, this one broke the exposition."""
    name = 'checkout "p95"\nlatency'
    service = AlertingService(_config(hook.url, rule_name=name), BrokenReads(store), clock=time.time)
    service.run_once()
    text = text_of(service)  # parsed back below with prometheus_client's parser, which raises on a bad line
    assert prometheus.value(text, "ragmon_alert_source_errors_total", rule=name) == 1
    assert prometheus.value(text, "ragmon_alert_evaluations_total") == 1
    service.stop()
