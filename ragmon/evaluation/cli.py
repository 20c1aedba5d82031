"""``ragmon eval`` and ``ragmon gate``: argument builders and command functions for ``ragmon.cli`` to wire in.

This module imports only the standard library at load time (numpy and the metric modules load inside the
commands), so building the ``ragmon`` parser stays cheap and works without the evaluation dependencies.

``ragmon eval retrieval --qrels Q --run R [--k 5,10] [--json] [--relevance-level 1] [--complete]``
    trec_eval-equal retrieval metrics (`ragmon.evaluation.retrieval`). Qrels: TREC ``qid 0 docid rel`` or a
    headed TSV. Run: TREC ``qid Q0 docid rank score tag``, a headed TSV, or — for a ``.jsonl`` file — a chunk run
    judged at paragraph level (`ragmon.evaluation.paragraphs`). Prints means and per-query values; ``--json``
    prints ``{"mean": {...}, "per_query": {qid: {...}}}``.

``ragmon gate BASELINE CANDIDATE [--tolerance METRIC=X ...] [--protected FILE] [--json-out F] [--markdown-out F]``
    compares two per-row results files (`ragmon.evaluation.gate_runs`) under the rules of
    `ragmon.evaluation.gate`; prints the Markdown report (``--format json`` prints the JSON one instead).

``ragmon eval run DATASET --app MODULE:FUNCTION [--name RUN] [--endpoint URL | --data-dir D | --no-export]``
    drives an app over a labelled dataset with tracing on and writes a results file (`ragmon.evaluation.eval_run`).

``ragmon backeval [--since 7d] [--feature F] [--eval-run NAME | --eval] [--judge NAME] [--name RUN] [--budget-usd X]``
``[--yes]``
    re-scores stored kept traces (production traffic unless asked for eval traffic) with a judge as a named,
    resumable run (`ragmon.evaluation.backeval`).

Exit codes: **0** pass (gate) / success; **1** regression (gate only); **2** usage or input error — unreadable or
malformed files, unknown metric names, no query to evaluate; backeval also **3** (stopped by its budget) and
**130** (interrupted; both resume with the same ``--name``). ``gate`` treats ``steps``, ``budget_stop`` and
``must_not_violations`` as lower-is-better without being told.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_INPUT_ERROR = 2


def _error(command: str, message: str) -> int:
    print(f"ragmon {command}: error: {message}", file=sys.stderr)
    return EXIT_INPUT_ERROR


def _cutoffs(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return values


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``eval``'s subcommands (``retrieval``, ``run``) to ``parser``."""
    subparsers = parser.add_subparsers(dest="eval_command", metavar="SUBCOMMAND")
    retrieval = subparsers.add_parser(
        "retrieval",
        help="P@K, R@K, F1@K, nDCG@K, hit@K and MRR from qrels and a run, equal to trec_eval",
        description="Retrieval metrics from TREC qrels and runs, with trec_eval's conventions.",
    )
    retrieval.add_argument("--qrels", required=True, type=Path, help="qrels: TREC 'qid 0 docid rel' or headed TSV")
    retrieval.add_argument(
        "--run", required=True, type=Path, help="run: TREC 'qid Q0 docid rank score tag', headed TSV, or chunk JSONL"
    )
    retrieval.add_argument("--k", type=_cutoffs, default=[5, 10], help="cut-offs, comma-separated (default 5,10)")
    retrieval.add_argument("--json", action="store_true", help='print {"mean": …, "per_query": …} as JSON')
    retrieval.add_argument(
        "--relevance-level", type=int, default=1, help="minimum grade that counts as relevant (default 1)"
    )
    retrieval.add_argument(
        "--complete", action="store_true", help="score judged queries missing from the run as 0 (trec_eval -c)"
    )

    run = subparsers.add_parser(
        "run",
        help="drive an app over a labelled dataset with tracing on; score every row; write a results file",
        description=(
            "Call APP on every dataset row with ragmon tracing on (spans tagged ragmon.eval.run / ragmon.eval.row_id"
            " and exported like production traffic), score retrieval, answers, refusals and trajectories per row,"
            " and write a results file `ragmon gate` compares."
        ),
    )
    run.add_argument("dataset", type=Path, metavar="DATASET", help="labelled questions (JSONL; see the README)")
    run.add_argument(
        "--app",
        required=True,
        metavar="MODULE:FUNCTION",
        help="entry point called with each row, returning the answer (e.g. ragmon.evaluation.demo_entry:answer)",
    )
    run.add_argument("--name", help="run name, stamped on every span (default: DATASET stem + UTC time)")
    where = run.add_mutually_exclusive_group()
    where.add_argument("--endpoint", metavar="URL", help="export spans to the agent at URL (default: settings)")
    where.add_argument(
        "--data-dir", type=Path, metavar="D", help="run an embedded agent on D for the run; spans are stored there"
    )
    where.add_argument("--no-export", action="store_true", help="score in memory only, send spans nowhere")
    run.add_argument("--out", type=Path, metavar="FILE", help="results file (default ragmon-runs/NAME.jsonl)")
    run.add_argument("--k", type=_cutoffs, default=[5, 10], help="retrieval cut-offs (default 5,10)")
    run.add_argument("--limit", type=int, metavar="N", help="only the first N rows")
    run.add_argument("--json", action="store_true", help="print the run summary as JSON")


def eval_command(args: argparse.Namespace) -> int:
    """Run the chosen ``eval`` subcommand; returns the process exit code."""
    command = getattr(args, "eval_command", None)
    if command == "retrieval":
        return _eval_retrieval(args)
    if command == "run":
        return _eval_run(args)
    return _error("eval", "choose a subcommand: retrieval, run")


def default_run_name(prefix: str) -> str:
    import datetime as dt

    return f"{prefix}-{dt.datetime.now(dt.UTC).strftime('%Y%m%dT%H%M%SZ')}"


def _eval_run(args: argparse.Namespace) -> int:
    from ragmon.evaluation.app_entry import load_entry_point
    from ragmon.evaluation.dataset import load_dataset
    from ragmon.evaluation.errors import EvalInputError
    from ragmon.evaluation.eval_run import summarise, traced_run, write_results
    from ragmon.evaluation.progress import ProgressBar

    if args.limit is not None and args.limit < 1:
        return _error("eval run", "--limit must be ≥ 1")
    try:
        rows = load_dataset(args.dataset)
        app = load_entry_point(args.app)
    except EvalInputError as exc:
        return _error("eval run", str(exc))
    rows = rows[: args.limit] if args.limit else rows
    name = args.name or default_run_name(args.dataset.stem)
    out_path = args.out or Path("ragmon-runs") / f"{name}.jsonl"
    bar = ProgressBar(len(rows), f"eval {name}")

    def drive(endpoint: str | None, export: bool) -> list[Any]:
        return traced_run(
            rows,
            app,
            run_name=name,
            dataset_name=args.dataset.name,
            ks=args.k,
            endpoint=endpoint,
            export=export,
            progress=lambda done, total: bar.update(done),
        )

    try:
        if args.data_dir is not None:
            results = _with_embedded_agent(args.data_dir, lambda endpoint: drive(endpoint, True), name)
            if results is None:
                return EXIT_INPUT_ERROR
        else:
            results = drive(args.endpoint, not args.no_export)
    finally:
        bar.close()
    try:
        write_results(out_path, results, run_name=name)
    except OSError as exc:
        return _error("eval run", f"cannot write {out_path}: {exc}")
    summary = summarise(name, results)
    if args.json:
        print(json.dumps({**summary.to_json(), "results": str(out_path)}, indent=2))
    else:
        print(f"run {name}: {summary.passed}/{summary.rows} rows passed, {summary.app_errors} app errors")
        print(
            _format_table(
                ["metric", "mean", "rows"],
                [[m, f"{v:.4f}", str(summary.measured[m])] for m, v in summary.means.items()],
            )
        )
        print(f"results: {out_path}")
    return EXIT_OK


def _with_embedded_agent(data_dir: Path, drive: Any, eval_run: str) -> Any:
    """Run an agent on ``data_dir`` (every trace keeps its text), call ``drive(endpoint)``, wait until stored."""
    from ragmon.agent.agent import DataDirInUse, DataDirLock, read_owner
    from ragmon.demo.pipeline import run_through_agent

    probe = DataDirLock(data_dir)
    try:
        probe.acquire()
    except DataDirInUse:
        owner = read_owner(data_dir) or {}
        print(
            f"ragmon eval run: error: {data_dir} is owned by a running agent (API {owner.get('api', 'unknown')}); "
            "send the run to it with --endpoint (its OTLP/HTTP address)",
            file=sys.stderr,
        )
        return None
    probe.release()

    captured: list[Any] = []

    def run_app(endpoint: str) -> int:
        captured.append(drive(endpoint))
        return 0

    import os

    keep_all = {"policies": [{"type": "error"}, {"type": "baseline", "rate": 1.0}]}
    # The agent lives only as long as the run: judging there would be cut off mid-way (`ragmon backeval` judges
    # the stored traces afterwards, resumably), so its judge worker stays off.
    saved = os.environ.get("RAGMON_JUDGE__RUN_IN_AGENT")
    os.environ["RAGMON_JUDGE__RUN_IN_AGENT"] = "false"
    try:
        code = run_through_agent(data_dir, run_app, out=sys.stderr, sampling=keep_all, eval_run=eval_run)
    finally:
        if saved is None:
            os.environ.pop("RAGMON_JUDGE__RUN_IN_AGENT", None)
        else:
            os.environ["RAGMON_JUDGE__RUN_IN_AGENT"] = saved
    return captured[0] if code == 0 and captured else None


def _format_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths, strict=True)))
        for r in [header, *rows]
    ]
    return "\n".join(lines)


def _eval_retrieval(args: argparse.Namespace) -> int:
    from ragmon.evaluation.errors import EvalInputError
    from ragmon.evaluation.paragraphs import evaluate_chunks, read_chunk_run
    from ragmon.evaluation.retrieval import evaluate
    from ragmon.evaluation.trec_files import read_qrels, read_run

    try:
        qrels = read_qrels(args.qrels)
        if args.run.suffix == ".jsonl":
            report = evaluate_chunks(
                qrels, read_chunk_run(args.run), args.k, relevance_level=args.relevance_level, complete=args.complete
            )
        else:
            report = evaluate(
                qrels, read_run(args.run), args.k, relevance_level=args.relevance_level, complete=args.complete
            )
    except EvalInputError as exc:
        return _error("eval retrieval", str(exc))
    if not report.per_query:
        return _error("eval retrieval", "no query appears in both the qrels and the run")
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return EXIT_OK
    skipped = len(report.unjudged_queries)
    absent = len(report.unretrieved_queries)
    absent_note = "scored 0" if args.complete else "skipped"
    print(
        f"{report.num_queries} queries evaluated; {skipped} run queries without qrels skipped; "
        f"{absent} judged queries absent from the run {absent_note}."
    )
    names = list(report.mean)
    print(_format_table(["metric", "mean"], [[name, f"{report.mean[name]:.4f}"] for name in names]))
    print()
    print(
        _format_table(
            ["query", *names], [[qid, *(f"{m[n]:.4f}" for n in names)] for qid, m in report.per_query.items()]
        )
    )
    return EXIT_OK


def _tolerance(text: str) -> tuple[str, float]:
    name, sep, value = text.rpartition("=")
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not sep or not name or not number >= 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"expected METRIC=NUMBER with NUMBER ≥ 0, got {text!r}")
    return name, number


def add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``gate``'s arguments to ``parser``."""
    parser.add_argument("baseline", type=Path, metavar="BASELINE", help="per-row results of the baseline (JSONL)")
    parser.add_argument("candidate", type=Path, metavar="CANDIDATE", help="per-row results of the candidate (JSONL)")
    parser.add_argument(
        "--tolerance",
        type=_tolerance,
        nargs="+",
        action="extend",
        default=[],
        metavar="METRIC=X",
        help="allowed drop of METRIC (absolute); repeatable",
    )
    parser.add_argument(
        "--default-tolerance",
        type=float,
        default=0.0,
        metavar="X",
        help="allowed drop for metrics without their own tolerance (default 0)",
    )
    parser.add_argument(
        "--lower-is-better",
        nargs="+",
        action="extend",
        default=[],
        metavar="METRIC",
        help="metrics where a rise is the regression (latency, cost; steps, budget_stop, must_not_violations always)",
    )
    parser.add_argument(
        "--ignore",
        nargs="+",
        action="extend",
        default=[],
        metavar="METRIC",
        help="report these metrics without gating them",
    )
    parser.add_argument(
        "--protected", type=Path, metavar="FILE", help="row or question ids, one per line, that must not regress"
    )
    parser.add_argument("--json-out", type=Path, metavar="F", help="write the JSON report to F")
    parser.add_argument("--markdown-out", type=Path, metavar="F", help="write the Markdown report to F")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown", help="what to print")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default 2000)")
    parser.add_argument("--confidence", type=float, default=0.95, help="interval confidence (default 0.95)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")


def gate(args: argparse.Namespace) -> int:
    """Compare two runs; returns 0 (pass), 1 (regression) or 2 (usage or input error)."""
    from ragmon.evaluation.errors import EvalInputError
    from ragmon.evaluation.gate import GateConfig, compare_runs
    from ragmon.evaluation.gate_report import gate_json, gate_markdown
    from ragmon.evaluation.gate_runs import read_protected, read_results
    from ragmon.evaluation.row_metrics import LOWER_IS_BETTER

    try:
        baseline, candidate = read_results(args.baseline), read_results(args.candidate)
        present = {m for rows in (baseline, candidate) for row in rows.values() for m in row.metrics}
        config = GateConfig(
            tolerances=dict(args.tolerance),
            default_tolerance=args.default_tolerance,
            # Metrics `eval run` writes where a rise is the regression (steps, budget stops) need no flag.
            lower_is_better=frozenset(args.lower_is_better) | (LOWER_IS_BETTER & present),
            ignore=frozenset(args.ignore),
            protected=tuple(read_protected(args.protected)) if args.protected else (),
            resamples=args.resamples,
            confidence=args.confidence,
            seed=args.seed,
        )
        result = compare_runs(baseline, candidate, config)
    except EvalInputError as exc:
        return _error("gate", str(exc))
    names = {"baseline": str(args.baseline), "candidate": str(args.candidate)}
    report: dict[str, Any] = gate_json(result, **names)
    markdown = gate_markdown(result, **names)
    try:
        if args.json_out:
            args.json_out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        if args.markdown_out:
            args.markdown_out.write_text(markdown, encoding="utf-8")
    except OSError as exc:
        return _error("gate", f"cannot write report: {exc}")
    print(
        json.dumps(report, indent=2) if args.format == "json" else markdown, end="" if args.format != "json" else "\n"
    )
    return EXIT_OK if result.passed else EXIT_REGRESSION


# -- backeval ----------------------------------------------------------------------------------------------------
EXIT_BUDGET_STOP = 3
EXIT_INTERRUPTED = 130


def add_backeval_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``backeval``'s arguments to ``parser``."""
    from ragmon.agent.commands import parse_duration_s

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
    from ragmon.agent.judge_store import StoreScoreSink

    rows = [row for entry in entries for row in entry.rows]
    sink = StoreScoreSink(store)
    for start in range(0, len(rows), 5000):
        sink.write(rows[start : start + 5000])
    return f"{len(rows)} score rows in the store (run_name {entries[0].rows[0]['run_name']!r})" if rows else "no rows"
