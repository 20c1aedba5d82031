"""`ragmon demo` end to end: an embedded agent in this process, the sample app's traffic through it, the report.

The agent is the real one (`ragmon serve`'s): OTLP/HTTP receiver on an ephemeral loopback port, write-ahead log,
embedded ClickHouse under `--data-dir`, tail sampler. The app exports with ragmon's SDK over OTLP/HTTP, exactly as
a production app would; the demo then waits until every acknowledged span is stored and the sampler has decided,
and prints what a user would ask for first: latency, errors, tokens and cost per feature and stage, and which
traces kept their text and why.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

_SETTLE_TIMEOUT_S = 60.0


def run_through_agent(
    data_dir: Path, run_app: Any, *, out: TextIO = sys.stdout, sampling: dict[str, Any] | None = None
) -> int:
    """Start an agent on `data_dir`, call `run_app(endpoint)`, wait for the pipeline to settle, print the report."""
    from ragmon.agent.agent import Agent, DataDirInUse
    from ragmon.agent.commands import format_report
    from ragmon.settings import load_settings

    settings = load_settings(
        {
            "agent": {
                "data_dir": data_dir,
                "otlp_http": "127.0.0.1:0",
                "otlp_grpc": "",
                "api": "127.0.0.1:0",
                "sampling": sampling or {},
            }
        }
    )
    agent = Agent(settings)
    try:
        agent.start()
    except DataDirInUse as exc:
        print(f"ragmon demo: {exc}; pass --data-dir to use another directory", file=sys.stderr)
        return 2
    try:
        endpoint = f"http://127.0.0.1:{agent.receivers[0].port}"
        print(f"agent: OTLP/HTTP {endpoint}, embedded ClickHouse in {data_dir}", file=out)
        started = time.time()
        exit_code = run_app(endpoint)
        _settle(agent)
        window_s = time.time() - started + 60
        print("\nreport (what `ragmon report` shows):", file=out)
        print(format_report(agent.store.report(window_s)), file=out)
        _print_kept(agent, out)
        print(
            f"\nexplore: ragmon report --data-dir {data_dir} · "
            f'ragmon query "SELECT stage, count() FROM spans GROUP BY stage" --data-dir {data_dir}',
            file=out,
        )
        return int(exit_code)
    finally:
        agent.stop()


def _settle(agent: Any) -> None:
    """Wait until everything acknowledged is stored, then let the sampler decide (root + grace)."""
    deadline = time.monotonic() + _SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        if agent.intake.backlog[0] == 0 and agent.writer.counts["requests_stored"] >= agent.intake.accepted_requests:
            break
        time.sleep(0.05)
    grace_s = agent.sampler.config.decision_grace_s
    time.sleep(grace_s + 2 * agent.writer.tick_interval_s)
    deadline = time.monotonic() + _SETTLE_TIMEOUT_S
    while agent.sampler.traces_held and time.monotonic() < deadline:
        time.sleep(0.05)
    agent.decisions.flush()


def _print_kept(agent: Any, out: TextIO) -> None:
    decided = Counter[str]()
    for key, count in agent.decisions.counts.items():
        decision = key.split(":", 1)[0]
        if decision in ("keep", "skip", "drop"):
            decided[decision] += count
    rows = agent.store.query("SELECT sampling_reasons FROM payloads FINAL")
    reasons = Counter(reason for row in rows for reason in row["sampling_reasons"])
    total = sum(decided.values())
    why = ", ".join(f"{reason} {count}" for reason, count in reasons.most_common()) or "none"
    print(f"\ntail sampler: kept the text of {decided['keep']} of {total} traces ({why})", file=out)
