"""What happens to a decided trace: a kept one has its captured text copied into `payloads`, with its sampling
reasons and inclusion probability; every decision is counted per outcome and per trigger.

Copies that fail on a retryable store error wait (bounded) and are retried with the next decisions; copying is
idempotent (payloads collapse on (tenant, trace_id)), so a retry or a late span's re-copy never duplicates.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, Protocol

from ragmon.agent.sampling import DecidedTrace, Decision
from sinks.errors import StoreError

log = logging.getLogger("ragmon.agent")


class PayloadStore(Protocol):
    def copy_payloads(self, kept: list[dict[str, Any]]) -> int: ...


class DecisionSink:
    def __init__(
        self,
        store: PayloadStore,
        *,
        max_waiting: int = 100_000,
        on_copied: Callable[[list[dict[str, Any]]], object] | None = None,
    ) -> None:
        self.store = store
        self.on_copied = on_copied  # e.g. enqueue the kept traces for the judges
        self.counts: Counter[str] = Counter()
        self._waiting: deque[dict[str, Any]] = deque(maxlen=max_waiting)

    def __call__(self, decided: list[DecidedTrace]) -> None:
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
                    }
                )
        self.flush()

    def flush(self) -> None:
        if not self._waiting:
            return
        kept = list(self._waiting)
        try:
            self.store.copy_payloads(kept)
        except StoreError as exc:
            if exc.retryable:
                self.counts["payload_copy_retries"] += 1
                return  # they stay waiting
            self.counts["payload_copies_failed"] += len(kept)
            log.error("store refused to copy %d payloads: %s", len(kept), exc)
        else:
            self.counts["payloads_copied"] += len(kept)
            if self.on_copied is not None:
                try:
                    self.on_copied(kept)
                except Exception:  # judging is downstream of storage: its failure must not lose decisions
                    self.counts["judge_enqueue_errors"] += len(kept)
                    log.exception("could not enqueue %d kept traces for judging", len(kept))
        self._waiting.clear()

    @property
    def waiting(self) -> int:
        return len(self._waiting)
