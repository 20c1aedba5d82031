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

BATCHES = 20


def _run(*args: str) -> dict[str, object]:
    run = subprocess.run(
        [sys.executable, "-m", "tests.sinks.capped_inserts", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result: dict[str, object] = json.loads(run.stdout.splitlines()[-1])
    return result


def test_every_batch_lands_whole_when_the_capped_engine_fails_inserts(tmp_path: Path) -> None:
    # every batch once into an engine capped at 80 MiB: the ones whose insert raised are the ones to send again
    first = _run("capped", "80", str(BATCHES), str(tmp_path))
    failed = first["failed"]
    assert isinstance(failed, list)
    # the cap is small enough that inserts do fail (else this would not test the failure path) ...
    assert first["errors"] == len(failed) > 0
    # ... and, sent again under their tokens by a restarted engine, each failed batch is stored whole, once; a batch
    # whose insert said it succeeded is not sent again, so a view's failure swallowed by the insert would show here
    result = _run("retry", str(BATCHES), str(tmp_path), json.dumps(failed))
    assert result["spans"] == {str(b): result["spans_per_batch"] for b in range(BATCHES)}
    content = result["span_content"]
    assert isinstance(content, dict)
    assert set(content) == {str(b) for b in range(BATCHES)} and len(set(content.values())) == 1
