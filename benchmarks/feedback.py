"""Feedback endpoint throughput and memory: `POST /v1/feedback` requests/s against the same agent's OTLP receiver
`POST /v1/traces` requests/s, measured in one run, in alternated rounds, each by one keep-alive client sending one
request at a time (a user's click is one request; so is an SDK's small export), and the agent's resident memory.

    python benchmarks/feedback.py [--seconds 5] [--rounds 3] [--items 1]

The agent runs in this process on an embedded store in a temporary directory (its rate limit lifted for the
measurement). A feedback request is acknowledged once stored (one INSERT); a traces request once in the write-ahead
log (the store writes later) — so the ratio is the price of "acknowledged means stored" for feedback. Figures go
in docs/results.md, not in code.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from ragmon.agent.agent import Agent
from ragmon.settings import load_settings


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _trace_body() -> bytes:
    now_ns = time.time_ns()
    span = {
        "traceId": uuid.uuid4().hex,
        "spanId": uuid.uuid4().hex[:16],
        "name": "request bench",
        "kind": 1,
        "startTimeUnixNano": str(now_ns - 10_000_000),
        "endTimeUnixNano": str(now_ns),
        "attributes": [{"key": "ragmon.feature", "value": {"stringValue": "bench"}}],
    }
    return json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": [span]}]}]}).encode()


def _feedback_body(items: int) -> bytes:
    batch = [{"trace_id": uuid.uuid4().hex, "thumbs": "down", "user": f"u{n}"} for n in range(items)]
    return json.dumps(batch[0] if items == 1 else batch).encode()


def _rate(client: httpx.Client, url: str, body: bytes, seconds: float) -> tuple[float, int]:
    """Requests/s answered 200 over `seconds`, and how many were refused."""
    done = refused = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        response = client.post(url, content=body() if callable(body) else body)
        if response.status_code == 200:
            done += 1
        else:
            refused += 1
    return done / (time.perf_counter() - started), refused


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per round and endpoint")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=1, help="feedback items per request")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        settings = load_settings(
            {
                "agent": {
                    "data_dir": directory,
                    "otlp_http": "127.0.0.1:0",
                    "otlp_grpc": "",
                    "api": "127.0.0.1:0",
                    "feedback_rate_per_s": 1e9,
                    "feedback_burst": 1_000_000_000,
                }
            },
            env={},
        )
        agent = Agent(settings).start()
        base = f"http://127.0.0.1:{agent.receivers[0].port}"
        rss_start = _rss_mib()
        feedback_rates, trace_rates, refused = [], [], 0
        try:
            with httpx.Client(headers={"Content-Type": "application/json"}, timeout=30) as client:
                _rate(client, f"{base}/v1/feedback", _feedback_body(args.items), 1.0)  # warm up both paths
                _rate(client, f"{base}/v1/traces", _trace_body(), 1.0)
                for _ in range(args.rounds):
                    rate, no = _rate(client, f"{base}/v1/feedback", lambda: _feedback_body(args.items), args.seconds)
                    feedback_rates.append(rate)
                    refused += no
                    rate, no = _rate(client, f"{base}/v1/traces", _trace_body, args.seconds)
                    trace_rates.append(rate)
                    refused += no
            rss_end = _rss_mib()
            stored = agent.store.query("SELECT count() AS n FROM feedback_writes")[0]["n"]
        finally:
            agent.stop()
    feedback, traces = statistics.median(feedback_rates), statistics.median(trace_rates)
    print(
        f"feedback  {feedback:8.1f} requests/s ({args.items} item(s) each; rounds {[round(r) for r in feedback_rates]})"
    )
    print(f"traces    {traces:8.1f} requests/s (1 span each; rounds {[round(r) for r in trace_rates]})")
    print(f"ratio     feedback / traces = x{feedback / traces:.3f}")
    print(f"RSS       {rss_start:.0f} MiB after start, {rss_end:.0f} MiB after the run; feedback rows stored {stored}")
    print(f"refused   {refused} requests")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
