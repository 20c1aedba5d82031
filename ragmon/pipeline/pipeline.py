"""A span's path through the agent, from the receiver to a score, and what each hand-off guarantees.

1. **Receive** (`ragmon.collectors`: `HttpReceiver`, `GrpcReceiver`). A request is authenticated on its head, read
   within its limits, decoded and checked (`collectors/validate.py`: invalid spans are left out and said so).
2. **Log** (`intake.WalIntake` over `wal.WriteAheadLog`). The request is appended to the write-ahead log before the
   receiver answers: *acknowledged means durable* (to the `agent.fsync` policy). The intake queues it in memory
   for the writer, or only its position once the backlog passes its share of memory.
3. **Store** (`writer.StoreWriter`, its own thread). A batch of logged requests is journaled (`batch.pending`), then
   inserted with a deduplication token naming its range; the engine decodes and normalises every span. Only then
   does the store cursor move and the log get trimmed: a crash re-sends the same range under the same token, and
   the store drops what had landed. A request the store refuses for good is quarantined, never retried forever.
4. **Sample** (`sampling_loop.SamplingLoop`, its own thread, fed through `sampling_loop.StoredRanges`). The stored
   ranges' per-trace fragments go to the tail sampler (`ragmon.sampling`), which decides each trace once its root
   and grace period are in. The sampler cursor (`sampler.cursor`) never passes a trace still held, nor a decided
   one whose consequence (step 5) is not durable: after a crash such a trace is decided again, not lost.
5. **Keep** (`decided` below → `decisions.DecisionSink`). Every decision is counted (`sampling_tally`); a kept
   trace's text (question, passages, answer) is copied into `payloads` with its reasons and inclusion probability,
   in batches. Copies are idempotent (`payloads` collapses on tenant and trace), so deciding a trace twice is safe.
6. **Queue for judging** (`decided` below → `judging.Judging.enqueue`). Copied traces enter the durable judge queue
   (`judges/queue.py`). A kill -9 between the copy and the queue is repaired at the next start: the catch-up queues
   every kept trace that has a payload but neither a queue item nor a score (`judging.py`).
7. **Roll up** (`rollups.Rollups`, driven by the sampling loop). Ranges whose traces are all decided enter the
   per-minute rollups that `ragmon report` and the drift rules read, exactly once (journal and token, as in 3).
   Then (`questions.QuestionStage`, on its own thread: `question_thread.py`) each rolled-up range's questions are
   grouped into recurring questions (`ragmon.questions`): `trace_questions` and `question_groups`, exactly once
   likewise; sampling never waits for it.
8. **Judge** (`judging.JudgeService` → `judges/worker.py`). A worker leases queued traces, reads their payloads,
   scores them with the configured judge and writes `scores`; a lease that expires (a worker killed) is judged
   again, and fencing tokens keep it to one score.

`Pipeline` builds steps 2-8 and runs them; the agent (`ragmon/agent/agent.py`) wires the receivers to its `intake`
and the API to the store. `stop` keeps the order the guarantees need: the writer stores what was acknowledged, the
sampler decides what it holds, kept traces are copied and queued, and only then does the sampler cursor move past
them.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ragmon.data_dir import STATE_DIR, WAL_DIR
from ragmon.health import HealthRegistry
from ragmon.pipeline.decisions import DecisionSink
from ragmon.pipeline.intake import IngestSeq, WalIntake
from ragmon.pipeline.judging import Judging
from ragmon.pipeline.questions import QuestionStage
from ragmon.pipeline.sampling_loop import SamplingLoop, StoredRanges
from ragmon.pipeline.sampling_tally import SamplingTally
from ragmon.pipeline.wal import WriteAheadLog
from ragmon.pipeline.writer import StoreWriter
from ragmon.questions import QuestionGrouper, choose
from ragmon.sampling import DecidedTrace, Sampler
from ragmon.settings import Settings
from ragmon.sinks import Store

log = logging.getLogger("ragmon.agent")


class Pipeline:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        sampler: Sampler,
        data_dir: Path,
        *,
        backlog_bytes: int,
        insert_batch_bytes: int,
        health: HealthRegistry,
    ) -> None:
        agent = settings.agent
        seq = IngestSeq(agent.instance)
        state_dir = data_dir / STATE_DIR
        self.counts: Counter[str] = Counter()
        # 2. log
        self.wal = WriteAheadLog(
            data_dir / WAL_DIR,
            fsync=agent.fsync,
            fsync_interval_ms=agent.fsync_interval_ms,
            max_bytes=agent.wal_max_bytes,
        )
        self.intake = WalIntake(self.wal, max_backlog_bytes=backlog_bytes)
        try:
            # 8. judge: the queue opens (and catches up) before anything is decided; kept traces are queued whoever
            # judges them (this agent, or `ragmon judge` workers)
            self.judging = Judging.start(settings.judge, store, data_dir, health=health)
            # 5. keep
            self.decisions = DecisionSink(store)
            self.tally = SamplingTally(store)
            # 3. store, handing each stored range to 4. sample (which rolls up, 7)
            ranges = StoredRanges()
            self.writer = StoreWriter(
                self.intake,
                self.wal,
                store,
                state_dir,
                ranges=ranges,
                seq=seq,
                batch_max_bytes=insert_batch_bytes,
                health=health,
            )
            self.sampler = sampler
            # 7b. group questions: after the roll-up, the same ranges (questions.py)
            questions = _question_stage(settings, store, state_dir, seq, self.writer.log_id)
            self.sampling = SamplingLoop(
                store, sampler, self, ranges, state_dir, self.writer.log_id, seq=seq, health=health, questions=questions
            )
        except BaseException:
            if (judging := getattr(self, "judging", None)) is not None:
                judging.stop()
            self.wal.close()
            raise

    def start(self) -> Pipeline:
        """Finish what a crash interrupted (a journaled batch, traces the sampler had not decided), then run."""
        stored = self.writer.recover()
        self.sampling.recover(stored)
        self.writer.start()
        self.sampling.start()
        return self

    # -- 5 and 6: what the sampler decided ---------------------------------------------------------------------
    def decided(self, traces: list[DecidedTrace]) -> None:
        """Every decision counted; kept traces copied to `payloads` (in batches), then queued for judging."""
        copied = self.decisions(traces)
        self._queue_for_judging(copied)
        self.tally(traces)

    def copy_kept_now(self) -> None:
        """Copy and queue the kept traces waiting for their batch now, not at the next interval (the demo's last
        step; `stop` does it too)."""
        self._queue_for_judging(self.decisions.flush())

    def undecided_low_water(self) -> int | None:
        """The oldest kept trace whose text is not copied yet: the sampler cursor stays before it (step 4)."""
        return self.decisions.low_water_seq()

    def _queue_for_judging(self, copied: list[dict[str, Any]]) -> None:
        """Queue traces whose payload was just copied, each with its root span id (the sampler's fragment query
        reads it beside the root's duration, at no extra query): the span its evaluation events are parented to."""
        if not copied:
            return
        roots = {(row["tenant"], row["trace_id"]): row["root_span_id"] for row in copied if row.get("root_span_id")}
        try:
            self.judging.enqueue(copied, roots)
        except Exception:  # judging is downstream of storage: its failure must not lose decisions (catch-up, 6)
            self.counts["judge_enqueue_errors"] += len(copied)
            log.exception("could not enqueue %d kept traces for judging", len(copied))

    # -- state ---------------------------------------------------------------------------------------------
    @property
    def settled(self) -> bool:
        """Everything stored has been sampled and rolled up (for whoever waits for the pipeline: the demo, tests)."""
        return self.sampling.settled

    def stop(self, timeout_s: float = 10.0) -> None:
        """Store what was acknowledged (within the timeout), decide what the sampler holds, copy and queue the kept
        traces, move the sampler cursor past them, stop judging, close the log."""
        deadline = time.monotonic() + timeout_s
        self.writer.stop(timeout_s)
        self.sampling.stop(deadline - time.monotonic())
        self.copy_kept_now()
        self.sampling.save_cursor_after_decisions()
        try:
            self.tally.flush()
        except Exception:  # the store went away: a few seconds of counts, said in the log
            log.exception("could not write the last sampling counts")
        self.judging.stop(timeout_s)
        self.wal.close()


def _question_stage(
    settings: Settings, store: Store, state_dir: Path, seq: IngestSeq, log_id: str
) -> QuestionStage | None:
    """The question stage as `agent.questions` says (None: off)."""
    config = settings.agent.questions
    if not config.enabled:
        return None
    encoder = choose(
        config.grouper, lexical_threshold=config.lexical_threshold, minilm_threshold=config.minilm_threshold
    )
    grouper = QuestionGrouper(encoder, max_groups=config.max_groups_per_feature, cache_size=config.cache_size)
    return QuestionStage(
        store,
        grouper,
        state_dir,
        seq,
        log_id,
        ranges_per_run=config.ranges_per_run,
        max_behind_ranges=config.max_behind_ranges,
    )
