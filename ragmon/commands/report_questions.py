"""`ragmon report`'s "Most common questions": the named read `question_groups` over the report's window, each group
against the window before it (share of requests, error rate, p95, judged quality, refusals, and how each moved)."""

from __future__ import annotations

import argparse
from typing import Any

from ragmon.commands.common import CommandError, read_rows

SHOWN = 10


def most_common_questions(args: argparse.Namespace, traffic: Any) -> tuple[list[dict[str, Any]] | None, str]:
    """The section's groups, or None and why (an older store or agent without the read costs the section only)."""
    try:
        return read_rows(
            args, "question_groups", since_s=args.since, feature=args.feature, traffic=traffic, limit=SHOWN
        ), ""
    except CommandError as exc:
        return None, str(exc)


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _delta(value: Any, *, points: bool = True) -> str:
    if value is None:
        return ""
    return f" ({'+' if value >= 0 else ''}{100 * value:.0f}{' pts' if points else ''})"


def _quality(group: dict[str, Any]) -> str:
    parts = []
    for metric, q in sorted(group["quality"].items()):
        if q.get("mean") is not None:
            change = group["change"]["quality"].get(metric)
            parts.append(f"{metric} {q['mean']:.2f}{'' if change is None else f' ({change:+.2f})'}")
    return ", ".join(parts) or "not judged"


def format_questions(groups: list[dict[str, Any]]) -> str:
    if not groups:
        return "Most common questions: none grouped in this window"
    lines = ["Most common questions (this window; change against the window before):"]
    for rank, g in enumerate(groups, 1):
        p95 = "-" if g["p95_ms"] is None else f"{g['p95_ms']:.0f} ms"
        lines.append(f"{rank:>2}. \"{g['label'][:90]}\"  [{g['feature']}, {g['group_id']}]")
        lines.append(
            f"    share {_pct(g['share'])}{_delta(g['change']['share'])} of {g['requests']} requests, "
            f"errors {_pct(g['error_rate'])}{_delta(g['change']['error_rate'])}, p95 {p95}, "
            f"refusals {_pct(g['refusal_rate'])}, quality: {_quality(g)}"
        )
        others = [e for e in g["examples"] if e != g["label"]][:2]
        if others:
            lines.append("    also asked as: " + " | ".join(f'"{e[:60]}"' for e in others))
    return "\n".join(lines)
