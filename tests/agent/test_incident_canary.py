"""The issue's "Done when", replayed in production form: a support bot (`tests.agent.incident_app`) traced with
OpenInference names and with ragmon's SDK sends release A, then release B — new chunking, answers better grounded,
while the most common question ("how do I reset my password", a third of the traffic) now retrieves the paragraph on
changing the e-mail address — to `ragmon serve` with its defaults and the local judge. Within 30 minutes of B's first
span (data time), with no SQL written, an alert names release B, the broken question in its users' words and the
paragraph it stopped retrieving, while B's mean faithfulness rose. A release that changes nothing raises nothing.

Needs the question-grouping stage (`ragmon.questions`, filling `trace_questions`) and the documents' paragraph ids
(`spans.retrieved_sources` from OpenInference document metadata): skipped until they are on the branch.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.agent.harness import REPO, AgentProcess
from tests.agent.incident_app import QUESTIONS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("ragmon.questions") is None,
        reason="needs the question-grouping stage (ragmon.questions), another part of issue 39",
    ),
]
RESET_PHRASINGS = set(QUESTIONS[0][0])


def _send(agent: AgentProcess, release: str, requests: int, seed: int, *extra: str) -> None:
    sent = subprocess.run(
        [sys.executable, "-m", "tests.agent.incident_app", agent.otlp_http, release, str(requests), str(seed), *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert sent.returncode == 0, sent.stderr[-3000:]


def _read(agent: AgentProcess, name: str, **params: str) -> Any:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    with urllib.request.urlopen(f"{agent.api}/api/read/{name}?{query}", timeout=60) as response:
        return json.loads(response.read())


def _canary_alerts(agent: AgentProcess) -> list[dict[str, Any]]:
    return [a for a in _read(agent, "alerts", since_s="86400") if a["rule"] == "canary"]


def _wait(condition: Any, what: str, timeout_s: float = 900.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(2.0)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    process = AgentProcess(tmp_path / "data", grpc=False).start(timeout_s=300)
    try:
        yield process
    finally:
        process.stop()


def test_the_incident_is_named_release_question_and_paragraph(agent: AgentProcess) -> None:
    _send(agent, "A", 900, seed=1)
    _send(agent, "B", 400, seed=2)
    alerts = _wait(
        lambda: [a for a in _canary_alerts(agent) if a["labels"].get("question") in RESET_PHRASINGS],
        "a canary alert naming the broken question",
    )
    alert = alerts[0]
    labels = alert["labels"]
    assert labels["release"] == "B" and "release B" in alert["message"]
    assert "para-password" in labels["stopped_retrieving"] and "para-password" in alert["message"]
    assert labels["trace_ids"] and labels["link"].startswith("#/compare?feature=support&baseline=A&candidate=B")

    comparison = _read(agent, "compare", feature="support")
    first_b_ns = comparison["candidate"]["start_ns"]
    fired = datetime.fromisoformat(alert["fired_at"]).timestamp()
    assert fired - first_b_ns / 1e9 <= 30 * 60  # within 30 minutes of B's first traffic, in data time
    faithfulness = next(r for r in comparison["rows"] if r["metric"] == "quality" and r["part"] == "faithfulness")
    assert faithfulness["delta"] > 0  # the mean rose: one number averaged a gain and a loss into a gain
    assert comparison["groups"][0]["question"] in RESET_PHRASINGS


def test_a_release_that_changes_nothing_raises_nothing(agent: AgentProcess) -> None:
    _send(agent, "A", 900, seed=3)
    _send(agent, "B", 400, 4, "--unchanged")
    # B's 400 requests may all be stored before the canary's first run: then it looks once (at 200 requests and
    # again each time the traffic doubles, so a fast sender can be looked at once); two more alerting runs after
    # that, no alert
    _wait(lambda: (agent.metric("ragmon_canary_looks_total") or 0) >= 1, "the canary to look at B")
    runs = agent.metric("ragmon_alert_evaluations_total") or 0
    _wait(lambda: (agent.metric("ragmon_alert_evaluations_total") or 0) >= runs + 2, "two more alerting runs")
    assert _canary_alerts(agent) == []
