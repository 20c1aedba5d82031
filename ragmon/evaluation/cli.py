"""``ragmon eval``: argument builders and command functions for ``ragmon.cli`` to wire in (``ragmon gate`` is in
`gate_cli`, ``ragmon backeval`` in `backeval_cli`).

This module imports only the standard library at load time (numpy and the metric modules load inside the
commands), so building the ``ragmon`` parser stays cheap and works without the evaluation dependencies.

``ragmon eval retrieval --qrels Q --run R [--k 5,10] [--json] [--relevance-level 1] [--complete]``
    trec_eval-equal retrieval metrics (`ragmon.evaluation.retrieval`). Qrels: TREC ``qid 0 docid rel`` or a
    headed TSV. Run: TREC ``qid Q0 docid rank score tag``, a headed TSV, or — for a ``.jsonl`` file — a chunk run
    judged at paragraph level (`ragmon.evaluation.paragraphs`). Prints means and per-query values; ``--json``
    prints ``{"mean": {...}, "per_query": {qid: {...}}}``.


``ragmon eval run DATASET --app MODULE:FUNCTION [--name RUN] [--endpoint URL | --data-dir D | --no-export]``
    drives an app over a labelled dataset with tracing on and writes a results file (`ragmon.evaluation.eval_run`).


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
    run.add_argument("dataset", type=Path, metavar="DATASET", help="labelled questions (JSONL; see docs/evaluation.md)")
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
    from ragmon.agent import DataDirInUse, DataDirLock, read_owner
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
