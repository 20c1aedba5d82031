"""The store side of the judge-worker kill test, in a process of its own (chDB opens one engine path per process,
and the test process already has its own): ``python tests/faults/judge_store_tool.py seed DATA_DIR N`` writes N
kept traces' payloads into ``DATA_DIR/chdb``; ``... scores DATA_DIR`` prints the raw score rows per
(trace, metric, judge version) as JSON: how many rows, how many distinct judgements, and their statuses."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ragmon.sinks import open_store

TENANT = "t"


def trace_id(i: int) -> str:
    return f"{i + 1:032x}"


def seed(data_dir: Path, n: int) -> None:
    store = open_store(data_dir / "chdb")
    now_ns = time.time_ns()
    store.insert_payloads(
        {
            "tenant": TENANT,
            "trace_id": trace_id(i),
            "feature": "faq",
            "start_time": now_ns,
            "question": f"When was the Eiffel Tower completed and how tall is it? ({i})",
            "answer": "It was completed in 1889 [1]. It is 300 metres tall.",
            "passages": [{"id": f"d{i}", "score": 0.9, "text": f"The Eiffel Tower, completed in 1889. (source {i})"}],
            "sampling_reason": "error",
            "inclusion_probability": 1.0,
        }
        for i in range(n)
    )
    store.close()


def scores(data_dir: Path) -> None:
    store = open_store(data_dir / "chdb")
    # Raw rows, no FINAL: a trace judged twice would show up here before any merge collapses it.
    rows = store.query(
        "SELECT trace_id, metric, judge_version, count() AS n,"
        " uniqExact(value, status, explanation, scored_at) AS judgements, groupUniqArray(status) AS statuses"
        " FROM scores GROUP BY trace_id, metric, judge_version ORDER BY trace_id",
        max_rows=1_000_000,
    )
    store.close()
    print(json.dumps(rows, default=str))


if __name__ == "__main__":
    command, directory = sys.argv[1], Path(sys.argv[2])
    if command == "seed":
        seed(directory, int(sys.argv[3]))
    elif command == "scores":
        scores(directory)
    else:
        raise SystemExit(f"unknown command {command!r}: seed | scores")
