"""`ragmon compare`: a feature's candidate release against its baseline over the same span of production traffic —
overall figures and, per recurring question, which got better or worse and which paragraphs stopped being retrieved
(the named read `compare`, `ragmon.sinks.compare`). Exit 0 with a comparison, 1 when none can be made (one release
only, an unknown release), 2 on bad input."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ragmon.commands.common import CommandError, add_store_options, read_rows


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--feature", help="the feature (default: the one whose newest release appeared last)")
    parser.add_argument("--baseline", help="the release compared against (default: the one before the candidate)")
    parser.add_argument("--candidate", help="the release under test (default: the one first seen last)")
    parser.add_argument("--groups", type=int, default=10, help="question groups shown (default 10, worst first)")
    parser.add_argument("--json", action="store_true", help="the whole comparison as one JSON object")
    add_store_options(parser)


def compare(args: argparse.Namespace) -> int:
    try:
        document = read_rows(args, "compare", feature=args.feature, baseline=args.baseline, candidate=args.candidate)
    except CommandError as exc:
        print(f"ragmon compare: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(document))
        return 1 if "problem" in document else 0
    if "problem" in document:
        print(f"ragmon compare: {document['feature'] or 'no feature'}: {document['problem']}", file=sys.stderr)
        return 1
    print(format_comparison(document, max(0, args.groups)))
    return 0


def format_comparison(document: dict[str, Any], groups: int = 10) -> str:
    b, c = document["baseline"], document["candidate"]
    lines = [
        f"feature {document['feature']}: release {c['release']} against {b['release']} ({document['mode']})",
        f"  {b['release']}: {b['start']} – {b['end']}",
        f"  {c['release']}: {c['start']} – {c['end']}",
        "",
        _table(document["rows"]),
    ]
    shown = document["groups"][:groups]
    if shown:
        lines += ["", "per recurring question (worst first):"]
    for group in shown:
        mark = "REGRESSED" if group["regressed"] else "ok"
        lines += [
            "",
            f"[{mark}] {group['question']!r}  ({group['share']:.0%} of traffic; "
            f"{group['traces_baseline']} / {group['traces_candidate']} traces)",
            _table(group["rows"], indent="    "),
        ]
        if group["stopped_retrieving"]:
            lines.append(f"    stopped being retrieved: {', '.join(group['stopped_retrieving'])}")
        for doc in group["documents"]:
            lines.append(
                f"    document {doc['document']}: retrieved in {_pct(doc['baseline'])} → {_pct(doc['candidate'])}"
                f" of its traces (Δ {_signed_pct(doc['delta'])}, 95 % CI {_signed_pct(doc['ci_low'])}"
                f" … {_signed_pct(doc['ci_high'])})"
            )
        if group["example_traces"]:
            lines.append(f"    example traces: {', '.join(group['example_traces'])}")
    return "\n".join(lines)


def _table(rows: list[dict[str, Any]], indent: str = "") -> str:
    header = f"{indent}{'figure':<34} {'baseline':>11} {'candidate':>11} {'delta':>11}  {'95% CI of delta':<25} n"
    out = [header]
    for row in rows:
        name = row["metric"] + (f" [{row['part']}]" if row["part"] else "")
        flag = "  ← worse" if row["regressed"] else ""
        ci = "—" if row["ci_low"] is None else f"{_num(row['ci_low'])} … {_num(row['ci_high'])}"
        out.append(
            f"{indent}{name:<34} {_num(row['baseline']):>11} {_num(row['candidate']):>11} {_num(row['delta']):>11}"
            f"  {ci:<25} {row['n_baseline']}/{row['n_candidate']}{flag}"
        )
    return "\n".join(out)


def _num(value: Any) -> str:
    if value is None:
        return "—"
    value = float(value)
    return f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"


def _pct(value: Any) -> str:
    return "—" if value is None else f"{float(value):.0%}"


def _signed_pct(value: Any) -> str:
    return "—" if value is None else f"{float(value):+.0%}"
