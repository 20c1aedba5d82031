"""The agent: the one place where the receivers, the span's pipeline (`pipeline.py`: log, store, sample, keep,
queue, roll up, judge), drift alerts, the API and dashboard, and the store are wired together (`ragmon serve` runs
one).

    receivers (HTTP, gRPC) ─▶ Pipeline (intake … scores) ─▶ store ◀─ API, dashboard, alerting

The data directory has one owner: the agent holds an exclusive lock on `agent.lock` and writes where its API
listens to `agent.json`, so `ragmon report`/`query` on the same directory ask the agent instead of opening the
embedded store a second time.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from ragmon.agent.alerting import AlertingService, start_alerting
from ragmon.agent.api import ApiServer
from ragmon.agent.memory_budget import describe, limit_warning, memory_budget
from ragmon.agent.ownership import DataDirLock
from ragmon.agent.ports import check_ports_free
from ragmon.collectors import (
    CollectorCounters,
    ConsumerUnavailable,
    FeedbackEndpoint,
    FeedbackKeys,
    GrpcReceiver,
    HttpReceiver,
)
from ragmon.collectors.auth import ApiKeyAuth
from ragmon.collectors.exposition import metrics_registry, render_metrics
from ragmon.collectors.memory_guard import MemoryGuard
from ragmon.dashboard import ReadKeys, ReviewerKeys, create_dashboard, create_review
from ragmon.data_dir import embedded_store
from ragmon.drift import AlertsConfig
from ragmon.health import HealthRegistry
from ragmon.pipeline import JudgeEndpoints, Pipeline, pipeline_families
from ragmon.pricing import load_price_table
from ragmon.sampling import Sampler, SamplerConfig
from ragmon.settings import Settings
from ragmon.sinks import Store, open_store, otlp_views
from ragmon.sinks.errors import StoreError
from ragmon.sinks.named_reads import run_read
from ragmon.sinks.read_budget import QueryBudgets
from ragmon.sinks.redaction import Redaction

log = logging.getLogger("ragmon.agent")

_P95_REFRESH_S = 10.0
_REQUEST_HISTORY_S = 3600  # how far back a restarted sampler looks for each feature's recent requests


def split_host_port(address: str, what: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{what} must be HOST:PORT, got {address!r}")
    return host or "127.0.0.1", int(port)


class Agent:
    def __init__(self, settings: Settings, *, store: Store | None = None) -> None:
        self.settings = settings
        agent = settings.agent
        self.sampler_config = SamplerConfig.model_validate(agent.sampling)  # fail fast on a bad config
        self.alerts_config = AlertsConfig.model_validate(agent.alerts)  # drift rules and channels, fail fast too
        self.alerting: AlertingService | None = None
        self.redaction = Redaction.from_settings(agent.redaction)  # names checked here, regexes by the engine
        self.data_dir = Path(agent.data_dir)
        self._lock = DataDirLock(self.data_dir) if store is None and not agent.clickhouse_url else None
        self._store = store
        self.counters = CollectorCounters()
        self.auth = ApiKeyAuth(agent.api_keys)  # the receivers': a reviewer key sends no spans
        self.reviewers = ReviewerKeys(agent.reviewer_keys)
        self.read_keys = ReadKeys(self.auth, self.reviewers)  # the API's and the dashboard's: reviewers read too
        self.feedback_keys = FeedbackKeys(agent.feedback_keys)  # write feedback, nothing else: no reads, no spans
        self._p95: dict[tuple[str, str], float] = {}
        self._p95_at_s = float("-inf")
        self.receivers: list[Any] = []
        self.api: ApiServer | None = None
        self.health = HealthRegistry()  # the long-running loops report here; /health, /health/live, /health/ready
        # agent.memory_limit, shared out (sizes below, the engine's cap) and kept by the receivers' guard
        self.memory = memory_budget(agent)
        self.memory_guard = MemoryGuard(
            self.memory.limit_bytes,
            high_water_bytes=self.memory.high_water_bytes,
            low_water_bytes=self.memory.low_water_bytes,
            idle=lambda: self.pipeline.intake.backlog[0] == 0,  # read once started, when the intake exists
        )

    # -- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> Agent:
        agent = self.settings.agent
        check_ports_free(self._listen_addresses())  # before the data directory is created or locked
        if self._lock is not None:
            self._lock.acquire()
        try:
            self.store = self._store or open_store(
                agent.clickhouse_url or embedded_store(self.data_dir),
                cluster=agent.clickhouse_cluster if agent.clickhouse_url else None,
                engine_memory_bytes=self.memory.engine_bytes,
                read_connections=agent.read_connections,
                read_wait_s=agent.read_wait_s,
            )
            # Every read a caller makes (the API, the dashboard) runs under its tenant's budget.
            self.store.query_budgets = QueryBudgets(agent.query_budget, agent.query_budgets)
            self.store.insert_streams = agent.insert_streams
            prices = load_price_table(self.settings.sdk.price_file)
            # Before the views are (re)created: a bad pattern must stop start-up, not the first insert.
            self.redaction.check(self.store.query)
            otlp_views.install(self.store, prices=prices, redaction=self.redaction)
            log.info("PII redaction before storage: %s", self.redaction.fingerprint)
            log.info("memory: %s", describe(self.memory))
            if (too_small := limit_warning(agent)) is not None:
                log.warning(too_small)
            self.sampler = Sampler(self.sampler_config, p95_lookup=self._recent_p95)
            self._seed_request_latency()
            # The span's path from the log to a score (pipeline.py); the receivers below feed its intake.
            self.pipeline = Pipeline(
                self.settings,
                self.store,
                self.sampler,
                self.data_dir,
                backlog_bytes=self.memory.backlog_bytes,
                insert_batch_bytes=self.memory.insert_batch_bytes,
                health=self.health,
            ).start()
            self.alerting = start_alerting(self.alerts_config, self.store, health=self.health)
            self.memory_guard.start()
            self._start_receivers()
            host, port = split_host_port(agent.api, "--api")
            review = create_review(self.store, self.reviewers)
            dashboard = create_dashboard(self.store, self.read_keys, bind_host=host, review=review)
            judge_api = JudgeEndpoints(self.store, self.data_dir)
            self.api = ApiServer(
                host,
                port,
                self._read,
                self._query,
                self.read_keys,
                dashboard,
                judge_api,
                memory_guard=self.memory_guard,
                health=self._probe,
                cancel_query=self._cancel_query,
                read_scope=self.store.reading,
                metrics=lambda accept: render_metrics(self.metrics, accept=accept),  # the receiver's registry
            ).start()
            if self._lock is not None:
                self._lock.publish({"api": self.api.url})
        except BaseException:
            self.stop()
            raise
        return self

    def _listen_addresses(self) -> list[tuple[str, str, int]]:
        agent = self.settings.agent
        flags = [("--otlp-http", agent.otlp_http), ("--otlp-grpc", agent.otlp_grpc), ("--api", agent.api)]
        return [(flag, *split_host_port(address, flag)) for flag, address in flags if address]

    def _start_receivers(self) -> None:
        agent = self.settings.agent
        host, port = split_host_port(agent.otlp_http, "--otlp-http")
        self.receivers.append(
            HttpReceiver(
                self.pipeline.intake,
                host=host,
                port=port,
                auth=self.auth,
                counters=self.counters,
                max_body_bytes=agent.max_body_bytes,
                max_inflight_bytes=self.memory.inflight_bytes,
                extra_metrics=[self.metrics],  # holds self.counters too: exposed once (collectors/exposition.py)
                memory_guard=self.memory_guard,
                feedback=self._feedback_endpoint(),
            ).start()
        )
        if agent.otlp_grpc:
            host, port = split_host_port(agent.otlp_grpc, "--otlp-grpc")
            self.receivers.append(
                GrpcReceiver(
                    self.pipeline.intake,
                    host=host,
                    port=port,
                    auth=self.auth,
                    counters=self.counters,
                    max_message_bytes=agent.max_body_bytes,
                    max_concurrent_rpcs=self.memory.grpc_concurrent_rpcs,
                    memory_guard=self.memory_guard,
                ).start()
            )

    def _feedback_endpoint(self) -> FeedbackEndpoint:
        """`POST /v1/feedback` beside `/v1/traces`: the tenant's API keys or its feedback keys; acknowledged once
        stored, concurrent requests sharing one INSERT (collectors/feedback_commit.py)."""
        agent = self.settings.agent
        return FeedbackEndpoint(
            self._write_feedback,
            api_keys=self.auth,
            feedback_keys=self.feedback_keys,
            origins=agent.feedback_origins,
            rate_per_s=agent.feedback_rate_per_s,
            burst=agent.feedback_burst,
            max_body_bytes=agent.feedback_max_body_bytes,
            max_items=agent.feedback_max_items,
            max_waiting_bytes=agent.feedback_max_waiting_bytes,
            wait_s=agent.feedback_wait_s,
            counters=self.counters,
        )

    def _write_feedback(self, rows: list[dict[str, Any]]) -> None:
        """Store feedback before it is acknowledged; a store that cannot take it now is a 503 the sender retries."""
        try:
            self.store.insert_feedback(rows)
        except StoreError as exc:
            if not exc.retryable:
                raise
            raise ConsumerUnavailable(5.0, f"the store is unavailable ({exc})") from exc

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop receiving, store what was acknowledged (within the timeout), decide held traces, release."""
        for receiver in self.receivers:
            receiver.stop()
        self.receivers = []
        self.memory_guard.stop()
        store = getattr(self, "store", None)
        if self.api is not None:
            if store is not None:
                store.cancel_reads()  # a runaway read must not hold the shutdown for its whole budget
            self.api.stop()
            self.api = None
        if self.alerting is not None:
            self.alerting.stop(timeout_s)
            self.alerting = None
        pipeline = getattr(self, "pipeline", None)
        if pipeline is not None:
            pipeline.stop(timeout_s)
        if store is not None and self._store is None:
            store.close()
        if self._lock is not None:
            self._lock.release()

    def _seed_request_latency(self) -> None:
        """Each feature's recent requests from the store, so "slow" holds across a restart (else a feature's
        first 50 requests after it are judged by the SLA only). A store that cannot answer costs only that."""
        window = self.sampler.request_latency
        try:
            recent = self.store.recent_request_durations(_REQUEST_HISTORY_S, window.window)
        except Exception as exc:
            log.warning("could not read recent request durations (slow starts cold): %s", exc)
            return
        for (tenant, feature), durations_ms in recent.items():
            window.add(tenant, feature, durations_ms)

    # -- what the API and the sampler read -------------------------------------------------------------------
    def _read(self, name: str, values: dict[str, Any], tenant: str | None) -> Any:
        """A named read the API checked (`ragmon.sinks.named_reads`), for the key's tenant."""
        return run_read(self.store, name, values, tenant=tenant)

    def _query(
        self, sql: str, params: dict[str, Any], tenant: str | None, max_rows: int, tag: str
    ) -> list[dict[str, Any]]:
        return self.store.query(sql, params, tenant=tenant, max_rows=max_rows, cut_at_max_rows=True, query_tag=tag)

    def _cancel_query(self, tag: str) -> None:
        """The API's client went away: stop its query in the engine rather than let it run out its budget."""
        self.store.cancel(tag)

    def _probe(self, name: str) -> tuple[bool, dict[str, Any]]:
        """/health/live (restart me?), /health/ready (send me traffic?); plain /health is the readiness answer,
        which a load balancer or a compose health check asks for (`ragmon.health`)."""
        probe = self.health.live() if name == "live" else self.health.ready()
        return probe.ok, probe.body

    def _recent_p95(self, feature: str, stage: str) -> float | None:
        """Recent p95 per (feature, stage) from the rollups; refreshed every few seconds, in the sampling thread."""
        now = time.monotonic()
        if now - self._p95_at_s >= _P95_REFRESH_S:
            self._p95_at_s = now
            try:
                self._p95 = self.store.recent_p95()
            except Exception as exc:  # stale figures are fine for a sampling threshold; say so, carry on
                log.warning("could not refresh recent p95 figures: %s", exc)
        return self._p95.get((feature, stage))

    # -- /metrics --------------------------------------------------------------------------------------------
    @functools.cached_property
    def metrics(self) -> CollectorRegistry:
        """This agent's Prometheus registry: the receivers' counters, the agent's own families (with its alerting's
        and judging's, `collect`) and the memory guard's. Its own, not prometheus_client's global one: several
        agents share a test process. `render_metrics(agent.metrics, accept=...)` gives its exposition."""
        return metrics_registry(self.counters, self, self.memory_guard)

    def collect(self) -> Iterator[Metric]:
        """The agent's families, read from the counts its parts keep (a prometheus_client collector): the
        pipeline's (`ragmon.pipeline.metrics`), the store's reads, the loops' health, the API's refusals, alerting."""
        yield from pipeline_families(self.pipeline)
        yield GaugeMetricFamily(
            "ragmon_store_reads_running",
            "Callers' reads out now (the API, the dashboard): waiting for a read connection or running in the engine.",
            self.store.running_reads(),
        )
        components = GaugeMetricFamily(
            "ragmon_component_up",
            "1 while a long-running loop is ok, 0 while it is failing, stalled or stopped (state label; /health).",
            labels=["component", "state"],
        )
        for name, component in sorted(self.health.snapshot().items()):
            components.add_metric([name, str(component.state)], 1 if component.state == "ok" else 0)
        yield components
        if self.api is not None:
            api_refused = CounterMetricFamily(
                "ragmon_api_refused", "API requests refused before any work, by reason.", labels=["reason"]
            )
            for reason, n in sorted(self.api.refusals.items()):
                api_refused.add_metric([reason], n)
            yield api_refused
        # Read here, not registered apart: alerting starts with the agent, after the registry can exist.
        if self.alerting is not None:
            yield from self.alerting.collect()
