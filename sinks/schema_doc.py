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


# Tables, their columns and how long rows stay come from the schema's definition (`schema.TABLES`); every table of
# the definition is listed by `tables()` or here, with the reason it is not (tests/sinks/test_schema_definition.py).
NOT_LISTED: dict[str, str] = {
    schema.CONTENT_TABLE: "the captured text of every span, held for the sampler's decision only",
    schema.HOUR_ROLLUP_TABLE: f"described with `{schema.ROLLUP_TABLE}`: the same per hour",
    schema.DOCUMENT_HOUR_ROLLUP_TABLE: f"described with `{schema.DOCUMENT_ROLLUP_TABLE}`: the same per hour",
}


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


def _column_notes(columns: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The notes of the column list the definition gives a table (found by identity in the modules declaring them)."""
    for module in (model, schema):
        for list_name, value in vars(module).items():
            if value is columns:
                return _notes(module, list_name)
    return {}


def _table(name: str, what: str, example: str, notes: dict[str, str] | None = None) -> TableDoc:
    """The definition's table `name` as `ragmon schema` lists it; `what` may say `{kept}`: its retention."""
    table = schema.table_named(name)
    _, retention_field = table.ttl
    kept = f"kept {getattr(schema.Retention(), retention_field)} days"
    columns = table.columns  # what the writers insert; the engine's own columns (insert times) are not listed
    return TableDoc(name, what.format(kept=kept), columns, _column_notes(columns) if notes is None else notes, example)


def tables() -> list[TableDoc]:
    p95 = schema.DURATION_STATE.replace("(", "Merge(", 1)
    index = schema.DURATION_LEVELS.index(0.95) + 1
    return [
        _table(
            "spans",
            "one row per span: its numbers, no text ({kept})",
            "SELECT stage, count(), quantile(0.95)(duration_ms) FROM spans WHERE start_time > now() - INTERVAL 1 HOUR"
            " GROUP BY stage",
        ),
        _table(
            "payloads",
            "the text of kept traces: question, passages, answer ({kept}; read with FINAL)",
            "SELECT trace_id, sampling_reasons, question, answer FROM payloads FINAL ORDER BY start_time DESC LIMIT 5",
        ),
        _table(
            "scores",
            "judge results: one row per trace, metric and judge version ({kept})",
            "SELECT metric, judge_version, avg(value) FROM scores WHERE status = 'ok' GROUP BY metric, judge_version",
        ),
        _table(
            "alerts",
            "drift alerts as they fire and resolve ({kept})",
            "SELECT fired_at, state, rule, feature, stage, message FROM alerts ORDER BY fired_at DESC LIMIT 10",
        ),
        _table(
            schema.ROLLUP_TABLE,
            "per minute, feature, stage and model: one call per nested run of a stage ({kept};"
            f" `{schema.HOUR_ROLLUP_TABLE}` is the same per hour, with `hour` for `minute`)",
            f"SELECT feature, stage, sum(spans) AS calls, {p95}(duration_q)[{index}] AS p95_ms FROM spans_1m"
            " WHERE minute > now() - INTERVAL 1 HOUR GROUP BY feature, stage",
            _rollup_notes(schema.ROLLUP_COLUMNS),
        ),
        _table(
            schema.SAMPLING_TABLE,
            "the tail sampler's decisions per minute: outcome keep | skip | drop, a kept trace under its first reason"
            " ({kept})",
            "SELECT outcome, reason, sum(traces) FROM sampling_1m WHERE minute > now() - INTERVAL 1 DAY"
            " GROUP BY outcome, reason",
            {**_rollup_notes(schema.SAMPLING_COLUMNS), **_column_notes(schema.SAMPLING_COLUMNS)},
        ),
        _table(
            schema.LABELS_TABLE,
            "people's labels of kept traces, the latest per trace, metric and reviewer ({kept}; read with FINAL)",
            "SELECT metric, label, count() FROM labels FINAL GROUP BY metric, label",
        ),
        _table(
            schema.LABEL_WRITES_TABLE,
            "every label written, as written: who, when, what ({kept}; never replaced)",
            "SELECT labelled_at, reviewer, trace_id, metric, label, note FROM label_writes ORDER BY labelled_at DESC"
            " LIMIT 20",
        ),
        _table(
            schema.TRACE_QUESTIONS_TABLE,
            "every production trace's question and the group of recurring questions it belongs to ({kept})",
            "SELECT group_id, any(question), count() FROM trace_questions WHERE start_time > now() - INTERVAL 1 DAY"
            " GROUP BY group_id ORDER BY count() DESC LIMIT 10",
        ),
        _table(
            schema.QUESTION_HOUR_ROLLUP_TABLE,
            "per hour and question group: requests, failed requests, the duration sketch and a few askings"
            " ({kept}; the question-group view's whole hours)",
            f"SELECT group_id, sum(requests), {p95}(duration_q)[{index}] AS p95_ms FROM trace_questions_1h"
            " WHERE hour > now() - INTERVAL 1 DAY GROUP BY group_id ORDER BY sum(requests) DESC LIMIT 10",
            _rollup_notes(schema.QUESTION_HOUR_ROLLUP_COLUMNS),
        ),
        _table(
            schema.QUESTION_GROUPS_TABLE,
            "the recurring questions: one row per group, its representative question ({kept}; read with FINAL)",
            "SELECT feature, group_id, label, members FROM question_groups FINAL ORDER BY members DESC LIMIT 10",
        ),
        _table(
            schema.FEEDBACK_TABLE,
            "end users' feedback on answers, the latest per trace (or request id), name and voter ({kept}; read"
            " with FINAL; joined to its trace when read)",
            "SELECT name, negative, count() FROM feedback FINAL GROUP BY name, negative",
        ),
        _table(
            schema.FEEDBACK_WRITES_TABLE,
            "every feedback written, as written ({kept}; never replaced)",
            "SELECT received_at, source, trace_id, request_id, name, value, user FROM feedback_writes"
            " ORDER BY received_at DESC LIMIT 20",
        ),
        _table(
            schema.DOCUMENT_ROLLUP_TABLE,
            "per minute, feature, retrieval stage and document: how often and at which ranks it was retrieved"
            f" ({{kept}}; `{schema.DOCUMENT_HOUR_ROLLUP_TABLE}` is the same per hour, with `hour` for `minute`)",
            "SELECT feature, doc, sum(retrieved), sum(traces) FROM documents_1m WHERE stage = 'rerank'"
            " AND minute > now() - INTERVAL 1 HOUR GROUP BY feature, doc ORDER BY sum(retrieved) DESC LIMIT 10",
            {**_rollup_notes(schema.DOCUMENT_ROLLUP_COLUMNS), **_column_notes(schema.DOCUMENT_ROLLUP_COLUMNS)},
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
