"""``ragmon backeval [--since 7d] [--feature F] [--eval-run NAME | --eval] [--judge NAME] [--name RUN]
[--budget-usd X] [--yes]``: re-scores stored kept traces (production traffic unless asked for eval traffic) with a
judge as a named, resumable run (`ragmon.evaluation.backeval`). Exit codes: **0** done, **2** usage or input
error, **3** stopped by its budget, **130** interrupted (both resume with the same ``--name``).

Like every command module, it imports the modules its command needs when the command runs, not at load time,
so `ragmon --help` and the other commands do not pay for them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ragmon.evaluation.cli import EXIT_OK, _error, default_run_name

EXIT_BUDGET_STOP = 3
EXIT_INTERRUPTED = 130


def add_backeval_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``backeval``'s arguments to ``parser``."""
    from ragmon.commands import parse_duration_s

    parser.add_argument(
        "--since", type=parse_duration_s, default=7 * 86400.0, help="kept traces that started within, e.g. 7d"
    )
    parser.add_argument("--feature", help="only this feature")
    traffic = parser.add_mutually_exclusive_group()
    traffic.add_argument(
        "--eval-run", metavar="NAME", help="only the traces of this `ragmon eval run` (default: production traffic)"
    )
    traffic.add_argument("--eval", action="store_true", help="only evaluation traffic: every `ragmon eval run`")
    parser.add_argument("--judge", help="judge backend: local, llm or a plugin (default: settings judge.backend)")
    parser.add_argument("--metrics", help="comma-separated metrics (default: the four online metrics)")
    parser.add_argument("--name", help="run name; the same name resumes an interrupted run (default: judge + time)")
    parser.add_argument(
        "--budget-usd", type=float, metavar="X", help="hard cap on the run's judge spend, resumes included"
    )
    parser.add_argument("--yes", action="store_true", help="start without asking (the estimate is still printed)")
    parser.add_argument("--concurrency", type=int, default=8, help="traces scored at once (default 8)")
    parser.add_argument("--limit", type=int, metavar="N", help="at most N traces (oldest first)")
    parser.add_argument(
        "--out", type=Path, metavar="FILE", help="results file (default ragmon-runs/NAME.jsonl; journal beside it)"
    )
    parser.add_argument(
        "--merge-eval",
        type=Path,
        metavar="FILE",
        help="an `eval run` results file: write its rows with the judge's metrics added (pair with --eval-run)",
    )
    parser.add_argument("--data-dir", type=Path, help="embedded store directory (default ./.ragmon)")
    parser.add_argument("--clickhouse-url", help="a ClickHouse server instead of the embedded store")
    parser.add_argument("--config", type=Path, help="settings file (TOML or JSON)")
    parser.add_argument("--api-key", help="API key, when the agent requires one (or RAGMON_API_KEY)")


def _read_json_lines(path: Path) -> list[dict[str, Any]]:
    """Rows of a results file, validated as the gate reads them (so a merge cannot produce what it rejects)."""
    from ragmon.evaluation.gate_runs import read_results

    read_results(path)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _confirm(prompt: str) -> bool:
    print(prompt, end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def backeval(args: argparse.Namespace) -> int:
    """Re-score kept traces with a judge as a named run. Exit codes: 0 done, 2 bad input, 3 stopped by the
    budget (resume with a larger one), 130 interrupted (resume with the same --name)."""
    import asyncio
    import os
    from collections import Counter

    from pydantic import ValidationError

    from ragmon.evaluation.backeval import merge_with_eval, results_rows, score_traces
    from ragmon.evaluation.backeval_cost import estimate_cost
    from ragmon.evaluation.backeval_journal import RunJournal
    from ragmon.evaluation.backeval_source import Selection, open_trace_source
    from ragmon.evaluation.errors import EvalInputError
    from ragmon.evaluation.eval_run import write_json_lines
    from ragmon.evaluation.progress import ProgressBar
    from ragmon.settings import load_settings

    for option, value in (("--concurrency", args.concurrency), ("--limit", args.limit)):
        if value is not None and value < 1:
            return _error("backeval", f"{option} must be ≥ 1")
    if args.budget_usd is not None and not args.budget_usd >= 0:
        return _error("backeval", "--budget-usd must be ≥ 0")
    try:
        overrides = {k: v for k, v in (("data_dir", args.data_dir), ("clickhouse_url", args.clickhouse_url)) if v}
        settings = load_settings({"agent": overrides}, config_file=args.config)
    except (ValidationError, ValueError, OSError) as exc:
        return _error("backeval", str(exc))
    from ragmon.judges.worker import DEFAULT_METRICS

    judge_name = args.judge or settings.judge.backend
    metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip()) if args.metrics else DEFAULT_METRICS
    from ragmon.judges.metrics import METRICS

    unknown = [m for m in metrics if m not in METRICS]
    if unknown or not metrics:
        return _error("backeval", f"unknown metrics {unknown}; known: {', '.join(sorted(METRICS))}")
    name = args.name or default_run_name(f"backeval-{judge_name}")
    out_path = args.out or Path("ragmon-runs") / f"{name}.jsonl"
    journal_path = out_path.with_name(out_path.name.removesuffix(".jsonl") + ".journal.jsonl")

    eval_rows = None
    if args.merge_eval is not None:
        try:
            eval_rows = _read_json_lines(args.merge_eval)
        except EvalInputError as exc:
            return _error("backeval", str(exc))
    api_key = args.api_key or os.environ.get("RAGMON_API_KEY") or None
    if args.eval_run == "":
        return _error("backeval", "--eval-run needs a run name ('' is production traffic)")
    selection = Selection(
        since_s=args.since, feature=args.feature, eval_run=args.eval_run, evaluation=args.eval, limit=args.limit
    )
    try:  # the store first: a missing store fails before a judge model is loaded
        opened = open_trace_source(Path(settings.agent.data_dir), settings.agent.clickhouse_url, api_key)
    except EvalInputError as exc:
        return _error("backeval", str(exc))
    judge = None
    try:
        traces = opened.source.select(selection)
        judge = _make_judge(judge_name, settings)
        journal = RunJournal(journal_path, run=name, judge_version=str(judge.version), metrics=metrics)
        state = journal.open()
    except (EvalInputError, ValueError) as exc:
        opened.release()
        if judge is not None:
            _close_judge(judge)
        return _error("backeval", str(exc))
    remaining = None if args.budget_usd is None else max(0.0, args.budget_usd - state.spent_usd)
    _cap_budget(judge, remaining)

    try:
        todo = [t for t in traces if t.key not in state.entries]
        estimate = estimate_cost(todo, metrics, judge)
        print(
            f"backeval {name}: judge {judge.version}, metrics {', '.join(metrics)}; from {opened.where}\n"
            f"  selected {len(traces)} kept traces, {len(traces) - len(todo)} already scored in this run\n"
            f"  estimated cost: {estimate.describe()}",
            file=sys.stderr,
        )
        if remaining is not None:
            print(f"  budget: ${args.budget_usd:.4f} (${remaining:.4f} left for this run)", file=sys.stderr)
            if estimate.worst_case_usd is not None and estimate.worst_case_usd > remaining:
                print(
                    "  the worst case exceeds the budget: the run stops when it is spent; "
                    "rerun with the same --name and a larger --budget-usd to continue",
                    file=sys.stderr,
                )
        if todo and not args.yes and not _confirm("proceed? [y/N] "):
            print("backeval: not started", file=sys.stderr)
            return EXIT_OK
        bar = ProgressBar(len(todo), f"backeval {name}")
        threshold = float(getattr(judge, "faithfulness_threshold", 0.5))
        interrupted = False

        async def main() -> Any:
            try:
                return await score_traces(
                    traces,
                    judge,
                    journal,
                    run_name=name,
                    metrics=metrics,
                    concurrency=args.concurrency,
                    budget_usd=args.budget_usd,
                    progress=bar.update,
                )
            finally:
                await judge.aclose()

        outcome = None
        try:
            outcome = asyncio.run(main())
        except KeyboardInterrupt:
            interrupted = True
        finally:
            bar.close()
        entries = list(journal.state.entries.values())
        rows = results_rows(entries, run_name=name, faithfulness_threshold=threshold)
        if eval_rows is not None:
            rows = merge_with_eval(eval_rows, rows)
        try:
            write_json_lines(out_path, rows)
        except OSError as exc:
            return _error("backeval", f"cannot write {out_path}: {exc}")
        stored = _store_scores(opened.store, entries)
    finally:
        journal.close()
        opened.release()

    resume = f"rerun with --name {name} to continue"
    if interrupted or outcome is None:
        print(
            f"backeval {name}: interrupted with {len(entries)} of {len(traces)} traces scored; {resume}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    statuses = ", ".join(f"{s} {n}" for s, n in sorted(outcome.statuses.items())) or "none"
    print(
        f"backeval {name}: {outcome.scored} traces scored now, {outcome.already_done} before "
        f"(score statuses: {statuses}); spent ${outcome.spent_usd:.4f}; "
        f"results {out_path}; {stored}"
    )
    diagnoses = Counter(str(row["diagnosis"]) for row in rows if "diagnosis" in row)
    if diagnoses:
        print("triage of the merged rows: " + ", ".join(f"{d} {n}" for d, n in diagnoses.most_common()))
    if outcome.stopped_by_budget:
        print(f"backeval {name}: stopped by the budget; {resume} and a larger --budget-usd", file=sys.stderr)
        return EXIT_BUDGET_STOP
    return EXIT_OK


def _make_judge(name: str, settings: Any) -> Any:
    from ragmon.judges.registry import make_judge

    return make_judge(name, settings.judge)


def _cap_budget(judge: Any, remaining_usd: float | None) -> None:
    """Give a budgeted judge (the LLM judge's hard cap, `ragmon.judges.budget.Budget`) what is left of the run's budget;
    the run also stops by itself once its journalled spend reaches the budget (judges without a cap)."""
    if remaining_usd is None or not hasattr(judge, "budget"):
        return
    from ragmon.judges.budget import Budget

    judge.budget = Budget(remaining_usd)


def _close_judge(judge: Any) -> None:
    import asyncio

    asyncio.run(judge.aclose())


def _store_scores(store: Any, entries: list[Any]) -> str:
    """Write the run's score rows to the store when this process owns it (identical re-sends collapse)."""
    if store is None:
        return "scores not written to the store (a running agent owns it; they are in the results file)"
    from ragmon.pipeline import StoreScoreSink

    rows = [row for entry in entries for row in entry.rows]
    sink = StoreScoreSink(store)
    for start in range(0, len(rows), 5000):
        sink.write(rows[start : start + 5000])
    return f"{len(rows)} score rows in the store (run_name {entries[0].rows[0]['run_name']!r})" if rows else "no rows"
