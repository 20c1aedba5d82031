"""Command-line entry points the ragmon CLI wires in: `ragmon calibrate` (and, later, `ragmon judge`).
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


def main(argv: list[str] | None = None) -> int:
    """`python -m judges.cli calibrate ...` until the lead wires it into ragmon/cli.py."""
    parser = argparse.ArgumentParser(prog="ragmon")
    commands = parser.add_subparsers(dest="command", required=True)
    add_calibrate_arguments(commands.add_parser("calibrate", help="agreement of a judge with human labels"))
    args = parser.parse_args(argv)
    return calibrate(args)


if __name__ == "__main__":
    raise SystemExit(main())
