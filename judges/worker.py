"""The asyncio judge worker: leases kept traces from the queue, scores them, and hands the rows to the store.

For each leased trace: fetch its payload (`PayloadSource`; None → every metric `skipped`, "payload missing"), run
the configured metrics with the judge (concurrently per trace; `concurrency` traces at once — the judge's own
requests-per-minute bucket, concurrency limit and budget pace its calls), record the rows in the queue file, then
deliver them in batches (`ScoreSink`) and mark the items done. When given `events` (judges/event_export.py), each
recorded score is also sent out as an OpenTelemetry `gen_ai.evaluation.result` event: a non-blocking hand-off, so
a collector that is down never slows judging, and the score reaches the store whatever happens to its event.

Nothing is lost and nothing is fabricated: every leased trace ends with one row per metric — a value, or an
explicit non-ok status (unscorable, parse_error, llm_error, budget_exhausted, skipped). A payload source that
fails puts the item back with a delay: without counting the attempt when the fault is the source's, not the item's
(`SourceUnavailable`, or a transient fault — the store down, `ragmon.retry.is_transient`), so an outage of any
length fails no trace; otherwise counted, and after `max_attempts` leases (failures or crashed workers) the item is
failed with `skipped` rows that say why. A judge that raises (a bug) gives `llm_error` rows, never a crash.

Lifecycle: `await worker.run()` until `await worker.stop(timeout_s)` — which stops leasing, lets in-flight traces
finish within the timeout, puts the rest back in the queue without counting the attempt, delivers what was
recorded, and returns. `run(until_empty=True)` returns by itself when the queue has nothing left to do.

Faults: `run()` never stops on one. A queue file that is full, locked or failing, a store that is down, or a bug
in a step is retried with jittered backoff (`ragmon.retry.Recovery`: up to 10 s between tries, interruptible by
`stop`) for as long as it lasts, logged once per distinct problem, and reported to `health` (failing with the
error, then ok) — the worker resumes by itself when the fault passes. A judged trace whose rows the queue cannot
take yet keeps them and its lease and tries again (judging it again would cost the judge's calls twice). Only a
`run(until_empty=True)` (a batch job, whose caller wants an answer) raises on a bug instead of retrying it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ragmon.judges.llm_judge import current_feature
from ragmon.judges.metrics import ONLINE_METRICS
from ragmon.judges.protocol import Judge
from ragmon.judges.queue import DEFAULT_LEASE_S, ItemState, JudgeQueue, Lease, Recorded, Recording
from ragmon.judges.score_rows import score_row, status_rows, summary_status
from ragmon.judges.types import MetricResult, RagSample, Status

from ragmon.retry import Recovery, is_transient

log = logging.getLogger("ragmon.judges")

# A trace's fault (its payload read, its record) keeps the worker's health failing this long after it last happened
# unless a trace is recorded meanwhile: items put back retry every `payload_retry_s`, so a fault still there recurs
# well within it, and one that does not recur has passed.
_TRACE_FAULT_MEMORY_S = 30.0

# Online metrics: those a kept trace's payload can feed (context recall needs a reference answer, which production
# traffic lacks: it would be `skipped`).
DEFAULT_METRICS = ONLINE_METRICS


class SourceUnavailable(Exception):
    """The payload source cannot be reached at all (the agent it asks is restarting or down): the item waits
    without its attempt counted, since nothing about the item failed, and an agent down for longer than
    `max_attempts` retries must not fail every queued trace."""


class PayloadSource(Protocol):
    """A kept trace's question, passages and answer; None when the payload is not (or no longer) stored."""

    async def payload(self, tenant: str, trace_id: str) -> RagSample | None: ...


class ScoreEvents(Protocol):
    """Announces each recorded score elsewhere (EvaluationEvents). Called on the worker's loop: must not block."""

    def emit(
        self, row: Mapping[str, Any], *, span_id: str = "", faithfulness_threshold: float | None = None
    ) -> None: ...


class HealthReport(Protocol):
    """Where the worker says how it is doing: a heartbeat on progress or an idle poll, or the fault it is retrying
    (ragmon.health.Component in the agent)."""

    def ok(self) -> None: ...

    def failing(self, error: BaseException | str) -> None: ...


class ScoreSink(Protocol):
    """Writes score rows (dicts shaped like ragmon.sinks.schema.SCORE_COLUMNS). Raising means nothing was written for
    sure; the rows are sent again later, identical, so a sink should deduplicate identical re-sends."""

    def write(self, rows: list[dict[str, Any]]) -> None: ...


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    metrics: tuple[str, ...] = DEFAULT_METRICS
    concurrency: int = 16  # traces judged at once; enough to keep a 600 rpm judge busy at 200 ms replies
    lease_s: float = DEFAULT_LEASE_S  # renewed every lease_s / 3 while a trace is judged
    idle_poll_s: float = 0.5  # how often an idle worker looks for new items
    max_attempts: int = 5  # leases per item before it is failed
    payload_retry_s: float = 5.0  # a failing payload source: try the item again after this
    delivery_batch_rows: int = 500
    delivery_interval_s: float = 1.0  # recorded rows wait at most this long for a fuller batch
    delivery_retry_s: float = 2.0  # after a failed write
    run_name: str = ""  # '' online; a name for back-evaluation runs

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.max_attempts < 1 or self.lease_s <= 0:
            raise ValueError("concurrency and max_attempts must be >= 1 and lease_s > 0")
        if not self.metrics:
            raise ValueError("at least one metric")


@dataclass(slots=True)
class WorkerStats:
    traces: Counter[str]  # finished traces by summary status ("ok", "budget_exhausted", "mixed", ...)
    scores: Counter[str]  # rows by status
    lease_lost: int = 0  # results dropped because another worker had taken the item over
    faults: int = 0  # failed tries of the worker's own steps (queue file, store, bugs), each retried
    payload_errors: int = 0
    delivery_errors: int = 0
    rows_delivered: int = 0
    released_on_stop: int = 0


class _BatchedRecords:
    """The outbox step for traces that finish together, in one queue transaction: each trace awaits its own
    answer, and the traces that finish within `window_s` of the first are recorded by one `record_many` call on a
    worker thread. One thread hop and one commit per trace cost several times the CPU per trace of one call for 16
    (docs/results.md) — the agent judges beside an ingest that needs the CPU."""

    def __init__(self, queue: JudgeQueue, window_s: float = 0.005) -> None:
        self._queue = queue
        self.window_s = window_s
        self._waiting: list[tuple[Recording, asyncio.Future[bool]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def record(self, recording: Recording) -> bool:
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append((recording, answer))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await answer

    async def _flush(self) -> None:
        await asyncio.sleep(self.window_s)  # let the rest of the round finish
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                kept = await asyncio.to_thread(self._queue.record_many, [recording for recording, _ in batch])
            except asyncio.CancelledError:
                for _, answer in batch:
                    answer.cancel()
                raise
            except Exception as exc:  # the queue file failed: every trace of the batch hears it, as it would alone
                for _, answer in batch:
                    if not answer.done():
                        answer.set_exception(exc)
                continue
            for (_, answer), ok in zip(batch, kept, strict=True):
                if not answer.done():
                    answer.set_result(ok)


class JudgeWorker:
    def __init__(
        self,
        queue: JudgeQueue,
        judge: Judge,
        payloads: PayloadSource,
        sink: ScoreSink,
        *,
        config: WorkerConfig | None = None,
        events: ScoreEvents | None = None,
        health: HealthReport | None = None,
    ) -> None:
        self.queue = queue
        self.judge = judge
        self.payloads = payloads
        self.sink = sink
        self.config = config or WorkerConfig()
        self.judge_version = judge.version
        self.events = events
        self.health = health
        self.stats = WorkerStats(traces=Counter(), scores=Counter())
        self._recovery = Recovery("judge worker", log)
        self._trace_fault = ""  # the last fault of a trace's own steps, until a trace is recorded again ...
        self._trace_fault_at_s = 0.0  # ... or it is this old: a fault that does not recur has passed
        self._stop_requested = asyncio.Event()  # wakes a backoff wait, which finishing traces must not cut short
        # While the payload source is down, leasing more items would only put each back at once: wait this long.
        self._lease_not_before_s = 0.0
        self._in_flight: dict[asyncio.Task[None], Lease] = {}
        self._undelivered: dict[tuple[str, str, str], Lease] = {}  # recorded here, not yet in the store
        self._records = _BatchedRecords(queue)
        self._wake = asyncio.Event()
        self._stopping = False
        self._stop_timeout_s = 10.0
        self._finished = asyncio.Event()
        self._last_delivery = time.monotonic()
        self._delivery_not_before = 0.0

    # -- lifecycle -----------------------------------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        """Whether `stop()` was called (a `run()` that returns otherwise ran `until_empty`)."""
        return self._stopping

    async def run(self, *, until_empty: bool = False) -> None:
        renewer = asyncio.create_task(self._renew_leases())
        try:
            while not self._stopping:
                try:
                    if await self._step(until_empty):
                        break
                except Exception as exc:  # a full or locked queue file, a store down, a bug: never stop for it
                    if until_empty and not is_transient(exc):
                        raise  # a batch job's caller wants to hear about a bug, not wait on it
                    await self._backoff(exc)
                    continue
                self._recovery.succeeded()
                self._report()
                await self._wait()
        finally:
            await self._shut_down()
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            self._finished.set()

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Stop leasing, finish in-flight traces within `timeout_s`, put the rest back, deliver, return."""
        self._stop_timeout_s = timeout_s
        self._stopping = True
        self._wake.set()
        self._stop_requested.set()
        await self._finished.wait()

    async def _step(self, until_empty: bool) -> bool:
        """Deliver what is due, lease what there is room for; True when `until_empty` and nothing is left."""
        await self._deliver(force=False)
        free = self.config.concurrency - len(self._in_flight)
        if free > 0 and time.monotonic() >= self._lease_not_before_s:
            for lease in await asyncio.to_thread(
                self.queue.lease, free, self.config.lease_s, judge_version=self.judge_version
            ):
                self._in_flight[asyncio.create_task(self._judge(lease))] = lease
        if until_empty and not self._in_flight:
            await self._deliver(force=True)
            if await asyncio.to_thread(self.queue.pending, self.judge_version) == 0:
                return True
        return False

    async def _backoff(self, exc: Exception) -> None:
        """A step failed: say so (once per distinct problem) and wait before the next try, unless stopped."""
        self.stats.faults += 1
        delay_s = self._recovery.failed(exc)
        if self.health is not None:
            self.health.failing(exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_requested.wait(), delay_s)

    def _report(self) -> None:
        """A heartbeat after a step that worked: ok, unless traces still cannot record their rows."""
        if time.monotonic() - self._trace_fault_at_s > max(_TRACE_FAULT_MEMORY_S, 3 * self.config.payload_retry_s):
            self._trace_fault = ""
        if self.health is None:
            return
        if self._trace_fault:
            self.health.failing(self._trace_fault)
        else:
            self.health.ok()

    def _trace_failed(self, exc: BaseException) -> None:
        self.stats.faults += 1
        self._recovery.note(exc)
        self._trace_fault = f"{type(exc).__name__}: {exc}"
        self._trace_fault_at_s = time.monotonic()
        if self.health is not None:
            self.health.failing(exc)

    async def _wait(self) -> None:
        """Until a trace finishes, stop() is called, or it is time to deliver or poll again."""
        timeout_s = self.config.idle_poll_s
        if self._undelivered:
            # Wake when the batch is due, but not before a failed write's retry delay has passed.
            due_in_s = max(
                self.config.delivery_interval_s - self._since_delivery_s(),
                self._delivery_not_before - time.monotonic(),
                0.0,
            )
            timeout_s = min(timeout_s, due_in_s)
        self._wake.clear()  # a trace finishing from now on sets it again
        if not any(t.done() for t in self._in_flight):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout_s)
        for task in [t for t in self._in_flight if t.done()]:
            del self._in_flight[task]

    async def _shut_down(self) -> None:
        if self._in_flight:
            _, pending = await asyncio.wait(list(self._in_flight), timeout=self._stop_timeout_s)
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                # Stopping is not the item's fault: its attempt is not counted.
                try:
                    if await asyncio.to_thread(self.queue.release, self._in_flight[task], count_attempt=False):
                        self.stats.released_on_stop += 1
                except Exception as exc:  # the queue file fails: the lease lapses and the item comes back then
                    self._recovery.note(exc)
            self._in_flight.clear()
        self._delivery_not_before = 0.0
        try:
            await self._deliver(force=True)
        except Exception as exc:  # the rows stay recorded in the queue file; any worker delivers them later
            self._recovery.note(exc)

    def _since_delivery_s(self) -> float:
        return time.monotonic() - self._last_delivery

    # -- judging one trace ---------------------------------------------------------------------------------
    async def _judge(self, lease: Lease) -> None:
        try:
            await self._judge_unguarded(lease)
        except Exception as exc:  # the queue file failed a step of this trace, or a bug: never lost silently —
            self._trace_failed(exc)  # the lease lapses and the item comes back (its attempt counted)
        finally:
            self._wake.set()

    async def _judge_unguarded(self, lease: Lease) -> None:
        config = self.config
        feature = lease.feature
        final_state = ItemState.DONE
        error = ""
        if lease.attempts > config.max_attempts:
            error = f"gave up after {lease.attempts - 1} attempts: {lease.last_error or 'unknown error'}"
            rows = status_rows(
                lease,
                config.metrics,
                Status.SKIPPED,
                error,
                judge_version=self.judge_version,
                feature=feature,
                run_name=config.run_name,
            )
            final_state = ItemState.FAILED
        else:
            try:
                sample = await self.payloads.payload(lease.tenant, lease.trace_id)
            except Exception as exc:  # the store is down or broken: retry later (bounded by max_attempts if broken)
                self.stats.payload_errors += 1
                self._trace_failed(exc)
                source_down = isinstance(exc, SourceUnavailable) or is_transient(exc)
                if source_down:  # the next items would fail alike: lease again when this one is retried
                    self._lease_not_before_s = time.monotonic() + config.payload_retry_s
                await asyncio.to_thread(
                    self.queue.release,
                    lease,
                    retry_in_s=config.payload_retry_s,
                    error=f"payload source: {exc!r}",
                    count_attempt=not source_down,
                )
                return
            if sample is None:
                rows = status_rows(
                    lease,
                    config.metrics,
                    Status.SKIPPED,
                    "payload missing",
                    judge_version=self.judge_version,
                    feature=feature,
                    run_name=config.run_name,
                )
            else:
                described = _with_payload_fields(lease, sample)
                feature = described.feature
                results = await asyncio.gather(*(self._score(m, sample, feature) for m in config.metrics))
                now_ns = time.time_ns()
                rows = [
                    score_row(
                        described,
                        r,
                        judge_version=self.judge_version,
                        feature=feature,
                        run_name=config.run_name,
                        scored_at_ns=now_ns,
                        context_source=sample.context_source,
                    )
                    for r in results
                ]
        status = summary_status(rows)
        recorded = await self._record(Recording(lease, rows, status, final_state, error))
        if not recorded:
            self.stats.lease_lost += 1
            return
        self._undelivered[lease.key] = lease
        self.stats.traces[status] += 1
        for row in rows:
            self.stats.scores[row["status"]] += 1
            self._emit(row, lease)

    async def _record(self, recording: Recording) -> bool:
        """The outbox step, tried again while the queue file cannot take it (full, locked): the rows are judged,
        and paid for, so they wait here — the item stays in flight and the renewer keeps its lease — rather than be
        judged again. A stop cancels the wait after its timeout and puts the item back."""
        failures = 0
        while True:
            try:
                kept = await self._records.record(recording)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                failures += 1
                self._trace_failed(exc)
                await asyncio.sleep(self._recovery.delay_s(failures))
                continue
            self._trace_fault = ""
            return kept

    async def _score(self, metric: str, sample: RagSample, feature: str) -> MetricResult:
        token = current_feature.set(feature)  # the judge charges per-feature budgets to it
        try:
            return await self.judge.score(metric, sample)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a judge bug must not take the worker down or lose the trace
            return MetricResult.failed(metric, Status.LLM_ERROR, f"judge raised {exc!r}")
        finally:
            current_feature.reset(token)

    def _emit(self, row: dict[str, Any], lease: Lease) -> None:
        if self.events is None:
            return
        try:
            self.events.emit(row, span_id=lease.span_id, faithfulness_threshold=self.judge.faithfulness_threshold)
        except Exception:  # telemetry about scores must never cost a score
            log.exception("could not emit an evaluation event")

    # -- delivery ------------------------------------------------------------------------------------------
    async def _deliver(self, *, force: bool) -> None:
        """Write recorded rows to the sink: this worker's, and any a dead worker left behind."""
        now = time.monotonic()
        if now < self._delivery_not_before:
            return
        due = force or self._since_delivery_s() >= self.config.delivery_interval_s
        if not due and len(self._undelivered) * len(self.config.metrics) < self.config.delivery_batch_rows:
            return
        self._last_delivery = now
        while True:
            per_batch = max(1, self.config.delivery_batch_rows // len(self.config.metrics))
            items = await asyncio.to_thread(
                self.queue.take_recorded,
                per_batch,
                self.config.lease_s,
                tokens={lease.token for lease in self._undelivered.values()},
            )
            if not items:
                return
            if not await self._write(items):
                return
            if len(items) < per_batch:
                return

    async def _write(self, items: Sequence[Recorded]) -> bool:
        rows = [row for item in items for row in item.rows]
        try:
            await asyncio.to_thread(self.sink.write, rows)
        except Exception as exc:
            self.stats.delivery_errors += 1
            if self.stats.delivery_errors == 1 or self.stats.delivery_errors % 100 == 0:
                log.warning("score sink failed (%d times so far): %r", self.stats.delivery_errors, exc)
            await asyncio.to_thread(self.queue.return_recorded, items)
            for item in items:  # returned items are anyone's now; they come back through take_recorded
                self._undelivered.pop(item.key, None)
            self._delivery_not_before = time.monotonic() + self.config.delivery_retry_s
            return False
        await asyncio.to_thread(self.queue.delivered, items)
        self.stats.rows_delivered += len(rows)
        for item in items:
            self._undelivered.pop(item.key, None)
        return True

    # -- leases --------------------------------------------------------------------------------------------
    async def _renew_leases(self) -> None:
        interval_s = self.config.lease_s / 3
        while True:
            await asyncio.sleep(interval_s)
            held = [*self._in_flight.values(), *self._undelivered.values()]
            if held:
                try:
                    await asyncio.to_thread(self.queue.renew, held, self.config.lease_s)
                except Exception as exc:  # tried again next interval; a lease lost meanwhile costs a re-judgement
                    self._trace_failed(exc)


def _with_payload_fields(lease: Lease, sample: RagSample) -> Lease:
    """Feature, sampling, eval-run and release fields the queue item lacks, taken from a payload that has them (a
    stored payload carries its feature, eval run, release, sampling reason and inclusion probability; a bare
    RagSample does not)."""
    feature = lease.feature or str(getattr(sample, "feature", "") or "")
    eval_run = lease.eval_run or str(getattr(sample, "eval_run", "") or "")
    release = lease.release or str(getattr(sample, "release", "") or "")
    reason = lease.sampling_reason or str(getattr(sample, "sampling_reason", "") or "")
    probability = lease.inclusion_probability
    if probability is None:
        stored = getattr(sample, "inclusion_probability", None)
        probability = float(stored) if stored is not None else None
    return dataclasses.replace(
        lease,
        feature=feature,
        eval_run=eval_run,
        release=release,
        sampling_reason=reason,
        inclusion_probability=probability,
    )
