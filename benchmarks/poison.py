"""Poison requests: stored spans/s with one poison request every 20 against none, measured side by side.

A poison request is one upb parses (so a receiver acknowledges it) and ClickHouse's Protobuf format refuses ("Protobuf
messages are corrupted"): here a good request with an unknown field sent as a non-empty group appended (before issue 37
the writer re-inserted each rejected batch one request at a time, and stored a small fraction of the clean rate:
docs/results.md). Two paths, each clean and poisoned, alternated over `--rounds` (which goes first changes every
round), medians and their ratio:

- receiver: every body goes through the receivers' `ExportHandler` (decompress, parse, validate: a non-canonical
  body is kept as upb's re-encoding) into the intake, and the agent's store writer stores it;
- log: the bodies go into the intake as they are, as a log written by an older agent would hold them: the
  writer re-encodes a rejected batch as the receivers now would and stores it in one more insert;
- damaged: as log, but each poison body is one neither upb nor the engine can read (a record damaged on disk):
  every rejected batch is searched by halves (`StoreWriter._bisect`) and the bad requests quarantined. The
  backstop's cost, shown for the record; the goal is about the first two.

The writer runs its own thread against the embedded store (a fresh database per run, same engine), with no
write-ahead log and no sampler (`durable_path.py`'s "bare" variant): what is measured is the storing. The rate is
the spans in `spans` after the run over the time until the intake's backlog is empty.

    python benchmarks/poison.py [--requests 400] [--spans-per-request 64] [--poison-every 20] [--rounds 3]
                                [--paths receiver,log,damaged]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))  # ingest.py imports a module beside it

from benchmarks.durable_path import MemoryLog  # noqa: E402
from benchmarks.ingest import _requests, _template  # noqa: E402
from ragmon.pipeline.intake import WalIntake  # noqa: E402
from ragmon.pipeline.writer import StoreWriter  # noqa: E402
from ragmon.sampling.trace import FRAGMENT_COLUMNS  # noqa: E402

# An unknown field 7 sent as a group holding one varint: upb skips it, the engine's reader refuses the message.
POISON_TAIL = b"\x3b\x08\x01\x3c"
# Field 7 with wire type 6, which does not exist: neither upb nor the engine reads the body (a damaged record).
DAMAGED_TAIL = b"\x3e\x01"
PATHS = ("receiver", "log", "damaged")


class CountingStore:
    """The embedded store, counting OTLP inserts; no per-trace fragments (no sampler runs)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.inserts = 0

    def insert_otlp(self, envelopes: Sequence[bytes], dedup_token: str) -> None:
        self.inserts += 1
        self._store.insert_otlp(envelopes, dedup_token)

    def trace_fragment_table(self, seq_from: int, seq_to: int) -> Any:
        import pyarrow as pa

        return pa.table({name: [] for name in FRAGMENT_COLUMNS})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@dataclass(frozen=True)
class Run:
    seconds: float  # until the intake's backlog is empty: every request stored or quarantined
    spans_stored: int  # rows in `spans` afterwards
    inserts: int
    quarantined: int


def poisoned(bodies: list[bytes], every: int, tail: bytes = POISON_TAIL) -> list[bytes]:
    """`bodies` with `tail` appended to every `every`-th one (the last of each run of `every`)."""
    return [body + tail if (i + 1) % every == 0 else body for i, body in enumerate(bodies)]


def spans_in(body: bytes) -> int:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest.FromString(body)
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


def measure(path: str, bodies: list[bytes], spans_per_request: int, engine_dir: Path, work: Path) -> Run:
    from ragmon.collectors.export_handler import ExportHandler
    from ragmon.sinks import open_store, otlp_views

    store = open_store(engine_dir, database=f"poison_{uuid.uuid4().hex[:8]}")
    otlp_views.install(store)
    try:
        counting = CountingStore(store)
        log: Any = MemoryLog()  # the log's interface, nothing written
        intake = WalIntake(log, max_backlog_bytes=1 << 40)  # all requests are queued up front: keep them in memory
        state = work / f"state-{uuid.uuid4().hex[:6]}"
        writer = StoreWriter(intake, log, counting, state)
        writer.start()
        handler = ExportHandler(intake, max_body_bytes=1 << 30)
        started = time.perf_counter()
        for body in bodies:
            if path == "receiver":  # the others go into the intake as logged
                handler.export_body(body, encoding="protobuf", tenant="default")
            else:
                intake.consume("default", body, spans_per_request)
        while intake.backlog[0]:  # a request leaves the backlog once its batch is stored (or quarantined)
            time.sleep(0.002)
        seconds = time.perf_counter() - started
        writer.stop(timeout_s=600)
        stored = int(store.read("SELECT count() AS n FROM spans")[0]["n"])
        return Run(seconds, stored, counting.inserts, writer.counts["requests_quarantined"])
    finally:
        store.close()


def run_rounds(
    paths: Sequence[str], requests: int, spans_per_request: int, every: int, rounds: int, engine_dir: Path, work: Path
) -> dict[tuple[str, str], list[Run]]:
    """Clean and poisoned runs of each path, alternated: {(path, "clean" | "poisoned"): runs}."""
    clean = _requests(_template(spans_per_request), requests, seed=3)
    print(f"{spans_in(clean[0])} spans a request (the template's whole traces)", flush=True)
    variants = {"clean": clean, "poisoned": poisoned(clean, every)}
    damaged = {"clean": clean, "poisoned": poisoned(clean, every, DAMAGED_TAIL)}
    runs: dict[tuple[str, str], list[Run]] = {(p, v): [] for p in paths for v in variants}
    measure(paths[0], clean, spans_per_request, engine_dir, work)  # warm-up, not counted: the engine's first inserts
    for round_index in range(rounds):
        order = list(variants) if round_index % 2 == 0 else list(reversed(variants))
        for path in paths:
            bodies = damaged if path == "damaged" else variants
            for variant in order:
                runs[(path, variant)].append(measure(path, bodies[variant], spans_per_request, engine_dir, work))
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--spans-per-request", type=int, default=64)
    parser.add_argument("--poison-every", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--paths", default=",".join(PATHS), help="any of receiver, log, damaged (comma-separated)")
    args = parser.parse_args(argv)
    paths = [p for p in args.paths.split(",") if p]
    if unknown := set(paths) - set(PATHS):
        parser.error(f"unknown path(s) {sorted(unknown)}; choose from {PATHS}")
    with tempfile.TemporaryDirectory(prefix="ragmon-poison-") as tmp:
        runs = run_rounds(
            paths,
            args.requests,
            args.spans_per_request,
            args.poison_every,
            args.rounds,
            Path(tmp) / "engine",
            Path(tmp),
        )
    poison = args.requests // args.poison_every
    print(
        f"{args.requests} requests, {poison} of them poison (one every "
        f"{args.poison_every}), {args.rounds} alternating rounds, medians"
    )
    for path in paths:
        rates = {}
        for variant in ("clean", "poisoned"):
            these = runs[(path, variant)]
            rates[variant] = statistics.median(r.spans_stored / r.seconds for r in these)
            print(
                f"  {path:8s} {variant:8s} {rates[variant]:10,.0f} spans/s stored  "
                f"({statistics.median(r.seconds for r in these):6.2f} s, "
                f"{statistics.median(r.inserts for r in these):4.0f} inserts, "
                f"{statistics.median(r.spans_stored for r in these):8,.0f} spans stored, "
                f"{statistics.median(r.quarantined for r in these):3.0f} requests quarantined)"
            )
        goal = "" if path == "damaged" else "  (goal >= 0.5x)"
        print(f"  {path:8s} poisoned / clean: {rates['poisoned'] / rates['clean']:.2f}x{goal}")


if __name__ == "__main__":
    main()
