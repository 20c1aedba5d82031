"""An insert whose views fail inside the embedded engine must fail, so the writer sends it again: nothing lost.

chDB's streaming insert (which the embedded backend used) returned success when a view it fed failed with
MEMORY_LIMIT_EXCEEDED: with the engine capped at 80 MiB, 14 of 20 batches never reached `spans`, one error raised.
The backend now inserts with a statement that raises its views' errors (ragmon/sinks/chdb_backend.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.agent.harness import REPO
from tests.sinks.capped_inserts import STUCK

BATCHES = 20
RESTARTS = 3  # new engines on the same store when one stays above its cap (tests/sinks/capped_inserts.py)


def test_every_batch_lands_whole_when_the_capped_engine_fails_inserts(tmp_path: Path) -> None:
    errors, first_batch = 0, 0
    for _ in range(RESTARTS + 1):
        run = subprocess.run(
            [sys.executable, "-m", "tests.sinks.capped_inserts", "80", str(BATCHES), str(tmp_path), str(first_batch)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert run.returncode in (0, STUCK), run.stderr[-2000:]
        result = json.loads(run.stdout.splitlines()[-1])
        errors += result["errors"]
        if run.returncode == 0:
            break
        first_batch = result["stuck_at"]  # a new engine on the same store, from the batch it could not store
    assert run.returncode == 0, f"still refused after {RESTARTS} restarts: {run.stdout[-500:]}"
    # the cap is small enough that inserts do fail (else this would not test the failure path) ...
    assert errors > 0
    # ... and each failed batch was stored whole by its retry, once: every span, and its captured text
    assert result["spans"] == {str(b): result["spans_per_batch"] for b in range(BATCHES)}
    content = result["span_content"]
    assert set(content) == {str(b) for b in range(BATCHES)} and len(set(content.values())) == 1
