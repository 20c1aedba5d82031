"""Feedback endpoint throughput and memory: `POST /v1/feedback` requests/s (and items/s) against the same agent's
OTLP receiver `POST /v1/traces` requests/s, measured in one run, in alternated rounds, each by `--clients`
keep-alive clients sending one request at a time (a user's click is one request; so is an SDK's small export), and
the agent's resident memory.

    python benchmarks/feedback.py [--seconds 5] [--rounds 3] [--items 1] [--clients 1]

The agent runs in this process on an embedded store in a temporary directory (its rate limit lifted for the
measurement); with more than one client the clients run in `--client-processes` other processes (spawned, so they
do not share this one's interpreter lock or its engine), spread evenly. A feedback request is acknowledged once
stored; a traces request once in the write-ahead log (the store writes later) — so the ratio is the price of
"acknowledged means stored" for feedback. Figures go in docs/results.md, not in code.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx


def _rss_mib(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
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


def _rate(client: httpx.Client, url: str, body: Callable[[], bytes], seconds: float) -> tuple[int, int, float]:
    """(requests answered 200, refused, seconds taken) by one client sending one request at a time."""
    done = refused = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        response = client.post(url, content=body())
        if response.status_code == 200:
            done += 1
        else:
            refused += 1
    return done, refused, time.perf_counter() - started


def _body(kind: str, items: int) -> Callable[[], bytes]:
    return (lambda: _feedback_body(items)) if kind == "feedback" else _trace_body


def _clients(url: str, kind: str, items: int, seconds: float, threads: int) -> tuple[int, int, float]:
    """`threads` clients at once (in this process), each its own keep-alive connection: total 200s, refusals, and
    the longest client's seconds."""
    results: list[tuple[int, int, float]] = []

    def one() -> None:
        with httpx.Client(headers={"Content-Type": "application/json"}, timeout=60) as client:
            results.append(_rate(client, url, _body(kind, items), seconds))

    workers = [threading.Thread(target=one) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(r[0] for r in results), sum(r[1] for r in results), max(r[2] for r in results)


def _round(
    pool: Any, url: str, kind: str, items: int, seconds: float, clients: int, processes: int
) -> tuple[float, int]:
    """Requests/s answered 200 by `clients` clients spread over `processes` processes (this one when None), and
    how many were refused."""
    if pool is None:
        done, refused, elapsed = _clients(url, kind, items, seconds, clients)
        return done / elapsed, refused
    shares = [clients // processes + (1 if n < clients % processes else 0) for n in range(processes)]
    results = pool.starmap(_clients, [(url, kind, items, seconds, share) for share in shares if share])
    return sum(r[0] for r in results) / max(r[2] for r in results), sum(r[1] for r in results)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per round and endpoint")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=1, help="feedback items per request")
    parser.add_argument("--clients", type=int, default=1, help="keep-alive clients sending at once, per endpoint")
    parser.add_argument("--client-processes", type=int, default=4, help="processes the clients run in (when > 1)")
    args = parser.parse_args()
    # Imported here: the spawned client processes import this module and must not load the engine.
    from ragmon.agent.agent import Agent
    from ragmon.settings import load_settings

    processes = min(args.clients, args.client_processes)
    pool = multiprocessing.get_context("spawn").Pool(processes) if args.clients > 1 else None
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
            for kind in ("feedback", "traces"):  # warm up both paths (and the client processes)
                _round(pool, f"{base}/v1/{kind}", kind, args.items, 1.0, args.clients, processes)
            for _ in range(args.rounds):
                rate, no = _round(
                    pool, f"{base}/v1/feedback", "feedback", args.items, args.seconds, args.clients, processes
                )
                feedback_rates.append(rate)
                refused += no
                rate, no = _round(
                    pool, f"{base}/v1/traces", "traces", args.items, args.seconds, args.clients, processes
                )
                trace_rates.append(rate)
                refused += no
            rss_end, rss_peak = _rss_mib(), _rss_mib("VmHWM")
            stored = agent.store.query("SELECT count() AS n FROM feedback_writes")[0]["n"]
            committer = getattr(agent.receivers[0].feedback, "committer", None)  # absent before group commit
            inserts = committer.batches if committer is not None else None
        finally:
            agent.stop()
            if pool is not None:
                pool.close()
                pool.join()
    feedback, traces = statistics.median(feedback_rates), statistics.median(trace_rates)
    rounds = [round(r) for r in feedback_rates]
    print(f"clients   {args.clients} per endpoint ({processes if pool else 'this'} process(es))")
    print(
        f"feedback  {feedback:8.1f} requests/s, {feedback * args.items:8.1f} items/s"
        f" ({args.items} item(s) each; rounds {rounds})"
    )
    print(f"traces    {traces:8.1f} requests/s (1 span each; rounds {[round(r) for r in trace_rates]})")
    print(f"ratio     feedback / traces = x{feedback / traces:.3f}")
    per_insert = f", {stored / inserts:.1f} rows per INSERT" if inserts else ""
    print(f"stored    {stored} feedback rows{per_insert}")
    print(f"RSS       {rss_start:.0f} MiB after start, {rss_end:.0f} MiB after the run, peak {rss_peak:.0f} MiB")
    print(f"refused   {refused} requests")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
