"""The tail sampler's decisions counted per minute into the store (`sampling_1m`), for the kept share by reason.

`ragmon report` and the dashboard read the store, not the agent's memory, so the share they show covers every
agent writing to the store and survives restarts. A kept trace counts under its first reason (the policies run in
configured order, error first by default), so the shares by reason add up to the kept share; late fragments of a
decided trace are not decisions and are not counted.

Counts are written at most once per `write_interval_s`; a write the store refuses for now waits for the next one
(counts merge, so what waits is bounded by minutes × keys, not by traffic). What is waiting at a crash is lost and
traces the restarted sampler decides again are counted again: a few seconds of counts, which is why these figures
are shares for a dashboard, not an audit of every trace (the judge queue and `payloads` are exact).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

from ragmon.sampling import DecidedTrace, Decision
from ragmon.sinks.errors import StoreError
from ragmon.sinks.for_sampler import SamplerStore

log = logging.getLogger("ragmon.agent")

# (minute start in epoch seconds, tenant, feature, eval run ('' = production), outcome, reason)
_Key = tuple[int, str, str, str, str, str]


def outcome_and_reason(trace: DecidedTrace) -> tuple[str, str]:
    """How a decision is filed: kept or dropped under its first reason, skipped under 'budget' when the budget
    alone refused it (else '')."""
    if trace.decision is Decision.SKIP:
        return "skip", "budget" if trace.reasons == ("budget",) else ""
    return trace.decision.value, trace.reasons[0] if trace.reasons else ""


class SamplingTally:
    def __init__(
        self,
        store: SamplerStore,
        *,
        write_interval_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.write_interval_s = write_interval_s
        self._clock = clock
        self._wall_clock = wall_clock
        self._waiting: Counter[_Key] = Counter()
        self._written_at = float("-inf")
        self.counts: Counter[str] = Counter()  # rows_written, write_retries, rows_lost

    def __call__(self, decided: list[DecidedTrace]) -> None:
        """Count `decided`; write what waits once the interval has passed (call it on every sampler tick)."""
        if decided:
            minute = int(self._wall_clock()) // 60 * 60
            for trace in decided:
                if trace.decided_by != "late":
                    key = (minute, trace.tenant, trace.feature, trace.eval_run, *outcome_and_reason(trace))
                    self._waiting[key] += 1
        if self._clock() - self._written_at >= self.write_interval_s:
            self.flush()

    def flush(self) -> None:
        """Write every waiting count now (also at shutdown)."""
        self._written_at = self._clock()
        if not self._waiting:
            return
        rows = [
            {
                "minute": datetime.fromtimestamp(minute, UTC),
                "tenant": tenant,
                "feature": feature,
                "eval_run": eval_run,
                "outcome": outcome,
                "reason": reason,
                "traces": n,
            }
            for (minute, tenant, feature, eval_run, outcome, reason), n in sorted(self._waiting.items())
        ]
        try:  # a token of its own: equal counts of one minute written twice are two writes, not a re-send
            self.store.insert_sampling_counts(rows, dedup_token=uuid.uuid4().hex)
        except StoreError as exc:
            if exc.retryable:
                self.counts["write_retries"] += 1
                return  # they stay waiting, and merge with what comes
            self.counts["rows_lost"] += len(rows)
            log.error("store refused %d sampling count rows: %s", len(rows), exc)
        else:
            self.counts["rows_written"] += len(rows)
        self._waiting.clear()
