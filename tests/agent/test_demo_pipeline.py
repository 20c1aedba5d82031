"""The README's main command: `ragmon demo` runs the sample app through an embedded agent and reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.agent.harness import REPO


def _ragmon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragmon.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def test_demo_stores_every_span_and_reports_per_feature_and_stage(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    demo = _ragmon("demo", "-n", "12", "--error", "search=0.3", "--data-dir", str(data))
    assert demo.returncode == 0, demo.stderr
    assert "report (what `ragmon report` shows):" in demo.stdout
    assert "tail sampler: kept the text of" in demo.stdout
    exported = int(demo.stdout.split("exported ")[1].split(" spans")[0])
    # the agent has stopped: report and query open the embedded store directly
    count = _ragmon("query", "SELECT count() AS n FROM spans", "--json", "--data-dir", str(data))
    assert count.returncode == 0, count.stderr
    assert json.loads(count.stdout) == {"n": exported}
    report = json.loads(_ragmon("report", "--json", "--data-dir", str(data)).stdout)
    search = [row for row in report if row["stage"] == "search"]
    assert sum(row["requests"] for row in search) == 12
    assert any(row["error_rate"] > 0 for row in search)  # injected search errors are counted
    kept = _ragmon(
        "query",
        "SELECT count() AS n FROM payloads WHERE has(sampling_reasons, 'error')",
        "--json",
        "--data-dir",
        str(data),
    )
    failed = int(demo.stdout.split(" requests, ")[1].split(" failed")[0])
    assert json.loads(kept.stdout) == {"n": failed}  # every error trace kept its text
