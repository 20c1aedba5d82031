"""`ragmon serve` (a real subprocess on loopback ports) receives an hour of traffic over OTLP whose last minutes are
slow; its alerting thread fires, the alert lands in `alerts`, `ragmon alerts --json` shows it and /metrics counts it.

The spans carry backdated timestamps (the agent stores a span at its own start time), so an hour of history takes
one request instead of an hour.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.agent.harness import REPO, AgentProcess
from tests.support import prometheus
from tests.support.synth import encode_otlp_request

MINUTES = 75
SHIFT_MINUTES = 10
REQUESTS_PER_MINUTE = 12

ALERTS = {
    "interval_s": 0.5,
    "settle_s": 0,
    "default_rules": False,
    "rules": [
        {
            "name": "chat_latency",
            "signal": "latency_p95_ms",
            "scope": {"stages": ["generate"]},
            "baseline_minutes": 60,
            "baseline_lag_minutes": 0,
            "warmup_windows": SHIFT_MINUTES + 3,
            "detector": {"type": "cusum", "min_count": 5, "min_baseline_windows": 20},
        }
    ],
}


def _history(end_s: int) -> tuple[bytes, set[str]]:
    """MINUTES of requests (a root and a chat span each) ending at `end_s`; the chat spans of the last
    SHIFT_MINUTES take 5x longer. Returns the OTLP body and the slowed traces."""
    rng = random.Random(11)
    spans = []
    slowed = set()
    for minute in range(MINUTES):
        shifted = minute >= MINUTES - SHIFT_MINUTES
        for _ in range(REQUESTS_PER_MINUTE):
            trace_id, root = f"{rng.getrandbits(128):032x}", f"{rng.getrandbits(64):016x}"
            start_ns = (end_s - (MINUTES - minute) * 60) * 10**9 + rng.randrange(0, 50 * 10**9)
            chat_ms = rng.lognormvariate(5.5, 0.3) * (5.0 if shifted else 1.0)
            if shifted:
                slowed.add(trace_id)
            spans.append(
                {
                    "trace_id": trace_id,
                    "span_id": root,
                    "name": "request qa",
                    "start_ns": start_ns,
                    "duration_ms": chat_ms + 20,
                    "attributes": {"ragmon.stage": "request", "ragmon.feature": "qa"},
                }
            )
            spans.append(
                {
                    "trace_id": trace_id,
                    "span_id": f"{rng.getrandbits(64):016x}",
                    "parent_span_id": root,
                    "name": "chat gpt-4o-mini",
                    "start_ns": start_ns + 10**7,
                    "duration_ms": chat_ms,
                    "attributes": {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.request.model": "gpt-4o-mini",
                        "ragmon.feature": "qa",
                    },
                }
            )
    return encode_otlp_request(spans), slowed


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(response.status)


def test_serve_fires_on_a_shift_and_ragmon_alerts_shows_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    agent = AgentProcess(data, extra_env={"RAGMON_AGENT__ALERTS": json.dumps(ALERTS)}, grpc=False)
    try:
        agent.start(timeout_s=180)  # generous: start-up is slow on a loaded 2-core box
        body, slowed = _history(int(time.time()) // 60 * 60)
        assert _post(f"{agent.otlp_http}/v1/traces", body) == 200  # one request: stored in one insert
        deadline = time.monotonic() + 60
        rows: list[dict[str, object]] = []
        while time.monotonic() < deadline and not rows:
            rows = agent.query("SELECT alert_id, state, stage FROM alerts")
            time.sleep(0.2)
        assert rows, f"no alert within 60 s:\n{agent.log()}"

        shown = subprocess.run(
            [sys.executable, "-m", "ragmon.cli", "alerts", "--json", "--data-dir", str(data)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert shown.returncode == 0, shown.stderr
        alerts = json.loads(shown.stdout)
        assert [(a["rule"], a["state"], a["feature"], a["stage"]) for a in alerts] == [
            ("chat_latency", "firing", "qa", "generate")
        ]
        assert alerts[0]["current_value"] > 3 * alerts[0]["baseline_value"]
        assert alerts[0]["trace_ids"] and set(alerts[0]["trace_ids"]) <= slowed

        with urllib.request.urlopen(f"{agent.otlp_http}/metrics", timeout=10) as response:
            metrics = response.read().decode()
        assert prometheus.value(metrics, "ragmon_alert_transitions_total", state="firing") == 1
        assert prometheus.value(metrics, "ragmon_alert_rows_total", outcome="stored") == 1
        assert prometheus.value(metrics, "ragmon_alert_store_errors_total") == 0
        assert prometheus.value(metrics, "ragmon_store_writer_seconds_total", phase="insert") is not None
        assert agent.stop() == 0
    finally:
        if agent.process is not None and agent.process.poll() is None:
            agent.kill()
