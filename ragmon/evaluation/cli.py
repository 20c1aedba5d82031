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

Exit codes, both commands: **0** pass (gate) / success (eval); **1** regression (gate only); **2** usage or input
error — unreadable or malformed files, unknown metric names, no query to evaluate.
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
    """Add ``eval``'s subcommands (``retrieval``; ``run`` comes later) to ``parser``."""
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


def eval_command(args: argparse.Namespace) -> int:
    """Run the chosen ``eval`` subcommand; returns the process exit code."""
    if getattr(args, "eval_command", None) == "retrieval":
        return _eval_retrieval(args)
    return _error("eval", "choose a subcommand: retrieval")


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
        help="metrics where a rise is the regression (latency, cost)",
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

    try:
        config = GateConfig(
            tolerances=dict(args.tolerance),
            default_tolerance=args.default_tolerance,
            lower_is_better=frozenset(args.lower_is_better),
            ignore=frozenset(args.ignore),
            protected=tuple(read_protected(args.protected)) if args.protected else (),
            resamples=args.resamples,
            confidence=args.confidence,
            seed=args.seed,
        )
        result = compare_runs(read_results(args.baseline), read_results(args.candidate), config)
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
