"""What keeping whole conversations costs: the payload rows the sampler adds for kept follow-ups' earlier turns
(`Store.copy_conversation_turns`), as a share of the rows it keeps anyway, and the time of that copy against the
payload copy it follows — both measured in one run on one embedded store.

Synthetic chat traffic: `--sessions` conversations of `--turns` turns each; a turn's question is a follow-up
(`ragmon.conversation.is_follow_up`) with probability `--follow-ups`; the sampler keeps each turn with probability
`--keep` (a baseline rate). Prints the kept rows, the conversation rows added, their ratio, and the copy times.

    python benchmarks/conversation_copies.py [--sessions 2000 --turns 5 --follow-ups 0.4 --keep 0.1]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragmon.sinks import open_store

from tests.sinks import conversation_turns as ct

STANDALONE = "Which payment methods do you accept for business customers in Europe?"
FOLLOW_UP = "and for the annual plan?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--follow-ups", type=float, default=0.4)
    parser.add_argument("--keep", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(str(Path(tmp) / "chdb"))
        ct.install(store)
        traces, kept = [], []
        for s in range(args.sessions):
            for t in range(args.turns):
                n = s * args.turns + t
                question = FOLLOW_UP if t and rng.random() < args.follow_ups else STANDALONE
                traces.append(ct.turn(n, question, "An answer.", session=f"s{s}", offset_s=t * 20 - 200))
                if rng.random() < args.keep:
                    kept.append({"tenant": ct.TENANT, "trace_id": ct.trace_id(n), "reasons": ["baseline"],
                                 "probability": args.keep})  # fmt: skip
        for i in range(0, len(traces), 2000):
            ct.send(store, traces[i : i + 2000], seq0=1 + i)
        started = time.perf_counter()
        store.copy_payloads(kept)
        copy_s = time.perf_counter() - started
        started = time.perf_counter()
        added = store.copy_conversation_turns(kept)
        conversation_s = time.perf_counter() - started
        store.close()
    print(f"turns {len(traces)}, kept {len(kept)} ({len(kept) / len(traces):.1%}), follow-ups {args.follow_ups:.0%}")
    print(f"conversation rows added {added}: x{(len(kept) + added) / max(1, len(kept)):.3f} payload rows")
    print(f"copy of kept {copy_s * 1000:.0f} ms, copy of their earlier turns {conversation_s * 1000:.0f} ms"
          f" (x{conversation_s / copy_s:.2f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
