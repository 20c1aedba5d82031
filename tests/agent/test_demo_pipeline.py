"""The README's main command: `ragmon demo` runs the sample app through an embedded agent and reports."""

from __future__ import annotations

import json
import re
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
    demo = _ragmon("demo", "-n", "12", "--error", "search=0.3", "--norm-bug", "--data-dir", str(data))
    assert demo.returncode == 0, demo.stderr
    assert "report (what `ragmon report` shows):" in demo.stdout
    # the sampler's line adds up: each kept trace under its first reason; every failed request kept as an error
    line = next(line for line in demo.stdout.splitlines() if line.startswith("tail sampler: kept the text of"))
    kept, decided = map(int, re.search(r"kept the text of (\d+) of (\d+) traces", line).groups())  # type: ignore[union-attr]
    by_reason = {reason: int(n) for reason, n in re.findall(r"(\w+) (\d+) \(", line.split("): ", 1)[1])}
    failed = int(re.search(r"\d+ requests, (\d+) failed", demo.stdout).group(1))  # type: ignore[union-attr]
    assert decided == 12 and sum(by_reason.values()) == kept
    assert by_reason.get("error", 0) == failed > 0
    exported = int(demo.stdout.split("exported ")[1].split(" spans")[0])
    # the agent has stopped: report and query open the embedded store directly. The store also holds the demo's
    # synthetic history hour (service ragmon-demo-history); the live run is service ragmon-demo.
    count = _ragmon(
        "query", "SELECT count() AS n FROM spans WHERE service = 'ragmon-demo'", "--json", "--data-dir", str(data)
    )
    assert count.returncode == 0, count.stderr
    assert json.loads(count.stdout) == {"n": exported}
    text = _ragmon("report", "--since", "2h", "--data-dir", str(data)).stdout  # the store's sampling counts
    line = next(line for line in text.splitlines() if line.startswith("tail sampler: kept the text of"))
    stored_kept, stored_decided = map(int, re.search(r"of ([\d,]+) of ([\d,]+) traces", line.replace(",", "")).groups())  # type: ignore[union-attr]
    assert stored_decided == 12 + 60 * 12  # the live run and the history hour replayed after it
    assert sum(int(n) for n in re.findall(r"\w+ (\d+) \(", line.split("): ", 1)[1])) == stored_kept
    report = json.loads(_ragmon("report", "--since", "2h", "--json", "--data-dir", str(data)).stdout)
    search = [row for row in report["stages"] if row["stage"] == "search"]
    live_search = _ragmon(
        "query",
        "SELECT count() AS n FROM spans WHERE service = 'ragmon-demo' AND stage = 'search'",
        "--json",
        "--data-dir",
        str(data),
    )
    assert json.loads(live_search.stdout) == {"n": 12}
    assert any(row["error_rate"] > 0 for row in search)  # injected search errors are counted
    history = _ragmon(
        "query",
        "SELECT count() AS n FROM spans WHERE service = 'ragmon-demo-history' AND stage = 'request'",
        "--json",
        "--data-dir",
        str(data),
    )
    assert json.loads(history.stdout) == {"n": 60 * 12}  # an hour of history at the live run's 12 requests a minute
    assert sum(row["requests"] for row in search) == 12 + 60 * 12  # the report sees both

    # The injected normalisation bug (query vectors no longer unit length) raised an alert, printed at the end and
    # stored for `ragmon alerts`.
    assert "drift: baseline = 60 min of synthetic history" in demo.stdout
    alerts_section = demo.stdout.split("alerts the injected faults raised")[1]
    assert "embedding_norm_jump" in alerts_section
    assert alerts_section.rstrip().splitlines()[-1] == (
        f"dashboard: `ragmon serve --data-dir {tmp_path / 'demo'}`, then open http://127.0.0.1:4320/"
    )
    listed = _ragmon("alerts", "--json", "--data-dir", str(data))
    assert listed.returncode == 0, listed.stderr
    norm = [a for a in json.loads(listed.stdout) if a["rule"] == "embedding_norm_jump"]
    assert norm and all(a["state"] == "firing" and a["stage"] == "embed" for a in norm)
    assert all(a["current_value"] > 0.1 > a["baseline_value"] for a in norm)
    kept = _ragmon(
        "query",
        "SELECT count() AS n FROM payloads WHERE has(sampling_reasons, 'error')",
        "--json",
        "--data-dir",
        str(data),
    )
    failed = int(demo.stdout.split(" requests, ")[1].split(" failed")[0])
    assert json.loads(kept.stdout) == {"n": failed}  # every error trace kept its text


def test_the_default_demo_ends_with_the_alerts_its_faults_raised(tmp_path: Path) -> None:
    # Exactly the README's first command (default fault mix, default request count), in a temporary data dir.
    demo = _ragmon("demo", "--data-dir", str(tmp_path / "demo"))
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "the app's own spans, per stage (before they reach the agent):" in demo.stdout  # the first table's title
    assert "cost $ 0: the demo's embedder and generator run locally and are free" in demo.stdout
    kept = next(line for line in demo.stdout.splitlines() if line.startswith("tail sampler: kept the text of"))
    assert re.search(r"slow \d+ \(", kept), kept  # the slowed requests are over the demo's SLA: kept as slow
    alerts_section = demo.stdout.split("alerts the injected faults raised")[1]
    firing = [line for line in alerts_section.splitlines() if line.startswith("firing")]
    assert firing, alerts_section
    assert any("latency_p95_up" in line and "/generate" in line for line in firing), firing  # the slowed stage
    assert alerts_section.rstrip().splitlines()[-1] == (
        f"dashboard: `ragmon serve --data-dir {tmp_path / 'demo'}`, then open http://127.0.0.1:4320/"
    )
