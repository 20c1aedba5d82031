"""The tail sampler's own CPU per trace: the per-trace path against the columnar path, on the same batches.

Each stored batch reaches the sampler as the table `Store.trace_fragment_table` returns. The per-trace path turns it
into Python lists and one `TraceFragment` per trace (`TraceFragment.from_columns`), then `ingest` and `tick`; the
columnar path is `ingest_table` and `tick`. Both then hand their decisions to a `DecisionSink` (its store copies
nothing). Traces are whole (root included, five spans), as in `benchmarks/ingest.py`; about one in eight is kept
(the default policies: slow against a p95, unhealthy retrieval, a 5 % baseline). Process CPU time, median of rounds
that alternate the two paths:

    python benchmarks/sampler.py [--traces 100000] [--batch 16000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragmon.pipeline.decisions import DecisionSink
from ragmon.sampling import Sampler, SamplerConfig, TraceFragment

_STAGES = ("request", "embed", "search", "rerank", "generate")
_FEATURES = ("docs-qa", "support-chat", "search-assist")


def _batch(rng: random.Random, n: int) -> pa.Table:
    return pa.table(
        {
            "tenant": ["default"] * n,
            "trace_id": [f"{rng.getrandbits(128):032x}" for _ in range(n)],
            "feature": [rng.choice(_FEATURES) for _ in range(n)],
            "user": [f"u{rng.randrange(500)}" for _ in range(n)],
            "span_count": pa.array([5] * n, pa.uint64()),
            "error_count": pa.array([0] * n, pa.uint64()),
            "root_seen": pa.array([1] * n, pa.uint8()),
            "root_duration_ms": [rng.uniform(5, 10) for _ in range(n)],
            "stage_max_ms": pa.array(
                [[(s, rng.uniform(0.5, 3.0)) for s in _STAGES] for _ in range(n)], pa.map_(pa.string(), pa.float64())
            ),
            "min_top1_score": [rng.uniform(0.5, 0.95) for _ in range(n)],
            "min_similarity_gap": [rng.uniform(0.05, 0.3) for _ in range(n)],
            "max_norm_deviation": pa.array([None] * n, pa.float64()),
            "content_bytes": pa.array([0] * n, pa.uint64()),
        }
    )


class _NoCopies:
    def copy_payloads(self, kept: list[dict[str, object]]) -> int:
        return len(kept)


def _run(batches: list[pa.Table], *, columnar: bool) -> tuple[float, int]:
    """CPU seconds to sample `batches`, and the traces kept."""
    clock = [0.0]
    p95 = {(f, s): (9.5 if s == "request" else 2.95) for f in _FEATURES for s in _STAGES}
    sampler = Sampler(SamplerConfig(), clock=lambda: clock[0], p95_lookup=lambda f, s: p95.get((f, s)))
    sink = DecisionSink(_NoCopies(), clock=lambda: clock[0])
    began = time.process_time()
    for seq, table in enumerate(batches):
        if columnar:
            sink(sampler.ingest_table(table, seq))
        else:
            sink(sampler.ingest(TraceFragment.from_columns(table.to_pydict(), seq)))
        clock[0] += 2.0  # past the grace period: every trace of the batch is due
        sink(sampler.tick())
    return time.process_time() - began, sink.counts["payloads_copied"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=16_000, help="traces per stored batch (~80k spans)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    rng = random.Random(1)
    whole, rest = divmod(args.traces, args.batch)
    sizes = [args.batch] * whole + ([rest] if rest else [])
    batches = [_batch(rng, n) for n in sizes]
    seconds: dict[str, list[float]] = {"per-trace": [], "columnar": []}
    kept: dict[str, int] = {}
    for _ in range(args.rounds):
        for name in seconds:
            cpu_s, kept[name] = _run(batches, columnar=name == "columnar")
            seconds[name].append(cpu_s)
    if kept["per-trace"] != kept["columnar"]:
        raise SystemExit(f"the two paths kept different numbers of traces: {kept}")
    per_trace = {name: statistics.median(s) / args.traces * 1e6 for name, s in seconds.items()}
    print(f"{args.traces:,} traces in batches of {args.batch:,}; kept {kept['columnar']:,}; median of {args.rounds}")
    for name, us in per_trace.items():
        print(f"{name:<10} {us:6.2f} µs CPU per trace")
    print(f"columnar ÷ per-trace: {per_trace['columnar'] / per_trace['per-trace']:.2f}")


if __name__ == "__main__":
    main()
