"""What the durable path costs: the same OTLP stream stored with and without the write-ahead log and the sampler.

The rate is spans over the time until every span is stored (queryable). The sampler works beside the inserts, so
the run also reports when the last batch was sampled and decided: that tail shows the sampler kept up, and is
the part of its work a finite run cannot overlap with a next insert.

Both variants run the agent's own intake and store writer in this process against the embedded store (a fresh
database each run, same engine), alternating, so the machine's noise hits both alike:

- durable: requests appended to the write-ahead log (fsync "interval") before they count as accepted; the
  sampling thread feeds the store's per-trace fragments of each stored range to the tail sampler, which decides
  and copies kept payloads;
- bare: an in-memory stand-in for the log and no sampler — the cheapest correct way to store the same spans.

    python benchmarks/durable_path.py [--requests 400] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.ingest import _requests, _template  # noqa: E402
from ragmon.pipeline.decisions import DecisionSink  # noqa: E402
from ragmon.pipeline.intake import WalIntake  # noqa: E402
from ragmon.pipeline.sampling_loop import SamplingLoop, StoredRanges  # noqa: E402
from ragmon.pipeline.wal import Position, Record, WriteAheadLog  # noqa: E402
from ragmon.pipeline.writer import StoreWriter  # noqa: E402
from ragmon.sampling import Sampler  # noqa: E402
from ragmon.sampling.trace import FRAGMENT_COLUMNS  # noqa: E402


class MemoryLog:
    """The write-ahead log's interface with nothing written anywhere: the durable path switched off."""

    def __init__(self) -> None:
        self._offset = 0
        self.bytes_total = 0

    def append(self, body: bytes, tenant: str = "", on_written: Callable[[Position], None] | None = None) -> Position:
        self._offset += len(body)
        position = Position(1, self._offset)
        if on_written is not None:
            on_written(position)
        return position

    @property
    def durable_end(self) -> Position:
        return Position(1, self._offset)

    def replay(self, after: Position | None = None) -> Iterator[Record]:
        return iter(())

    def trim(self, safe: Position) -> int:
        return 0

    def close(self) -> None:
        return None


class NoSampler:
    """No tail sampling: nothing is decided, nothing is asked of the store after an insert."""

    traces_held = 0

    def ingest(self, fragments: Any) -> list[Any]:
        return []

    def tick(self) -> list[Any]:
        return []

    def flush(self) -> list[Any]:
        return []

    def low_water_seq(self) -> None:
        return None


class KeepCopies:
    """What the pipeline does with decisions, without judging: kept traces' text copied to payloads."""

    def __init__(self, store: Any) -> None:
        self.sink = DecisionSink(store)

    def decided(self, traces: list[Any]) -> None:
        self.sink(traces)

    def undecided_low_water(self) -> int | None:
        return self.sink.low_water_seq()


class Discard:
    def decided(self, traces: list[Any]) -> None:
        return None

    def undecided_low_water(self) -> None:
        return None


class NoFragments:
    def __init__(self, store: Any) -> None:
        self._store = store

    def trace_fragment_table(self, seq_from: int, seq_to: int) -> pa.Table:
        return pa.table({name: [] for name in FRAGMENT_COLUMNS})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _open(engine_dir: Path) -> Any:
    from ragmon.sinks import open_store, otlp_views

    store = open_store(engine_dir, database=f"durable_{uuid.uuid4().hex[:8]}")
    otlp_views.install(store)
    return store


def measure(
    variant: str, bodies: list[bytes], engine_dir: Path, work: Path, spans_per_request: int
) -> tuple[float, float]:
    """(seconds until every span is stored, seconds until it is also sampled and decided)."""
    store = _open(engine_dir)
    try:
        if variant == "durable":
            log: Any = WriteAheadLog(work / f"wal-{uuid.uuid4().hex[:6]}", fsync="interval")
            sampler: Any = Sampler()
            writer_store: Any = store
            hand_off: Any = KeepCopies(store)
        else:
            log, sampler, writer_store, hand_off = MemoryLog(), NoSampler(), NoFragments(store), Discard()
        intake = WalIntake(log, max_backlog_bytes=1 << 40)  # all requests are queued up front: keep them in memory
        state = work / f"state-{uuid.uuid4().hex[:6]}"
        ranges = StoredRanges()
        writer = StoreWriter(intake, log, writer_store, state, ranges=ranges)
        sampling = SamplingLoop(writer_store, sampler, hand_off, ranges, state, writer.log_id)
        writer.start()  # the writer and sampling threads, as in the agent
        sampling.start()
        started = time.perf_counter()
        for body in bodies:
            intake.consume("default", body, spans_per_request)
        while intake.backlog[0]:  # a request leaves the backlog once its batch is stored
            time.sleep(0.002)
        stored = time.perf_counter() - started
        writer.stop(timeout_s=3600)
        sampling.stop(timeout_s=3600)  # returns once everything stored is also sampled and decided
        if variant == "durable":
            hand_off.sink.flush()  # the kept traces' last payload copies, as the agent does when it stops
        done = time.perf_counter() - started
        log.close()
        return stored, done
    finally:
        store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spans-per-request", type=int, default=512)
    args = parser.parse_args(argv)
    bodies = _requests(_template(args.spans_per_request), args.requests, seed=3)
    spans = args.requests * args.spans_per_request
    times: dict[str, list[tuple[float, float]]] = {"bare": [], "durable": []}
    with tempfile.TemporaryDirectory(prefix="ragmon-durable-") as tmp:
        engine = Path(tmp) / "engine"
        for round_index in range(args.rounds):
            order = ("bare", "durable") if round_index % 2 == 0 else ("durable", "bare")
            for variant in order:
                times[variant].append(measure(variant, bodies, engine, Path(tmp), args.spans_per_request))
    bare = statistics.median(stored for stored, _ in times["bare"])
    durable = statistics.median(stored for stored, _ in times["durable"])
    durable_done = statistics.median(done for _, done in times["durable"])
    print(f"{spans:,} spans in {args.requests} requests, {args.rounds} alternating rounds, medians")
    print(f"  bare (no log, no sampler):   stored in {bare:6.2f} s  {spans / bare:10,.0f} spans/s")
    print(f"  durable (log + sampler):     stored in {durable:6.2f} s  {spans / durable:10,.0f} spans/s")
    print(f"    ... and sampled, decided, kept payloads copied after {durable_done:6.2f} s")
    print(f"  durable path costs {100 * (1 - bare / durable):.1f}% of the ingest throughput (goal ≤ 20%);")
    print(
        f"  {100 * (1 - bare / durable_done):.1f}% counting the sampling of the last batch, which a finite run "
        "waits for and a steady stream overlaps with the next inserts"
    )


if __name__ == "__main__":
    main()
