"""``ragmon gate BASELINE CANDIDATE [--tolerance METRIC=X ...] [--protected FILE] [--json-out F] [--markdown-out F]``:
compares two per-row results files (`ragmon.evaluation.gate_runs`) under the rules of `ragmon.evaluation.gate`
and prints the Markdown report (``--format json`` prints the JSON one instead). Exit codes: **0** pass, **1**
regression, **2** usage or input error. ``steps``, ``budget_stop`` and ``must_not_violations`` are lower-is-better
without being told.

Like every command module, it imports the modules its command needs when the command runs, not at load time,
so `ragmon --help` and the other commands do not pay for them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ragmon.evaluation.cli import EXIT_OK, EXIT_REGRESSION, _error


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
