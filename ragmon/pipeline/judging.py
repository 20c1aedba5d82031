"""Judging in the agent: kept traces always go to the durable judge queue; who judges them is a separate choice.

- `Judging.start` opens the queue under the data directory, catches up once on kept traces that were never
  queued, and — with `judge.run_in_agent` (the default) — runs the judge worker in-process. With it off, the
  agent still enqueues every kept trace for the configured judge's version, and `ragmon judge` workers take them.
- Kept traces whose payload was copied are enqueued (`enqueue`, by `Pipeline.decided`). While the queue
  file cannot take them (disk full, locked) they wait in memory (at most `UNQUEUED_MAX`; past it the oldest are
  dropped and counted, and the next start's catch-up queues them) and go in with the next enqueue that succeeds.
- The catch-up: traces of the last week with a payload but no online score and no queue item of any judge
  version (kept while nothing queued them — an older agent with `run_in_agent = false`, a failed enqueue, a
  kill -9 between the copy and the enqueue). Idempotent: the queue key and the "no item of any version" check
  make a second start, or a trace already judged, a no-op.
- `JudgeEndpoints`: what a `ragmon judge` worker beside this agent reads and writes through the agent's API when
  the embedded store is the agent's alone (payloads of leased traces, score rows). Those endpoints expose every
  tenant's payloads, so they ask for a token the agent writes into the data directory (mode 0600) at each start:
  whoever can read the data directory may judge, as whoever can open its store could.

The in-process worker (`JudgeService`) judges within the judge's rate limit and budget and writes scores to the
store; with `judge.events.endpoint` set it also sends each score out as a `gen_ai.evaluation.result` event
(ragmon/pipeline/score_events.py), counted on /metrics. Stopping lets in-flight traces finish within a deadline; the
rest stay queued. It never stops on a fault — a full disk under the queue file, a store that is down, a bug in a
step: the worker retries with backoff and resumes when the fault passes (judges/worker.py), reporting to the
agent's health registry as the `judge` component (ragmon/health.py).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import secrets
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.metrics_core import Metric

from ragmon.data_dir import JUDGE_TOKEN_FILE
from ragmon.health import Component, HealthRegistry
from ragmon.judges.queue import JudgeQueue, Kept
from ragmon.judges.registry import judge_version, make_judge
from ragmon.judges.worker import JudgeWorker, WorkerConfig
from ragmon.pipeline import score_events
from ragmon.pipeline.judge_store import StorePayloadSource, StoreScoreSink
from ragmon.retry import Recovery, is_transient
from ragmon.settings import JudgeSettings
from ragmon.sinks.for_judge import JudgeQueueStore, JudgeStore

log = logging.getLogger("ragmon.agent")

# The in-process worker's leases: after a kill -9 of the agent its leased traces wait this long for the restarted
# agent (the worker's 300 s default would hold them five minutes). Renewed every 20 s, so a lease is lost only if
# the worker's loop stalls for 40 s, and then the cost is a re-judgement, never a second score (fencing tokens).
IN_AGENT_LEASE_S = 60.0
CATCH_UP_LIMIT = 100_000  # traces per start; a larger backlog is caught up over the next starts, and said so
# How far back the catch-up looks: a kept trace older than a week is judged by `ragmon backeval` if at all (its
# score would land on a day the report has long shown), and the window bounds the catch-up's memory in the store.
CATCH_UP_WINDOW_S = 7 * 86400
# The worker beats after every loop (at least each `idle_poll_s`, 0.5 s), and waits at most 10 s between tries of a
# failing step (ragmon.retry.FOREVER) or 10 s for the queue file's lock (its busy timeout): a minute of silence is
# a worker stuck in a call.
JUDGE_STALL_AFTER_S = 60.0
# Kept traces held in memory while the queue file refuses them: a few minutes of a busy agent's kept traces (~100
# bytes each); the rest are found by the next start's catch-up, as any trace kept but never queued.
UNQUEUED_MAX = 100_000


class JudgeService:
    """The judge worker on a thread of its own (an asyncio loop), over the agent's queue and store."""

    def __init__(
        self, settings: JudgeSettings, store: JudgeStore, queue: JudgeQueue, *, health: HealthRegistry | None = None
    ) -> None:
        self.queue = queue
        self.health: Component | None = (
            health.component("judge", stall_after_s=JUDGE_STALL_AFTER_S) if health is not None else None
        )
        self.judge = make_judge(settings.backend, settings)
        lock = threading.Lock()  # the worker's store calls, one at a time
        # After the judge (which may refuse its settings): it starts an export thread that only stop() ends.
        self.events = score_events.open_events(settings.events)
        self.worker = JudgeWorker(
            self.queue,
            self.judge,
            StorePayloadSource(store, lock=lock),
            StoreScoreSink(store, lock=lock),
            config=WorkerConfig(lease_s=IN_AGENT_LEASE_S),
            events=self.events,
            health=self.health,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="ragmon-judge", daemon=True)

    def start(self) -> JudgeService:
        self._thread.start()
        return self

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        try:
            # Returns only once stop() was called: the worker retries every fault itself.
            loop.run_until_complete(self.worker.run())
        except BaseException as exc:  # out of memory, a stop gone wrong: said in the log and on /health, never silent
            log.exception("the judge worker stopped on an error; kept traces stay queued")
            if self.health is not None:
                self.health.stopped(exc)
        else:
            if self.health is not None:
                self.health.stopped("" if self.worker.stopping else "returned unasked", expected=self.worker.stopping)
        finally:
            loop.run_until_complete(self.judge.aclose())
            loop.close()

    def stop(self, timeout_s: float = 10.0) -> None:
        loop = self._loop
        if loop is not None and self._thread.is_alive():
            future = asyncio.run_coroutine_threadsafe(self.worker.stop(timeout_s), loop)
            try:
                future.result(timeout_s + 5)
            except Exception as exc:
                log.warning("judge worker did not stop cleanly: %s", exc)
        self._thread.join(timeout_s + 5)
        if self.events is not None:
            self.events.shutdown(score_events.FLUSH_ON_STOP_S)


class Judging:
    """The queue every kept trace goes to, and the in-process worker when the agent judges them itself."""

    def __init__(self, queue: JudgeQueue, version: str, service: JudgeService | None) -> None:
        self.queue = queue
        self.version = version
        self.service = service
        self.unqueued: deque[Kept] = deque()  # kept traces the queue file refused (a transient fault), oldest first
        self.unqueued_dropped = 0  # past UNQUEUED_MAX: left to the next start's catch-up
        self._recovery = Recovery("judge queue", log)
        self._enqueue_lock = threading.Lock()  # the sampling thread enqueues; stop() may flush

    @classmethod
    def start(
        cls, settings: JudgeSettings, store: JudgeQueueStore, data_dir: Path, *, health: HealthRegistry | None = None
    ) -> Judging:
        """`health`: where the in-process worker reports (component `judge`); none when `ragmon judge` workers
        judge (they are other processes, with their own health)."""
        queue = JudgeQueue.in_data_dir(data_dir)
        service: JudgeService | None = None
        try:
            service = JudgeService(settings, store, queue, health=health) if settings.run_in_agent else None
            # The worker's own version when it runs here (what it leases); else the one `ragmon judge` with
            # these settings judges as, computed without loading the judge into the agent.
            version = service.judge.version if service else judge_version(settings.backend, settings)
            judging = cls(queue, version, service)
            judging.catch_up(store)
        except BaseException:
            if service is not None and service.events is not None:
                service.events.shutdown(0.0)
            queue.close()
            raise
        if service is not None:
            service.start()
        else:
            log.info("judging by `ragmon judge` workers: kept traces are queued for %s", version)
        return judging

    def enqueue(
        self, kept: Sequence[Mapping[str, Any]], root_spans: Mapping[tuple[str, str], str] | None = None
    ) -> int:
        """Kept traces whose payload was just copied (rows of DecisionSink: tenant, trace_id, reasons, probability),
        each with its root span id when `root_spans` knows it (the span its scores' evaluation events name)."""
        root_spans = root_spans or {}
        items = [
            Kept(
                tenant=row["tenant"],
                trace_id=row["trace_id"],
                span_id=root_spans.get((row["tenant"], row["trace_id"]), ""),
                sampling_reason=(row.get("reasons") or [""])[0],
                inclusion_probability=row.get("probability"),
            )
            for row in kept
        ]
        with self._enqueue_lock:
            self.unqueued.extend(items)
            return self._enqueue_unqueued()

    def _enqueue_unqueued(self) -> int:
        """Queue what waits (the traces refused before, then the new ones). A transient fault keeps them waiting
        (logged once); any other error is raised, as before, to the caller that counts it."""
        if not self.unqueued:
            return 0
        try:
            added = self.queue.enqueue(list(self.unqueued), self.version)
        except Exception as exc:
            if not is_transient(exc):
                self.unqueued.clear()
                raise
            self._recovery.failed(exc)
            while len(self.unqueued) > UNQUEUED_MAX:
                self.unqueued.popleft()
                self.unqueued_dropped += 1
            return 0
        self._recovery.succeeded()
        self.unqueued.clear()
        return added

    def catch_up(self, store: JudgeQueueStore) -> int:
        """Queue kept traces that have no online score and were never queued; returns how many. A store that
        cannot answer costs only the catch-up (said in the log), never the start."""
        try:
            rows = store.unjudged_payloads(CATCH_UP_WINDOW_S, CATCH_UP_LIMIT)
        except Exception as exc:
            log.warning("could not look for kept traces never queued for judging: %s", exc)
            return 0
        items = [
            Kept(
                tenant=str(row["tenant"]),
                trace_id=str(row["trace_id"]),
                feature=str(row.get("feature") or ""),
                sampling_reason=str(row.get("sampling_reason") or ""),
                inclusion_probability=row.get("inclusion_probability"),
            )
            for row in rows
        ]
        added = self.queue.enqueue_unqueued(items, self.version)
        if added:
            log.warning("queued %d kept traces that were never queued for judging (judge %s)", added, self.version)
        if len(rows) >= CATCH_UP_LIMIT:
            log.warning("more than %d kept traces are unjudged; the rest are looked at next start", CATCH_UP_LIMIT)
        return added

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.service is not None:
            self.service.stop(timeout_s)
        with self._enqueue_lock:
            try:
                self._enqueue_unqueued()
            except Exception:  # the next start's catch-up queues them
                log.exception("could not queue %d kept traces before stopping", len(self.unqueued))
            if self.unqueued:
                log.warning("%d kept traces not queued; the next start queues them", len(self.unqueued))
        self.queue.close()

    def collect(self) -> list[Metric]:
        """The evaluation events' families when this agent judges and sends them (none otherwise)."""
        return score_events.metric_families(self.service.events if self.service else None)


class JudgeEndpoints:
    """The store side of a `ragmon judge` worker that cannot open the embedded store (this agent owns it):
    payloads of the traces it leased from the shared queue file, and its score rows. The queue itself is not
    proxied: it is a SQLite file several processes share safely (leases, tokens, outbox; judges/queue.py)."""

    def __init__(self, store: JudgeStore, data_dir: Path) -> None:
        self._store = store
        self._token = secrets.token_urlsafe(32)
        path = data_dir / JUDGE_TOKEN_FILE
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(self._token)
        os.replace(tmp, path)

    def allows(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self._token.encode())

    def payloads(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = self._store.payloads_for_judging(tenant, list(trace_ids))
        return found

    def write_scores(self, rows: list[dict[str, Any]]) -> int:
        # The worker projected the rows onto the scores columns and re-sends identical rows after a failure;
        # the store's content-derived deduplication token makes a re-send invisible.
        self._store.insert_scores(rows)
        return len(rows)
