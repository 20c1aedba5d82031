"""The agent's API port alone: requests/s and server CPU per request, for this tree or against a git revision.

Sender processes alternate `GET /api/report` and `POST /api/query` (with an API key) over kept-alive connections,
to an `ApiServer` whose report and query answer 20 small rows at once without a store: what is measured is the
HTTP stack, key check, routing, JSON and the thread hand-off. Each run is a fresh process hosting the server; its
CPU time divided by the requests is the CPU per request (the senders are other processes).

    python benchmarks/api_server.py                     # this tree, --rounds runs, medians
    python benchmarks/api_server.py --against 4f0e5cf   # this tree and the http.server API of 4f0e5cf, alternated

`--against REV` checks REV out in a temporary git worktree and runs `--rounds` pairs, alternating which tree goes
first; it prints every run, then the medians and the ratios this tree / REV.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _source_tree  # beside this script

WARMUP_REQUESTS = 50
KEY = "bench-key"
ROWS = [{"feature": "qa", "stage": "generate", "p95_ms": 812.5, "requests": 1200, "cost_usd": 0.42}] * 20


def _sender(port: int, count: int, start: Any, done: Any) -> None:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    query = json.dumps({"sql": "SELECT 1"}).encode()
    headers = {"x-api-key": KEY, "Content-Type": "application/json"}

    def ask(index: int) -> None:
        if index % 2:
            connection.request("POST", "/api/query", body=query, headers=headers)
        else:
            connection.request("GET", "/api/report?since_s=3600", headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"the API answered {response.status}")

    for index in range(WARMUP_REQUESTS):
        ask(index)
    start.wait()
    for index in range(count):
        ask(index)
    connection.close()
    done.put(count)


def _run_one(tree: Path, requests: int, senders: int) -> dict[str, float]:
    """In a fresh process: serve with `tree`'s API, time `requests` from `senders` processes."""
    _source_tree.import_from(tree)
    from ragmon.agent.api import ApiServer

    auth = _source_tree.agent_package(tree, "collectors").ApiKeyAuth({"bench": KEY})
    per_sender = requests // senders
    context = mp.get_context("spawn")
    start, done = context.Barrier(senders + 1), context.Queue()
    server = ApiServer("127.0.0.1", 0, lambda *a: ROWS, lambda *a: ROWS, auth).start()
    port = int(server.url.rsplit(":", 1)[1])
    try:
        processes = [context.Process(target=_sender, args=(port, per_sender, start, done)) for _ in range(senders)]
        for process in processes:
            process.start()
        start.wait()
        wall, cpu = time.perf_counter(), time.process_time()
        sent = sum(done.get(timeout=600) for _ in processes)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        for process in processes:
            process.join()
    finally:
        server.stop()
    return {"requests_per_s": sent / wall, "cpu_us_per_request": cpu / sent * 1e6}


def _spawn_run(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    command = [sys.executable, __file__, "--run-tree", str(tree)]
    command += ["--requests", str(args.requests), "--senders", str(args.senders)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"run on {tree} failed:\n{result.stderr}")
    figures: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def _print_run(name: str, figures: dict[str, float]) -> None:
    rate, cpu = figures["requests_per_s"], figures["cpu_us_per_request"]
    print(f"  {name:<12} {rate:>9,.0f} requests/s   {cpu:>8,.0f} µs server CPU per request", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000, help="timed requests per run, over all senders")
    parser.add_argument("--senders", type=int, default=4, help="sender processes, one kept-alive connection each")
    parser.add_argument("--rounds", type=int, default=5, help="runs per tree")
    parser.add_argument("--against", metavar="REV", help="alternate with the API of this git revision")
    parser.add_argument("--run-tree", type=Path, help=argparse.SUPPRESS)  # internal: one run, figures as JSON
    args = parser.parse_args()
    if args.run_tree is not None:
        print(json.dumps(_run_one(args.run_tree, args.requests, args.senders)))
        return

    print(f"{args.requests} requests per run from {args.senders} senders; {args.rounds} rounds")
    with (
        tempfile.TemporaryDirectory(prefix="ragmon-api-bench-") as tmp,
        _source_tree.trees(args.against, Path(tmp)) as trees,
    ):
        medians = _source_tree.alternate(trees, args.rounds, lambda tree: _spawn_run(tree, args), _print_run)
    print("medians")
    for name, figures in medians.items():
        _print_run(name, figures)
    if args.against:
        ours, theirs = medians[_source_tree.THIS_TREE], medians[args.against]
        print(
            f"ratio this tree / {args.against}: requests/s {ours['requests_per_s'] / theirs['requests_per_s']:.3f}, "
            f"CPU per request {ours['cpu_us_per_request'] / theirs['cpu_us_per_request']:.3f}"
        )


if __name__ == "__main__":
    main()
