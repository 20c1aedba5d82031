"""What happens to a decided trace: a kept one has its captured text copied into `payloads`, with its sampling
reasons and inclusion probability; every decision is counted per outcome and per trigger.

Kept traces are copied in batches, at most once per `copy_interval_s` (or sooner when `copy_batch` wait): one
copy is a large INSERT … SELECT whose planning costs the same whatever it copies, so copying on every sampler
tick would spend the store's time on planning. Two seconds and 8,000 traces: one copy of 8,000 kept traces takes
much less CPU than four copies of 2,000 (docs/results.md), and a kept trace
waits at most a second longer for its judge than with one-second copies. Copies that fail on a retryable store
error wait (bounded) and are retried with the next batch; copying is idempotent (payloads collapse on (tenant,
trace_id)), so a retry or a late span's re-copy never duplicates.

Whole conversations. After a copy, the earlier turns of the kept traces that are follow-ups (`ragmon.conversation`)
are copied too, from `span_content` (which holds every trace's text for a day), with the sampling reason
`conversation` (`Store.copy_conversation_turns`): the turns the follow-up depends on stay readable beside it for as
long as it is. They are context, not a sample: the sampler's counts (kept share) do not count them, the judges do
not judge them (neither queued here nor by the start-up catch-up), so every estimate weighted by inclusion
probability reads what it read before. A copy of them that fails is counted and not retried: the judge reads a
turn's earlier turns from `span_content` too while it holds them.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from ragmon.sampling import DecidedTrace, Decision
from ragmon.sinks.errors import StoreError
from ragmon.sinks.for_sampler import SamplerStore

log = logging.getLogger("ragmon.agent")


class DecisionSink:
    def __init__(
        self,
        store: SamplerStore,
        *,
        max_waiting: int = 100_000,
        copy_interval_s: float = 2.0,
        copy_batch: int = 8_000,
        clock: Callable[[], float] = time.monotonic,
        keep_conversations: bool = True,
    ) -> None:
        self.store = store
        self.keep_conversations = keep_conversations  # copy a kept follow-up's earlier turns (see the module)
        self.counts: Counter[str] = Counter()
        self.copy_interval_s = copy_interval_s
        self.copy_batch = copy_batch
        self._clock = clock
        self._waiting: deque[dict[str, Any]] = deque(maxlen=max_waiting)
        self._copied_at = float("-inf")

    def __call__(self, decided: list[DecidedTrace]) -> list[dict[str, Any]]:
        """Count `decided` and queue its kept traces; copy what waits when a batch is full or the interval has
        passed, and return the kept traces copied now. Call it on every sampler tick, even with nothing decided, so
        waiting copies are not held back."""
        for trace in decided:
            self.counts[trace.decision + ":" + trace.decided_by] += 1
            if trace.decision is Decision.KEEP:
                if len(self._waiting) == self._waiting.maxlen:
                    self.counts["payload_copies_dropped:waiting_full"] += 1
                self._waiting.append(
                    {
                        "tenant": trace.tenant,
                        "trace_id": trace.trace_id,
                        "reasons": list(trace.reasons),
                        "probability": trace.probability,
                        "first_ingest_seq": trace.first_ingest_seq,
                        "root_span_id": trace.root_span_id,
                    }
                )
        if len(self._waiting) >= self.copy_batch or self._clock() - self._copied_at >= self.copy_interval_s:
            return self.flush()
        return []

    def flush(self) -> list[dict[str, Any]]:
        """Copy every waiting kept trace now (also at shutdown); returns those copied. The ones a retryable store
        error refused stay waiting; the ones the store refused for good are counted and dropped."""
        if not self._waiting:
            return []
        self._copied_at = self._clock()
        kept = list(self._waiting)
        try:
            self.store.copy_payloads(kept)
        except StoreError as exc:
            if exc.retryable:
                self.counts["payload_copy_retries"] += 1
                return []  # they stay waiting
            self.counts["payload_copies_failed"] += len(kept)
            log.error("store refused to copy %d payloads: %s", len(kept), exc)
            kept = []
        else:
            self.counts["payloads_copied"] += len(kept)
            self._copy_conversations(kept)
        self._waiting.clear()
        return kept

    def _copy_conversations(self, kept: list[dict[str, Any]]) -> None:
        if not self.keep_conversations or not kept:
            return
        try:
            self.counts["conversation_turns_copied"] += self.store.copy_conversation_turns(kept)
        except StoreError as exc:
            self.counts["conversation_copies_failed"] += 1
            log.warning("could not copy the earlier turns of %d kept traces: %s", len(kept), exc)

    def low_water_seq(self) -> int | None:
        """The oldest first ingest seq of a kept trace still waiting for its copy (None when none waits): the
        store writer keeps the sampler cursor before it, so a kill -9 before the copy re-decides the trace."""
        return min((int(row["first_ingest_seq"]) for row in self._waiting if row["first_ingest_seq"]), default=None)

    @property
    def waiting(self) -> int:
        return len(self._waiting)
