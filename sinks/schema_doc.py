"""The tables users query, documented from the schema source itself, so the documentation cannot drift.

Names and types come from the column lists the DDL is generated from (`ragmon.model`, `ragmon.sinks.schema`); a column's
note is the comment on its line in that source. `ragmon schema` prints it; docs/tables.md is its
Markdown form, and a test fails when the two differ (regenerate with `python docs/generate.py`).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ragmon.sinks import schema
from ragmon.sinks.errors import QueryRejected

from ragmon import model

# ("name", "Type"),  # note   — one column per line, as the column lists are written
_COLUMN_LINE = re.compile(r'^\s*\("(?P<name>\w+)",\s*"[^"]*"\),\s*#\s*(?P<note>.+?)\s*$')
# AggregateFunction(name[(parameters)], argument types) — the state a rollup column holds
_AGGREGATE_STATE = re.compile(r"^AggregateFunction\((?P<function>\w+)(?P<parameters>\([^)]*\))?\s*,")


@dataclass(frozen=True)
class TableDoc:
    name: str
    what: str
    columns: tuple[tuple[str, str], ...]
    notes: dict[str, str]
    example: str


def _notes(module: ModuleType, list_name: str) -> dict[str, str]:
    """Column → the comment on its line in the assignment of `list_name` in `module`'s source."""
    lines = inspect.getsource(module).splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^{list_name}\b.*=", line))
    notes = {}
    for line in lines[start + 1 :]:
        if line.startswith(")"):
            break
        match = _COLUMN_LINE.match(line)
        if match:
            notes[match["name"]] = match["note"]
    return notes


def _rollup_notes(columns: tuple[tuple[str, str], ...]) -> dict[str, str]:
    notes = {}
    for name, ch_type in columns:
        state = _AGGREGATE_STATE.match(ch_type)
        if state:
            # a parametric function keeps its parameters: quantilesDD(0.5) is read by quantilesDDMerge(0.5)
            notes[name] = f"aggregate state: read with `{state['function']}Merge{state['parameters'] or ''}({name})`"
        elif ch_type.startswith("SimpleAggregateFunction(sum"):
            notes[name] = "a sum: add it up with `sum(…)`"
    return notes


def tables() -> list[TableDoc]:
    days = schema.Retention()
    p95 = schema.DURATION_STATE.replace("(", "Merge(", 1)
    index = schema.DURATION_LEVELS.index(0.95) + 1
    return [
        TableDoc(
            "spans",
            f"one row per span: its numbers, no text (kept {days.spans_days} days)",
            model.SPAN_COLUMNS,
            _notes(model, "SPAN_COLUMNS"),
            "SELECT stage, count(), quantile(0.95)(duration_ms) FROM spans WHERE start_time > now() - INTERVAL 1 HOUR"
            " GROUP BY stage",
        ),
        TableDoc(
            "payloads",
            f"the text of kept traces: question, passages, answer (kept {days.payloads_days} days; read with FINAL)",
            schema.PAYLOAD_COLUMNS,
            _notes(schema, "PAYLOAD_COLUMNS"),
            "SELECT trace_id, sampling_reasons, question, answer FROM payloads FINAL ORDER BY start_time DESC LIMIT 5",
        ),
        TableDoc(
            "scores",
            f"judge results: one row per trace, metric and judge version (kept {days.scores_days} days)",
            schema.SCORE_COLUMNS,
            _notes(schema, "SCORE_COLUMNS"),
            "SELECT metric, judge_version, avg(value) FROM scores WHERE status = 'ok' GROUP BY metric, judge_version",
        ),
        TableDoc(
            "alerts",
            f"drift alerts as they fire and resolve (kept {days.alerts_days} days)",
            schema.ALERT_COLUMNS,
            _notes(schema, "ALERT_COLUMNS"),
            "SELECT fired_at, state, rule, feature, stage, message FROM alerts ORDER BY fired_at DESC LIMIT 10",
        ),
        TableDoc(
            schema.ROLLUP_TABLE,
            f"per minute, feature, stage and model: one call per nested run of a stage (kept {days.rollups_days} days;"
            f" `{schema.HOUR_ROLLUP_TABLE}` is the same per hour, with `hour` for `minute`)",
            schema.ROLLUP_COLUMNS,
            _rollup_notes(schema.ROLLUP_COLUMNS),
            f"SELECT feature, stage, sum(spans) AS calls, {p95}(duration_q)[{index}] AS p95_ms FROM spans_1m"
            " WHERE minute > now() - INTERVAL 1 HOUR GROUP BY feature, stage",
        ),
        TableDoc(
            schema.SAMPLING_TABLE,
            "the tail sampler's decisions per minute: outcome keep | skip | drop, a kept trace under its first reason"
            f" (kept {days.rollups_days} days)",
            schema.SAMPLING_COLUMNS,
            {**_rollup_notes(schema.SAMPLING_COLUMNS), **_notes(schema, "SAMPLING_COLUMNS")},
            "SELECT outcome, reason, sum(traces) FROM sampling_1m WHERE minute > now() - INTERVAL 1 DAY"
            " GROUP BY outcome, reason",
        ),
        TableDoc(
            schema.LABELS_TABLE,
            "people's labels of kept traces, the latest per trace, metric and reviewer"
            f" (kept {days.labels_days} days; read with FINAL)",
            schema.LABEL_COLUMNS,
            _notes(schema, "LABEL_COLUMNS"),
            "SELECT metric, label, count() FROM labels FINAL GROUP BY metric, label",
        ),
        TableDoc(
            schema.LABEL_WRITES_TABLE,
            f"every label written, as written: who, when, what (kept {days.labels_days} days; never replaced)",
            schema.LABEL_COLUMNS,
            _notes(schema, "LABEL_COLUMNS"),
            "SELECT labelled_at, reviewer, trace_id, metric, label, note FROM label_writes ORDER BY labelled_at DESC"
            " LIMIT 20",
        ),
    ]


def described_with_notes(table: str, columns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`DESCRIBE table` rows (name, type) with each column's note from this documentation; no rows means no
    such table, which says so rather than printing nothing."""
    if not columns:
        raise QueryRejected(
            f"no table {table!r} in this store; `SHOW TABLES` lists them, `ragmon schema` explains them"
        )
    notes = next((doc.notes for doc in tables() if doc.name == table), {})
    return [{**column, "note": notes.get(column["name"], "")} for column in columns]


def render_text() -> str:
    out = []
    for table in tables():
        out.append(f"{table.name}: {table.what}")
        width = max(len(name) for name, _ in table.columns)
        type_width = max(len(ch_type) for _, ch_type in table.columns)
        for name, ch_type in table.columns:
            note = table.notes.get(name, "")
            out.append(f"  {name.ljust(width)}  {ch_type.ljust(type_width)}  {note}".rstrip())
        out.append(f'  e.g. ragmon query "{table.example}"')
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def render_markdown() -> str:
    out = []
    for table in tables():
        out.append(f"**`{table.name}`** — {table.what}.")
        out.append("")
        out.append("| column | type | note |")
        out.append("|---|---|---|")
        for name, ch_type in table.columns:
            note = table.notes.get(name, "").replace("|", "\\|")
            out.append(f"| `{name}` | `{ch_type}` | {note} |")
        out.append("")
        out.append(f'e.g. `ragmon query "{table.example}"`')
        out.append("")
    return "\n".join(out).rstrip() + "\n"
