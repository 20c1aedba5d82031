"""Command-line entry points the ragmon CLI wires in: `ragmon calibrate` and `ragmon judge`.
Heavy modules are imported inside the commands so `ragmon --help` stays fast."""

from __future__ import annotations

import argparse
import json
import sys


def add_calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="JSONL rows: id, dataset, question, context, answer, label.faithful")
    parser.add_argument("--judge", default="local", help="judge backend name (default: local)")
    parser.add_argument("--threshold", type=float, default=None, help="decision threshold (default: the judge's)")
    parser.add_argument(
        "--fit-threshold",
        action="store_true",
        help="fit the threshold on the fitting split (sha256(id) %% 10 < 7) instead",
    )
    parser.add_argument(
        "--split", choices=("all", "fit", "heldout"), default="all", help="which rows to report on (default: all)"
    )
    parser.add_argument("--limit", type=int, default=None, help="only the first N labelled rows")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def calibrate(args: argparse.Namespace) -> int:
    import asyncio

    from judges.calibration import calibrate as run
    from judges.calibration import format_report, load_rows
    from judges.registry import make_judge
    from ragmon.settings import load_settings

    try:
        rows = load_rows(args.file)
    except (OSError, ValueError, KeyError) as exc:
        print(f"ragmon calibrate: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    if args.limit is not None:
        rows = rows[: args.limit]
    if not rows:
        print(f"ragmon calibrate: no labelled rows in {args.file}", file=sys.stderr)
        return 2
    try:
        judge = make_judge(args.judge, load_settings().judge)
    except ValueError as exc:
        print(f"ragmon calibrate: {exc}", file=sys.stderr)
        return 2

    async def main() -> dict[str, object]:
        try:
            return await run(judge, rows, threshold=args.threshold, fit=args.fit_threshold, split=args.split)
        finally:
            await judge.aclose()

    report = asyncio.run(main())
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=None, help="agent data dir (default: settings agent.data_dir)")
    parser.add_argument("--queue", default=None, help="queue file (default: <data-dir>/judge-queue.sqlite)")
    parser.add_argument("--judge", default=None, help="judge backend name (default: settings judge.backend)")
    parser.add_argument("--metrics", default=None, help="comma-separated metrics (default: the online four)")
    parser.add_argument("--concurrency", type=int, default=None, help="traces judged at once (default: 16)")
    parser.add_argument("--lease-s", type=float, default=None, help="lease length in seconds (default: 300)")
    parser.add_argument(
        "--stop-timeout-s", type=float, default=10.0, help="on SIGINT/SIGTERM, finish in-flight traces this long"
    )
    parser.add_argument("--until-empty", action="store_true", help="exit once the queue has nothing left to do")
    parser.add_argument("--status", action="store_true", help="print the queue's counts as JSON and exit")


def judge(args: argparse.Namespace) -> int:
    """`ragmon judge`: the judge worker on its own (scale-out), against a queue file and the store."""
    import asyncio
    import dataclasses
    import signal
    from pathlib import Path

    from judges.queue import JudgeQueue
    from judges.registry import make_judge
    from ragmon.settings import load_settings

    settings = load_settings()
    data_dir = Path(args.data_dir) if args.data_dir else settings.agent.data_dir
    queue = JudgeQueue(args.queue) if args.queue else JudgeQueue.in_data_dir(data_dir)
    if args.status:
        counts = queue.counts()
        print(json.dumps({"states": counts.by_state, "final_statuses": counts.by_status}, indent=2))
        queue.close()
        return 0
    try:
        backend = make_judge(args.judge or settings.judge.backend, settings.judge)
    except ValueError as exc:
        print(f"ragmon judge: {exc}", file=sys.stderr)
        queue.close()
        return 2
    from judges.store_adapter import open_store_side

    try:
        store = open_store_side(settings.agent.clickhouse_url, data_dir)
    except Exception as exc:  # fail fast at start-up, with the reason (missing chDB, bad URL, locked dir)
        print(f"ragmon judge: cannot open the store: {exc}", file=sys.stderr)
        queue.close()
        return 2

    from judges.worker import JudgeWorker, WorkerConfig

    config = WorkerConfig()
    overrides: dict[str, object] = {}
    if args.metrics:
        overrides["metrics"] = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
    if args.concurrency:
        overrides["concurrency"] = args.concurrency
    if args.lease_s:
        overrides["lease_s"] = args.lease_s
    config = dataclasses.replace(config, **overrides)  # type: ignore[arg-type]

    async def main() -> None:
        worker = JudgeWorker(queue, backend, store.payloads, store.sink, config=config)
        loop = asyncio.get_running_loop()
        stopping: list[asyncio.Task[None]] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: stopping.append(loop.create_task(worker.stop(args.stop_timeout_s))))
        try:
            await worker.run(until_empty=args.until_empty)
        finally:
            await backend.aclose()
        stats = worker.stats
        print(
            json.dumps(
                {
                    "traces": dict(stats.traces),
                    "scores": dict(stats.scores),
                    "rows_delivered": stats.rows_delivered,
                    "delivery_errors": stats.delivery_errors,
                    "payload_errors": stats.payload_errors,
                    "columns_the_scores_table_lacks": dict(store.sink.dropped_keys),
                }
            )
        )

    try:
        asyncio.run(main())
    finally:
        queue.close()
        store.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m judges.cli calibrate|judge ...` until the lead wires `judge` into ragmon/cli.py."""
    parser = argparse.ArgumentParser(prog="ragmon")
    commands = parser.add_subparsers(dest="command", required=True)
    add_calibrate_arguments(commands.add_parser("calibrate", help="agreement of a judge with human labels"))
    add_judge_arguments(commands.add_parser("judge", help="run the judge worker on the queue of kept traces"))
    args = parser.parse_args(argv)
    return judge(args) if args.command == "judge" else calibrate(args)


if __name__ == "__main__":
    raise SystemExit(main())
