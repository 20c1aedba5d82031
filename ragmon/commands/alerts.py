"""`ragmon alerts [--json]`: open and recent alerts from the store's `alerts` table, one line (or object) per alert.

The store is read when the command runs, by the named read `alerts` (`ragmon.sinks.named_reads`: through the agent's
API when an agent owns the data directory). Rows of one alert (firing, then resolved) are collapsed into one entry.
Works with the `alerts` table as it is (extras folded into `labels`) and with the extra columns of
`record.ALERT_EXTRA_COLUMNS`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from ragmon.commands.common import CommandError, add_store_options, parse_duration_s, read_rows

ALERT_FIELDS = (
    "alert_id",
    "state",
    "rule",
    "severity",
    "tenant",
    "feature",
    "stage",
    "metric",
    "detector",
    "fired_at",
    "resolved_at",
    "value",
    "threshold",
    "baseline_value",
    "current_value",
    "message",
    "evidence",
    "trace_ids",
)


def add_alerts_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="a JSON array of alerts (a stable contract)")
    parser.add_argument(
        "--since", type=parse_duration_s, default=86_400.0, help="recent window, e.g. 1h, 7d (default 24h)"
    )
    parser.add_argument("--open", action="store_true", help="only alerts still firing")
    parser.add_argument("--limit", type=int, default=500, help="at most this many alert rows (default 500)")
    add_store_options(parser)


def alerts(args: argparse.Namespace) -> int:
    try:
        rows: list[dict[str, Any]] = read_rows(args, "alerts", since_s=args.since, limit=args.limit)
    except CommandError as exc:
        print(f"ragmon alerts: {exc}", file=sys.stderr)
        return 2
    items = collapse_alert_rows(rows)
    if args.open:
        items = [item for item in items if item["state"] == "firing"]
    if args.json:
        print(json.dumps(items, default=str))
    else:
        print(format_alerts(items))
        if not items:
            print(_history_note(args))
    return 0


# The default rules' baselines: 60 one-minute windows of history for most signals, 24 fifteen-minute windows for
# judged quality (each signal's default rule, `ragmon.drift.signals`). Before that, a rule cannot fire, whatever
# happens.
_HISTORY_NEEDED = "the default rules need about an hour of traffic before they can fire (judged quality: six hours)"


def _history_note(args: argparse.Namespace) -> str:
    """Why an empty list may mean "too early to tell" rather than "all is well": how much traffic the store has
    (production: evaluation runs never feed the drift rules, `ragmon.sinks.traffic`)."""
    why = "  drift rules compare recent traffic with a baseline of earlier traffic"
    try:
        minutes = int(read_rows(args, "production_minutes")["minutes"])
    except (CommandError, ValueError, TypeError, KeyError):
        return f"{why}: {_HISTORY_NEEDED}"
    return f"{why}: {_HISTORY_NEEDED}; this store has " + (
        f"production traffic in {minutes} minute(s)" if minutes else "no production traffic yet"
    )


def _extra(row: Mapping[str, Any], name: str) -> Any:
    """A column from the extended table, else the same field folded into labels."""
    if name in row:
        return row[name]
    labels = row.get("labels") or {}
    return labels.get(name)


def _float(value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _time(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value.isoformat() if isinstance(value, datetime) else str(value)


def collapse_alert_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per alert id, newest first: the firing row's figures, the state and resolve time of the latest."""
    by_id: dict[str, dict[str, Any]] = {}
    for row in rows:
        alert_id = str(row["alert_id"])
        entry = by_id.get(alert_id)
        resolved = row.get("state") == "resolved"
        if entry is None or (entry["state"] == "resolved" and not resolved):
            evidence = _extra(row, "evidence")
            trace_ids = _extra(row, "trace_ids")
            if isinstance(trace_ids, str):
                trace_ids = [t for t in trace_ids.split(",") if t]
            fresh = {
                "alert_id": alert_id,
                "state": "resolved" if entry is not None else str(row.get("state")),
                "rule": row.get("rule"),
                "severity": row.get("severity"),
                "tenant": row.get("tenant"),
                "feature": row.get("feature"),
                "stage": row.get("stage"),
                "metric": row.get("metric"),
                "detector": _extra(row, "detector"),
                "fired_at": _time(row.get("fired_at")),
                "resolved_at": entry["resolved_at"] if entry is not None else _time(_extra(row, "resolved_at")),
                "value": _float(row.get("value")),
                "threshold": _float(row.get("threshold")),
                "baseline_value": _float(_extra(row, "baseline_value")),
                "current_value": _float(_extra(row, "current_value")),
                "message": row.get("message"),
                "evidence": json.loads(evidence) if isinstance(evidence, str) and evidence else (evidence or {}),
                "trace_ids": list(trace_ids or []),
            }
            by_id[alert_id] = fresh
        if resolved:
            by_id[alert_id]["state"] = "resolved"
            by_id[alert_id]["resolved_at"] = _time(_extra(row, "resolved_at")) or by_id[alert_id]["resolved_at"]
    return sorted(by_id.values(), key=lambda item: str(item["fired_at"]), reverse=True)


def format_alerts(items: list[dict[str, Any]]) -> str:
    if not items:
        return "no open or recent alerts"
    headers = ("state", "fired at (UTC)", "severity", "rule", "tenant/feature/stage", "now", "baseline", "statistic")
    table = [headers]
    for item in items:
        scope = f"{item['tenant']}/{item['feature'] or '-'}/{item['stage'] or 'request'}"
        statistic = f"{_num(item['value'])} vs {_num(item['threshold'])}"
        table.append(
            (
                str(item["state"]),
                str(item["fired_at"])[:19],
                str(item["severity"]),
                str(item["rule"]),
                scope,
                _num(item["current_value"]),
                _num(item["baseline_value"]),
                statistic,
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    out = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table]
    out.insert(1, "  ".join("-" * width for width in widths))
    open_count = sum(1 for item in items if item["state"] == "firing")
    out.append("")
    out.append(f"{open_count} open, {len(items) - open_count} resolved")
    for item in items:
        if item["state"] == "firing" and item["message"]:
            out.append(f"  {item['message']}")
    return "\n".join(out)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
