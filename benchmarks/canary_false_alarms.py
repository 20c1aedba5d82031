"""How often the canary analysis (`ragmon.drift.canary`) raises an alert for a release that changes nothing.

    .venv/bin/python benchmarks/canary_false_alarms.py [--seeds 200] [--sizes 200,200,400,800,1600]

Per seed, in a database of its own on the embedded store: an hour of release A (900 requests over three question
groups with a little noise in every figure: errors, refusals, judged faithfulness, which paragraphs are retrieved),
then release B drawn from exactly the same groups, written in stretches of `--sizes` requests with the canary run
after each (so it looks at 200, 400, 800, 1600 … requests as the agent would). Prints the share of seeds with any
alert and its 95 % Wilson interval, and how many looks each release had.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `tests.support` when run as a script

from ragmon.sinks import open_store
from ragmon.sinks.intervals import wilson

from ragmon.drift.canary import CanaryAnalysis
from ragmon.drift.canary_config import CanaryConfig
from tests.support.release_rows import Group, Traffic, write

T0 = 1_800_000_000
GROUPS = (
    Group("g-reset", "How do I reset my password?", 0.4, ("para-7", "para-3"), faithfulness=0.75, refusal_rate=0.05),
    Group("g-bill", "Where is my invoice?", 0.35, ("para-1", "para-4"), faithfulness=0.7, document_rate=0.7),
    Group(
        "g-ship", "When will my order ship?", 0.25, ("para-5",), error_rate=0.02, refusal_rate=0.1, document_rate=0.9
    ),
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--sizes", default="200,200,400,800,1600")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    alarmed, looks = 0, []
    with tempfile.TemporaryDirectory() as directory:
        for seed in range(args.seeds):
            store = open_store(directory, database=f"fa_{seed}")
            canary = CanaryAnalysis(CanaryConfig(), store, clock=lambda: 0.0)
            write(store, [Traffic("A", T0, 900, 4.0, GROUPS)], seed=seed)
            start, fired = T0 + 3600.0, []
            for i, n in enumerate(sizes):
                write(store, [Traffic("B", start, n, 2.0, GROUPS)], seed=seed * 1000 + i + 1)
                start += 2.0 * n
                fired += canary.evaluate()
            looks.append(canary.looks)
            alarmed += bool(fired)
            if fired:
                print(f"seed {seed}: {[r.message for r in fired]}", flush=True)
            store.close()
    low, high = wilson(alarmed, args.seeds)
    print(
        f"releases that change nothing: {args.seeds}; with an alert: {alarmed} ({alarmed / args.seeds:.1%},"
        f" 95 % CI {low:.1%}–{high:.1%}); looks taken per release: {min(looks)}–{max(looks)}"
    )


if __name__ == "__main__":
    main()
