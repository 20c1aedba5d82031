"""`ragmon calibrate` and `ragmon judge`: the judges joined to labelled files, the judge queue and the store.
Heavy modules are imported inside the commands so `ragmon --help` stays fast."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    from ragmon.commands.common import add_store_options, parse_duration_s

    parser.add_argument(
        "files",
        nargs="*",
        metavar="file",
        help="JSONL rows (.gz read as such): id, dataset, question, context, answer, label.faithful; several files"
        " are read as one set (or --from-store)",
    )
    parser.add_argument(
        "--from-store",
        action="store_true",
        help="agreement with people's labels of production traces (the dashboard's review queue), per metric and"
        " judge version, instead of a file",
    )
    parser.add_argument(
        "--since",
        type=parse_duration_s,
        default=30 * 86400.0,
        help="--from-store: labels of this window, e.g. 7d (default 30d)",
    )
    parser.add_argument("--judge-version", help="--from-store: only this judge version's scores")
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
    add_store_options(parser)  # --from-store: the store, or the running agent that owns it


def calibrate(args: argparse.Namespace) -> int:
    import asyncio

    if args.from_store:
        return calibrate_from_store(args)
    if not args.files:
        print("ragmon calibrate: give a labelled JSONL file, or --from-store", file=sys.stderr)
        return 2

    from ragmon.judges.calibration import calibrate as run
    from ragmon.judges.calibration import format_report, load_rows
    from ragmon.judges.registry import make_judge
    from ragmon.settings import load_settings

    rows = []
    for file in args.files:
        try:
            rows += load_rows(file)
        except (OSError, ValueError, KeyError) as exc:
            print(f"ragmon calibrate: cannot read {file}: {exc}", file=sys.stderr)
            return 2
    if args.limit is not None:
        rows = rows[: args.limit]
    if not rows:
        print(f"ragmon calibrate: no labelled rows in {', '.join(args.files)}", file=sys.stderr)
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


def calibrate_from_store(args: argparse.Namespace) -> int:
    """`ragmon calibrate --from-store`: read labels beside the judge's scores (from the store, or through the
    agent that owns an embedded one, as `ragmon report` does) and print the agreement per metric and version."""
    from ragmon.commands.common import CommandError, read_rows
    from ragmon.judges.label_agreement import agreement_by_version, format_agreement

    if args.files:
        print("ragmon calibrate: --from-store reads the store, not a file: give one or the other", file=sys.stderr)
        return 2
    try:
        rows = read_rows(args, "labelled_scores", since_s=args.since, judge_version=args.judge_version)
    except CommandError as exc:
        print(f"ragmon calibrate: {exc}", file=sys.stderr)
        return 2
    report = agreement_by_version(rows, args.threshold)
    # Beside the reviewers' labels, end users' feedback: a noisier label (judges/feedback_agreement.py says how it
    # is read). A store or agent without it costs only this part.
    from ragmon.judges.feedback_agreement import feedback_agreement, format_feedback_agreement

    try:
        feedback_rows = read_rows(args, "feedback_scores", since_s=args.since, judge_version=args.judge_version)
        feedback, feedback_error = feedback_agreement(feedback_rows, args.threshold), ""
    except CommandError as exc:
        feedback, feedback_error = None, str(exc)
    window = f"last {_duration_text(args.since)}"
    if args.json:
        document = {"since_s": args.since, "judge_version": args.judge_version, "versions": report}
        document["feedback_versions"] = feedback
        if feedback_error:
            document["unavailable"] = {"feedback_versions": feedback_error}
        print(json.dumps(document))
    else:
        print(format_agreement(report, window))
        print()
        if feedback is None:
            print(f"agreement with end users' feedback: unavailable ({feedback_error})")
        else:
            print(format_feedback_agreement(feedback, window))
    return 0


def _duration_text(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


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
    parser.add_argument("--status", action="store_true", help="print the queue's counts and exit")
    parser.add_argument("--json", action="store_true", help="--status counts, or the summary at exit, as JSON")
    # The store options of the other store commands. No --api-key: a worker beside `serve` proves itself with the
    # token the agent writes into its data directory (the judge endpoints serve every tenant).
    parser.add_argument("--clickhouse-url", help="a ClickHouse server store instead of the embedded one")
    parser.add_argument("--config", type=Path, help="settings file (TOML or JSON), as `ragmon serve --config`")


def judge(args: argparse.Namespace) -> int:
    """`ragmon judge`: the judge worker on its own (scale-out), against a queue file and the store."""
    import asyncio
    import dataclasses
    import signal

    from pydantic import ValidationError

    from ragmon.judges.queue import JudgeQueue
    from ragmon.judges.registry import make_judge
    from ragmon.settings import load_settings

    store_overrides = {"clickhouse_url": args.clickhouse_url} if args.clickhouse_url else {}
    try:
        settings = load_settings({"agent": store_overrides}, config_file=args.config)
    except (ValidationError, ValueError, OSError) as exc:
        print(f"ragmon judge: {exc}", file=sys.stderr)
        return 2
    data_dir = Path(args.data_dir) if args.data_dir else settings.agent.data_dir
    queue = JudgeQueue(args.queue) if args.queue else JudgeQueue.in_data_dir(data_dir)
    if args.status:
        counts = queue.counts()
        if args.json:
            print(json.dumps({"states": counts.by_state, "final_statuses": counts.by_status}, indent=2))
        else:
            print(format_queue_counts(counts.by_state, counts.by_status))
        queue.close()
        return 0
    try:
        backend = make_judge(args.judge or settings.judge.backend, settings.judge)
    except ValueError as exc:
        print(f"ragmon judge: {exc}", file=sys.stderr)
        queue.close()
        return 2
    try:
        store, owned, where = _store_side(settings.agent.clickhouse_url, data_dir)
    except Exception as exc:  # fail fast at start-up, with the reason (missing chDB, bad URL, locked dir)
        print(f"ragmon judge: cannot open the store: {_readable(exc, data_dir)}", file=sys.stderr)
        queue.close()
        return 2
    print(f"ragmon judge: judging as {backend.version}, store: {where}", file=sys.stderr, flush=True)
    others = {v: n for v, n in queue.pending_by_version().items() if v != backend.version}
    if others:
        listed = ", ".join(f"{n} for {v}" for v, n in sorted(others.items()))
        print(
            f"ragmon judge: the queue also holds items of other judge versions ({listed}), which this worker "
            "leaves alone: run it with the agent's judge settings (judge.backend, judge.model) to judge them",
            file=sys.stderr,
            flush=True,
        )

    from ragmon.judges.worker import JudgeWorker, WorkerConfig
    from ragmon.pipeline import FLUSH_ON_STOP_S, open_events

    try:
        events = open_events(settings.judge.events)
    except ValueError as exc:  # an endpoint the exporter cannot use: say so before judging anything
        print(f"ragmon judge: {exc}", file=sys.stderr)
        queue.close()
        store.close()
        if owned is not None:
            owned.release()
        return 2
    defaults = WorkerConfig()
    metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip()) if args.metrics else defaults.metrics
    config = dataclasses.replace(
        defaults,
        metrics=metrics,
        concurrency=args.concurrency or defaults.concurrency,
        lease_s=args.lease_s or defaults.lease_s,
    )

    async def main() -> None:
        worker = JudgeWorker(queue, backend, store.payloads, store.sink, config=config, events=events)
        loop = asyncio.get_running_loop()
        stopping: list[asyncio.Task[None]] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: stopping.append(loop.create_task(worker.stop(args.stop_timeout_s))))
        try:
            await worker.run(until_empty=args.until_empty)
        finally:
            await backend.aclose()
            if events is not None:  # send what is queued (bounded: a collector that is down cannot hold the exit)
                await asyncio.to_thread(events.shutdown, FLUSH_ON_STOP_S)
        stats = worker.stats
        summary = {
            "traces": dict(stats.traces),
            "scores": dict(stats.scores),
            "rows_delivered": stats.rows_delivered,
            "delivery_errors": stats.delivery_errors,
            "payload_errors": stats.payload_errors,
            "columns_the_scores_table_lacks": dict(store.sink.dropped_keys),
        }
        if events is not None:
            summary["evaluation_events"] = events.stats.as_dict()
        print(json.dumps(summary) if args.json else format_summary(summary))

    try:
        asyncio.run(main())
    finally:
        queue.close()
        store.close()
        if owned is not None:
            owned.release()
    return 0


def _counted(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n:,}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1])) or "none"


def format_queue_counts(by_state: dict[str, int], by_status: dict[str, int]) -> str:
    """`ragmon judge --status`: the queue's items by state, and how the finished ones ended."""
    lines = [f"judge queue: {sum(by_state.values()):,} items ({_counted(by_state)})"]
    if by_status:
        lines.append(f"finished: {_counted(by_status)}")
    return "\n".join(lines)


def format_summary(summary: dict[str, Any]) -> str:
    """What a worker did, printed as it exits."""
    traces, scores = summary["traces"], summary["scores"]
    lines = [
        f"judged {sum(traces.values()):,} traces ({_counted(traces)}); "
        f"{summary['rows_delivered']:,} scores stored ({_counted(scores)})"
    ]
    problems = {
        "score deliveries failed": summary["delivery_errors"],
        "payload reads failed": summary["payload_errors"],
    }
    if any(problems.values()):
        lines.append("; ".join(f"{n:,} {what}" for what, n in problems.items() if n) + " (the log says why)")
    events = summary.get("evaluation_events")
    if events is not None:
        dropped = sum(events["dropped"].values())
        lines.append(
            f"evaluation events: {events['exported']:,} of {events['emitted']:,} sent"
            + (f", {dropped:,} dropped ({_counted(events['dropped'])})" if dropped else "")
        )
    if summary["columns_the_scores_table_lacks"]:
        lines.append(
            "the store's scores table lacks columns the judge writes (run `ragmon migrate`): "
            + _counted(summary["columns_the_scores_table_lacks"])
        )
    return "\n".join(lines)


def _store_side(clickhouse_url: str | None, data_dir: Path) -> tuple[Any, Any, str]:
    """(store side, the data-dir lock held while judging or None, where the store is). A server store is opened
    directly (several workers may); an embedded one directly when no agent runs there, holding the data
    directory's lock meanwhile (an agent starting then says the directory is in use, instead of failing on
    chDB's lock), else through the agent that owns it, as `ragmon report` and `query` do."""
    from ragmon.agent import claim_or_find_agent
    from ragmon.pipeline import agent_store_side, open_store_side

    if clickhouse_url:
        return open_store_side(clickhouse_url, data_dir), None, f"ClickHouse at {clickhouse_url}"
    claimed = claim_or_find_agent(data_dir)
    if isinstance(claimed, str):
        return agent_store_side(data_dir), None, f"through the agent at {claimed} (it owns {data_dir})"
    try:
        claimed.publish({"command": "ragmon judge"})
        return open_store_side(None, data_dir), claimed, f"embedded ClickHouse in {data_dir}"
    except BaseException:
        claimed.release()
        raise


def _readable(exc: Exception, data_dir: Path) -> str:
    """chDB's own lock error names a status file; say what it means and what to do instead."""
    text = str(exc)
    if "Cannot lock file" in text or "published no API address" in text:
        return (
            f"the embedded store in {data_dir} is open in another process that cannot be asked for it (another "
            "`ragmon judge` or a program embedding the store). Run `ragmon serve` and start workers beside it "
            f"(they judge through its API), or use a ClickHouse server store for several workers. ({text[:300]})"
        )
    return text
