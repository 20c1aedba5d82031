"""The store and sampling stages wired as the pipeline wires them, without the rest of the agent: for tests of one
stage's behaviour (a store outage, spilled requests) that need the other beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragmon.health import HealthRegistry
from ragmon.pipeline.intake import WalIntake
from ragmon.pipeline.sampling_loop import SamplingLoop, StoredRanges
from ragmon.pipeline.wal import WriteAheadLog
from ragmon.pipeline.writer import StoreWriter
from ragmon.sampling import DecidedTrace, Sampler


class DiscardDecisions:
    """Where decided traces go when nothing after the sampler is under test: nowhere, and nothing waits for a copy."""

    def decided(self, traces: list[DecidedTrace]) -> None:
        return None

    def undecided_low_water(self) -> int | None:
        return None


def store_and_sample(
    intake: WalIntake,
    wal: WriteAheadLog,
    store: Any,
    state_dir: Path,
    *,
    sampler: Sampler | None = None,
    health: HealthRegistry | None = None,
    **writer_options: Any,
) -> tuple[StoreWriter, SamplingLoop]:
    ranges = StoredRanges()
    writer = StoreWriter(intake, wal, store, state_dir, ranges=ranges, health=health, **writer_options)
    sampling = SamplingLoop(
        store, sampler or Sampler(), DiscardDecisions(), ranges, state_dir, writer.log_id, health=health
    )
    return writer, sampling
