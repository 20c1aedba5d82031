"""`ragmon report`'s feedback section: end users' own verdict per feature over the report's window (the named read
`feedback`, `ragmon.sinks.for_feedback`), read and printed like the quality section — a store or agent that cannot
answer it costs this section, never the report."""

from __future__ import annotations

import argparse
from typing import Any

from ragmon.commands.common import CommandError, read_rows


def read_feedback(args: argparse.Namespace, traffic: Any) -> tuple[list[dict[str, Any]] | None, str]:
    try:
        return read_rows(args, "feedback", since_s=args.since, feature=args.feature, traffic=traffic), ""
    except CommandError as exc:
        return None, str(exc)


def format_feedback(rows: list[dict[str, Any]]) -> str:
    """One line per feature and release: feedback received, thumbs, ratings, the share of negative verdicts (thumbs
    down or a rating of 1-2, among thumbs and ratings), and how much is not matched to a trace (yet)."""
    if not rows:
        return "end-user feedback: none in this window"
    out = ["end-user feedback (latest per user; negative = thumbs down or a rating of 1-2)"]
    out.append(
        f"  {'feature':<24} {'release':<12} {'feedback':>8} {'up':>5} {'down':>5} {'ratings':>7} {'mean':>5}"
        f" {'negative':>8}"
    )
    for row in rows:
        feature = row["feature"] or "(no trace yet)"
        mean = "-" if row.get("mean_rating") is None else f"{row['mean_rating']:.2f}"
        share = "-" if row.get("negative_share") is None else f"{100 * row['negative_share']:.0f}%"
        release = row.get("release") or "-"
        out.append(
            f"  {feature:<24} {release:<12} {row['feedback']:>8} {row['thumbs_up']:>5} {row['thumbs_down']:>5}"
            f" {row['ratings']:>7} {mean:>5} {share:>8}"
        )
    unmatched = sum(int(row["unmatched"]) for row in rows)
    if unmatched:
        out.append(f"  {unmatched} not matched to a trace: its trace has not arrived (or never will; kept until TTL)")
    return "\n".join(out)
