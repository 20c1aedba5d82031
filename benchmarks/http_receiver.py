"""The OTLP/HTTP receiver alone: requests/s and receiver CPU per request, for this tree or against a git revision.

Sender processes post one pre-encoded protobuf request (`collectors_decode.build_request`: realistic RAG spans,
~100 KB at the default 256 spans) over kept-alive connections, as OTLP exporters do, to an `HttpReceiver` whose
consumer drops bodies; the receiver still decodes and validates each body, as it does in the agent. Each run is a
fresh process hosting the receiver; its CPU time (loop thread and worker pool; the senders are other processes)
divided by the requests is the CPU per request, the figure that resists this machine's drifting speed best. The
event-loop thread's share ("loop") is the HTTP handling alone: parsing, buffering, answering, asyncio; decoding
and validating run in the pool.

    python benchmarks/http_receiver.py                     # this tree, --rounds runs, medians
    python benchmarks/http_receiver.py --against HEAD      # this tree and HEAD's receiver, alternated; ratios
    python benchmarks/http_receiver.py --spans 1 --against HEAD   # a tiny body: the HTTP layer's own cost

`--against REV` checks REV out in a temporary git worktree and runs `--rounds` pairs, alternating which tree goes
first, each run importing the receiver from its tree (the driver is this script for both, so a pair compares
receivers, not benchmark versions); it prints every run, then the medians and the ratios this tree / REV.
"""

from __future__ import annotations

import argparse
import concurrent.futures
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


def _sender(port: int, body: bytes, count: int, start: Any, done: Any) -> None:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/x-protobuf"}

    def post() -> None:
        connection.request("POST", "/v1/traces", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"the receiver answered {response.status}")

    for _ in range(WARMUP_REQUESTS):
        post()
    start.wait()
    for _ in range(count):
        post()
    connection.close()
    done.put(count)


def _loop_thread_cpu_s(receiver: Any) -> float:
    """CPU seconds of the receiver's event-loop thread so far (read on that thread)."""
    result: concurrent.futures.Future[float] = concurrent.futures.Future()
    # the receiver's loop is its HTTP server's since issue 37 (collectors/http_server.py); its own before
    loop = getattr(receiver, "server", receiver)._loop
    loop.call_soon_threadsafe(lambda: result.set_result(time.thread_time()))
    return result.result(10)


def _run_one(tree: Path, body_path: Path, requests: int, senders: int) -> dict[str, float]:
    """In a fresh process: serve with `tree`'s receiver, time `requests` posts from `senders` processes."""
    _source_tree.import_from(tree)
    HttpReceiver = _source_tree.agent_package(tree, "collectors").HttpReceiver

    class DropConsumer:
        def consume(self, tenant: str, body: bytes, spans: int) -> None:
            pass

    body = body_path.read_bytes()
    per_sender = requests // senders
    context = mp.get_context("spawn")
    start, done = context.Barrier(senders + 1), context.Queue()
    with HttpReceiver(DropConsumer(), port=0) as receiver:
        processes = [
            context.Process(target=_sender, args=(receiver.port, body, per_sender, start, done)) for _ in range(senders)
        ]
        for process in processes:
            process.start()
        start.wait()
        wall, cpu, loop_cpu = time.perf_counter(), time.process_time(), _loop_thread_cpu_s(receiver)
        sent = sum(done.get(timeout=600) for _ in processes)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        loop_cpu = _loop_thread_cpu_s(receiver) - loop_cpu
        for process in processes:
            process.join()
    return {
        "requests_per_s": sent / wall,
        "cpu_us_per_request": cpu / sent * 1e6,
        "loop_cpu_us_per_request": loop_cpu / sent * 1e6,
    }


def _spawn_run(tree: Path, body_path: Path, args: argparse.Namespace) -> dict[str, float]:
    command = [sys.executable, __file__, "--run-tree", str(tree), "--body-file", str(body_path)]
    command += ["--requests", str(args.requests), "--senders", str(args.senders)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"run on {tree} failed:\n{result.stderr}")
    figures: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def _print_run(name: str, figures: dict[str, float]) -> None:
    rate, cpu, loop = (figures[k] for k in ("requests_per_s", "cpu_us_per_request", "loop_cpu_us_per_request"))
    print(
        f"  {name:<12} {rate:>9,.0f} requests/s   {cpu:>8,.0f} µs receiver CPU per request (loop {loop:,.0f} µs)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=256, help="spans per request (256: ~100 KB of protobuf)")
    parser.add_argument("--requests", type=int, default=3000, help="timed requests per run, over all senders")
    parser.add_argument("--senders", type=int, default=2, help="sender processes, one kept-alive connection each")
    parser.add_argument("--rounds", type=int, default=5, help="runs per tree")
    parser.add_argument("--against", metavar="REV", help="alternate with the receiver of this git revision")
    parser.add_argument("--run-tree", type=Path, help=argparse.SUPPRESS)  # internal: one run, figures as JSON
    parser.add_argument("--body-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_tree is not None:
        print(json.dumps(_run_one(args.run_tree, args.body_file, args.requests, args.senders)))
        return

    from collectors_decode import build_request  # the ingest benchmarks' realistic RAG request

    with tempfile.TemporaryDirectory(prefix="ragmon-http-bench-") as tmp:
        body_path = Path(tmp) / "body.pb"
        body_path.write_bytes(build_request(args.spans).SerializeToString())
        print(
            f"request: {args.spans} spans, {body_path.stat().st_size:,} B protobuf; {args.requests} requests per run "
            f"from {args.senders} senders; {args.rounds} rounds"
        )
        with _source_tree.trees(args.against, Path(tmp)) as trees:
            medians = _source_tree.alternate(
                trees, args.rounds, lambda tree: _spawn_run(tree, body_path, args), _print_run
            )
    print("medians")
    for name, figures in medians.items():
        _print_run(name, figures)
    if args.against:
        ours, theirs = medians[_source_tree.THIS_TREE], medians[args.against]
        ratios = {figure: ours[figure] / theirs[figure] for figure in ours}
        print(
            f"ratio this tree / {args.against}: requests/s {ratios['requests_per_s']:.3f}, CPU per request "
            f"{ratios['cpu_us_per_request']:.3f} (loop {ratios['loop_cpu_us_per_request']:.3f})"
        )


if __name__ == "__main__":
    main()
