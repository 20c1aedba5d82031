"""An insert whose views fail inside the embedded engine must fail, so the writer sends it again: nothing lost.

chDB's streaming insert (which the embedded backend used) returned success when a view it fed failed with
MEMORY_LIMIT_EXCEEDED: with the engine capped at 80 MiB, 14 of 20 batches never reached `spans`, one error raised.
The backend now inserts with a statement that raises its views' errors (ragmon/sinks/chdb_backend.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.agent.harness import REPO

BATCHES = 20


def test_every_batch_lands_whole_when_the_capped_engine_fails_inserts() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "tests.sinks.capped_inserts", "80", str(BATCHES)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.splitlines()[-1])
    # the cap is small enough that inserts do fail (else this would not test the failure path) ...
    assert result["errors"] > 0
    # ... and each failed batch was stored whole by its retry, once: every span, and its captured text
    assert result["spans"] == {str(b): result["spans_per_batch"] for b in range(BATCHES)}
    content = result["span_content"]
    assert set(content) == {str(b) for b in range(BATCHES)} and len(set(content.values())) == 1
