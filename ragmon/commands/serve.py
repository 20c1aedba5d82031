"""`ragmon serve`: run the agent until SIGTERM or SIGINT, then store what was acknowledged."""

from __future__ import annotations

import argparse
import gc
import signal
import sys
import threading

from ragmon.commands.common import add_store_options, command_settings

# Allocations (net) between young-generation collections; Python's default is 700.
_GC_YOUNG_THRESHOLD = 50_000


def _tune_gc_for_serving() -> None:
    """The agent keeps many long-lived objects (traces waiting for a decision, the decision cache) and makes
    short-lived ones by the hundred thousand a second; with Python's default thresholds the cyclic collector
    traversed the long-lived ones again and again, a visible share of the agent's CPU under `benchmarks/ingest.py`
    (perf), and ingest ran faster without it (docs/results.md).
    Freezing what start-up made takes it out of every collection; a higher young threshold makes collections rarer.
    Only `ragmon serve` does this: an agent embedded in someone else's process leaves their collector alone."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(_GC_YOUNG_THRESHOLD, middle, old)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--otlp-http", metavar="HOST:PORT", help="OTLP/HTTP receiver (default 127.0.0.1:4318)")
    parser.add_argument("--otlp-grpc", metavar="HOST:PORT", help="OTLP/gRPC receiver (default 127.0.0.1:4317)")
    parser.add_argument(
        "--api", metavar="HOST:PORT", help="the dashboard (at /) and the report/query API (default 127.0.0.1:4320)"
    )
    parser.add_argument(
        "--instance", type=int, help="this agent's number (0-4095), distinct per agent sharing one ClickHouse"
    )
    add_store_options(parser)


def serve(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from ragmon.agent import Agent, DataDirInUse
    from ragmon.commands.check import config_error

    try:
        settings = command_settings(
            args, otlp_http=args.otlp_http, otlp_grpc=args.otlp_grpc, api=args.api, instance=args.instance
        )
        agent = Agent(settings)
        agent.start()
        _tune_gc_for_serving()
    except (ValidationError, ValueError, DataDirInUse, OSError) as exc:
        print(f"ragmon serve: {config_error(exc)}", file=sys.stderr)
        return 2
    store = settings.agent.clickhouse_url or f"embedded ClickHouse (chDB) in {settings.agent.data_dir}"
    print(f"ragmon agent listening: OTLP/HTTP http://{settings.agent.otlp_http}/v1/traces", flush=True)
    if settings.agent.otlp_grpc:
        print(f"                        OTLP/gRPC {settings.agent.otlp_grpc}", flush=True)
    assert agent.api is not None
    print(f"                        dashboard {agent.api.url}/ (and the report/query API)", flush=True)
    print("                        health and metrics at the OTLP/HTTP port: /health, /metrics", flush=True)
    print(f"store: {store}; Ctrl-C to stop", flush=True)
    stopping = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    stopping.wait()
    print("stopping: storing what was acknowledged…", flush=True)
    agent.stop()
    unstored, unstored_bytes = agent.pipeline.intake.backlog
    if unstored:
        print(
            f"{unstored} acknowledged requests ({unstored_bytes} bytes) were not stored before the deadline; "
            "they stay in the write-ahead log and are stored at the next start",
            flush=True,
        )
    else:
        print("stopped: everything acknowledged is stored", flush=True)
    return 0
