"""`ragmon report`: latency, errors, tokens and cost per feature and stage, what the tail sampler kept, judged
quality, each release seen side by side, end users' feedback, the most common questions and the documents answers
were built on, over one window of one traffic (of one release or environment when asked: --release, --environment)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from ragmon.commands.common import (
    CommandError,
    add_store_options,
    add_traffic_arguments,
    parse_duration_s,
    read_rows,
    traffic_of,
)
from ragmon.commands.feedback_section import format_feedback, read_feedback
from ragmon.commands.report_questions import format_questions, most_common_questions

REPORT_FIELDS = (
    "feature",
    "stage",
    "requests",
    "error_rate",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "ttft_p95_ms",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "cost_per_request_usd",
)


def format_sampler_counts(counts: Mapping[str, int], *, evaluation: bool = False) -> str:
    """A sampler's own decision counts (`Sampler.counts`: `kept:<reason>`, `decided:skip|drop`; an eval run's under
    `eval:`) as the kept share `ragmon report` prints: production's, or with `evaluation` the eval runs'."""
    from ragmon.sampling import decision_counts
    from ragmon.sinks.kept_share import format_kept_share, summarise

    rows = []
    for key, n in decision_counts(counts, evaluation=evaluation).items():
        if key.startswith("kept:"):
            rows.append({"feature": "", "outcome": "keep", "reason": key.split(":", 1)[1], "traces": n})
        elif key in ("decided:skip", "decided:drop"):
            rows.append({"feature": "", "outcome": key.split(":", 1)[1], "reason": "", "traces": n})
    return format_kept_share(summarise(rows))


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", type=parse_duration_s, default=3600.0, help="window, e.g. 15m, 1h, 7d (default 1h)")
    parser.add_argument("--feature", help="only this feature")
    parser.add_argument("--release", help="only this release of the app (its service.version)")
    parser.add_argument("--environment", help="only this environment (deployment.environment.name)")
    add_traffic_arguments(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help='one JSON object: {"stages": [...], "sampling": {...}, "quality": [...], "releases": [...],'
        ' "feedback": [...], "questions": ..., "documents": {...}}, the sections of the text',
    )
    add_store_options(parser)


def report(args: argparse.Namespace) -> int:
    try:
        traffic = traffic_of(args)
        rows = read_rows(args, "report", since_s=args.since, feature=args.feature, traffic=traffic, **_where(args))
    except CommandError as exc:
        print(f"ragmon report: {exc}", file=sys.stderr)
        return 2
    sampling, sampling_error = _kept_share(args, traffic)
    quality, quality_error = _section(args, "quality", traffic)
    releases, releases_error = _section(args, "releases", traffic)
    feedback, feedback_error = read_feedback(args, traffic)
    questions, questions_error = most_common_questions(args, traffic)
    documents, documents_error = _documents(args, traffic)
    if args.json:
        unavailable = {
            "sampling": sampling_error,
            "quality": quality_error,
            "releases": releases_error,
            "feedback": feedback_error,
            "questions": questions_error,
            "documents": documents_error,
        }
        document = {
            "since_s": args.since,
            "feature": args.feature,
            "release": args.release,
            "environment": args.environment,
            "traffic": traffic.label(),
            "stages": rows,
            "sampling": sampling,
            "quality": quality,
            "releases": releases,
            "feedback": feedback,
            "questions": questions,
            "documents": documents,
            "unavailable": {section: error for section, error in unavailable.items() if error},
        }
        print(json.dumps(document, default=str))
        return 0
    from ragmon.sinks.kept_share import format_kept_share

    # Say which traffic this is: evaluation runs are kept out of production figures, and how to see them.
    aside = "; evaluation runs: --eval or --eval-run NAME" if traffic.is_production else ""
    print(f"traffic: {traffic.label()}{aside}{_where_label(args)}")
    print(format_report(rows))
    print(f"\ntail sampler: unavailable ({sampling_error})" if sampling is None else "\n" + format_kept_share(sampling))
    print(f"\njudged quality: unavailable ({quality_error})" if quality is None else "\n" + format_quality(quality))
    print(f"\nreleases: unavailable ({releases_error})" if releases is None else "\n" + format_releases(releases))
    print(
        f"\nend-user feedback: unavailable ({feedback_error})" if feedback is None else "\n" + format_feedback(feedback)
    )
    print(
        f"\nMost common questions: unavailable ({questions_error})"
        if questions is None
        else "\n" + format_questions(questions)
    )
    print(f"\ndocuments: unavailable ({documents_error})" if documents is None else "\n" + format_documents(documents))
    return 0


def _where(args: argparse.Namespace) -> dict[str, Any]:
    return {"release": args.release, "environment": args.environment}


def _where_label(args: argparse.Namespace) -> str:
    parts = [f"{name} {value}" for name, value in _where(args).items() if value]
    return "; " + ", ".join(parts) if parts else ""


def _kept_share(args: argparse.Namespace, traffic: Any) -> tuple[dict[str, Any] | None, str]:
    """What the tail sampler kept over the same window, by reason (read like the quality section). Its counts are
    not kept per release, so with --release or --environment it says so instead of showing every release's."""
    if any(_where(args).values()):
        return None, "the sampler's counts are not kept per release or environment"
    try:
        return read_rows(args, "kept_share", since_s=args.since, feature=args.feature, traffic=traffic), ""
    except CommandError as exc:
        return None, str(exc)


def _section(args: argparse.Namespace, read: str, traffic: Any) -> tuple[list[dict[str, Any]] | None, str]:
    """Judged quality, or the releases, over the same window. A store or agent that cannot answer it (older schema,
    no scores table, an older agent without the read) costs this section, never the report."""
    try:
        params = {"since_s": args.since, "feature": args.feature, "traffic": traffic, **_where(args)}
        return read_rows(args, read, **params), ""
    except CommandError as exc:
        return None, str(exc)


def format_releases(rows: list[dict[str, Any]]) -> str:
    """Per feature, each release seen in the window, oldest first: when, how much traffic, how fast, how often it
    failed, what a request cost, and its judged quality weighted back to all traffic (per metric, with the 95 %
    interval and how many scores it rests on)."""
    if not rows:
        return "releases: no requests in this window"
    headers = ("feature", "release", "env", "first seen", "last seen", "requests", "errors", "p95 ms", "$/request")
    metrics = sorted({q["metric"] for row in rows for q in row["quality"]})
    table = [(*headers, *(f"{metric}, weighted" for metric in metrics))]
    for row in rows:
        by_metric = {}  # of several judge versions of a metric, the one with the most scores
        for q in sorted(row["quality"], key=lambda q: q["ok"]):
            by_metric[q["metric"]] = q
        table.append(
            (
                row["feature"],
                row["release"] or "(none)",
                ",".join(row["environments"]) or "-",
                _minute(row["first_seen"]),
                _minute(row["last_seen"]),
                str(row["requests"]),
                "-" if row["error_rate"] is None else f"{row['error_rate'] * 100:.1f}%",
                _ms(row["p95_ms"]),
                "-" if row["cost_per_request_usd"] is None else f"{row['cost_per_request_usd']:.6f}",
                *(_judged(by_metric.get(metric)) for metric in metrics),
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    out = ["releases (production numbers per release; quality weighted back to all traffic, n = scores)"]
    out += ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table]
    out.insert(2, "  ".join("-" * width for width in widths))
    return "\n".join(out)


def _judged(quality: dict[str, Any] | None) -> str:
    if quality is None:
        return "-"
    weighted = quality["weighted"]
    return f"{_estimate(weighted)} n={weighted['n']}" if weighted["mean"] is not None else "-"


def _minute(iso: str | None) -> str:
    return "-" if not iso else iso[:16].replace("T", " ")


# How many documents the report lists: the most retrieved, and those in answers judged bad above their feature's rate.
REPORT_DOCUMENTS = 10


def _documents(args: argparse.Namespace, traffic: Any) -> tuple[dict[str, Any] | None, str]:
    """The most retrieved documents and the problem documents over the same window (read like the quality section:
    a store or agent without the document reads costs this section only). They are not kept apart per release
    or environment yet, so with --release or --environment it says so instead of showing every release's."""
    if any(_where(args).values()):
        return None, "the document views are not read per release or environment yet"
    try:
        window = {"since_s": args.since, "feature": args.feature, "traffic": traffic, "limit": REPORT_DOCUMENTS}
        return {
            "top": read_rows(args, "documents", **window),
            "problems": read_rows(args, "problem_documents", **window),
        }, ""
    except CommandError as exc:
        return None, str(exc)


def format_documents(documents: dict[str, Any]) -> str:
    """The documents section: per document (its paragraph or source, else its chunk id) of the answers' final
    context, how often and at which rank it was retrieved and the share of its judged answers judged unfaithful;
    then the documents in answers judged unfaithful or unhelpful more often than their feature's answers."""
    top, problems = documents["top"], documents["problems"]
    if not top:
        return "documents: no retrieved documents in this window"
    out = [f"documents (the {len(top)} most retrieved into answers' final context)"]
    out += _table(
        ("feature", "document", "retrieved", "traces", "mean rank", "first", "chunks", "unfaithful", "top question"),
        [
            (
                d["feature"],
                d["doc"],
                str(d["retrieved"]),
                str(d["traces"]),
                f"{d['mean_rank']:.1f}",
                str(d["first"]),
                str(d["chunks"]),
                "-" if d["unfaithful_share"] is None else f"{d['unfaithful_share']:.0%}",
                d["groups"][0]["label"] or d["groups"][0]["example"] if d["groups"] else "-",
            )
            for d in top
        ],
    )
    if not problems:
        out.append("\nproblem documents: none judged bad more often than their feature's answers")
        return "\n".join(out)
    out.append("\nproblem documents (in answers judged unfaithful or unhelpful more often than the feature's)")
    out += _table(
        ("feature", "document", "bad/judged", "share", "feature's share", "excess", "z"),
        [
            (
                p["feature"],
                p["doc"],
                f"{p['bad']}/{p['judged']}",
                f"{p['bad_share']:.0%}",
                f"{p['baseline_share']:.0%}",
                f"{p['excess']:.1f}",
                "-" if p["z"] is None else f"{p['z']:.1f}",
            )
            for p in problems
        ],
    )
    return "\n".join(out)


def _table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    table = [headers, *rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return lines


def format_quality(rows: list[dict[str, Any]]) -> str:
    """Per feature, day, metric and judge version: the mean over kept traces and the mean weighted back to all
    traffic (1 / inclusion probability), each with its 95 % interval."""
    if not rows:
        return "judged quality: no scores in this window"
    headers = ("feature", "day", "metric", "judge", "ok/judged", "kept mean [95% CI]", "all traffic [95% CI]", "flags")
    table = [headers]
    for row in rows:
        weighted = row["weighted"]
        flags = []
        if row["refusals"]:
            flags.append(f"{row['refusals']} refusal")
        if row["unparseable"]:
            flags.append(f"{row['unparseable']} unparseable")
        if row["unknown_weight"]:
            flags.append(f"{row['unknown_weight']} without weight")
        table.append(
            (
                row["feature"],
                row["day"],
                row["metric"],
                row["judge_version"],
                f"{row['ok']}/{row['judged']}",
                _estimate(row["kept"]),
                _estimate(weighted) + (f" ≈{weighted['traffic']:.0f} traces" if weighted["mean"] is not None else ""),
                ", ".join(flags) or "-",
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    out = ["judged quality (kept traces, and weighted back to all traffic)"]
    out += ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table]
    out.insert(2, "  ".join("-" * width for width in widths))
    return "\n".join(out)


def _estimate(estimate: dict[str, Any]) -> str:
    if estimate["mean"] is None:
        return "-"
    if estimate["ci_low"] is None:
        return f"{estimate['mean']:.3f} [n<2]"
    return f"{estimate['mean']:.3f} [{estimate['ci_low']:.3f}, {estimate['ci_high']:.3f}]"


def format_report(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no spans in this window"
    headers = (
        "feature",
        "stage",
        "requests",
        "errors",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "ttft p95",
        "tokens in/out",
        "cost $",
        "$/request",
    )
    table = [headers]
    for row in rows:
        table.append(
            (
                str(row["feature"]),
                str(row["stage"]),
                str(row["requests"]),
                f"{row['error_rate'] * 100:.1f}%",
                _ms(row["p50_ms"]),
                _ms(row["p95_ms"]),
                _ms(row["p99_ms"]),
                _ms(row.get("ttft_p95_ms")),
                f"{row['input_tokens']}/{row['output_tokens']}",
                "-" if row["cost_usd"] is None else f"{row['cost_usd']:.4f}",
                "-" if row["cost_per_request_usd"] is None else f"{row['cost_per_request_usd']:.6f}",
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    out = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in table]
    out.insert(1, "  ".join("-" * width for width in widths))
    # Per model only where a stage used more than one: elsewhere the row above says it all.
    models = [
        (row["feature"], row["stage"], m) for row in rows if len(row.get("models", [])) > 1 for m in row["models"]
    ]
    if models:
        out.append("")
        out.append("per model: feature / stage / model: requests, p95 ms, cost $")
        for feature, stage, model in models:
            cost = "-" if model.get("cost_usd") is None else f"{model['cost_usd']:.4f}"
            out.append(
                f"  {feature} / {stage} / {model.get('model') or '-'}: {model.get('requests')}, "
                f"{_ms(model.get('p95_ms'))}, {cost}"
            )
    return "\n".join(out)


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}"
