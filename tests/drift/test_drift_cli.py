"""`ragmon alerts`: argument parsing, collapsing firing/resolved rows into one entry per alert, both table shapes."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest
from ragmon.sinks.alerts_sql import recent_alerts_sql

from ragmon.commands import alerts as alerts_command
from ragmon.commands import common as commands
from ragmon.commands.alerts import add_alerts_arguments, alerts, collapse_alert_rows, format_alerts
from ragmon.drift import AlertRecord


def make(state: str, alert_id: str, fired_at_s: float, resolved_at_s: float | None = None) -> AlertRecord:
    return AlertRecord(
        alert_id=alert_id,
        state=state,  # type: ignore[arg-type]
        rule="embedding_norm_jump",
        severity="critical",
        tenant="acme",
        feature="qa",
        stage="embeddings",
        metric="norm_deviation",
        detector="cusum",
        fired_at_s=fired_at_s,
        resolved_at_s=resolved_at_s,
        detected_at_s=fired_at_s + 120,
        value=10.5,
        threshold=8.0,
        message=f"[critical] embedding_norm_jump {alert_id}",
        baseline_value=0.0,
        current_value=3.1,
        evidence={"z": 4.0},
        trace_ids=("t-9",),
    )


T0 = 1_767_571_200.0


@pytest.mark.parametrize("extended", [True, False])
def test_rows_of_one_alert_collapse_to_one_entry(extended: bool) -> None:
    rows = [
        make("firing", "old", T0).to_row(extended),
        make("resolved", "old", T0, T0 + 600).to_row(extended),
        make("firing", "new", T0 + 3600).to_row(extended),
    ]
    items = collapse_alert_rows(reversed(rows))  # the store returns newest first; order must not matter
    assert [(i["alert_id"], i["state"]) for i in items] == [("new", "firing"), ("old", "resolved")]
    old = items[1]
    assert old["resolved_at"] is not None and old["resolved_at"].startswith("2026-01-05T00:10:00")
    assert old["detector"] == "cusum" and old["evidence"] == {"z": 4.0} and old["trace_ids"] == ["t-9"]
    assert old["current_value"] == 3.1 and old["value"] == 10.5


def test_table_lists_open_alerts_with_their_message() -> None:
    items = collapse_alert_rows([make("firing", "x", T0).to_row(), make("firing", "y", T0 - 60).to_row()])
    text = format_alerts(items)
    assert text.splitlines()[0].split()[:2] == ["state", "fired"]
    assert "acme/qa/embeddings" in text and "10.5 vs 8" in text
    assert "2 open, 0 resolved" in text and "[critical] embedding_norm_jump x" in text
    assert format_alerts([]) == "no open or recent alerts"


def test_arguments_and_sql() -> None:
    parser = argparse.ArgumentParser()
    add_alerts_arguments(parser)
    args = parser.parse_args(["--json", "--since", "2h", "--open", "--data-dir", "/tmp/x"])
    assert args.json and args.open and args.since == 7200.0 and args.limit == 500
    sql, params = recent_alerts_sql(args.since, args.limit)
    assert params == {"since_s": 7200, "limit": 500}
    assert "toIntervalSecond({since_s:UInt64})" in sql and "state = 'resolved'" in sql
    assert sql.endswith("LIMIT {limit:UInt64}")


def test_command_prints_json_and_filters_open(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    rows = [
        make("firing", "a", T0).to_row(False),
        make("firing", "b", T0).to_row(False),
        make("resolved", "b", T0, T0 + 60).to_row(False),
    ]
    # The store read is the boundary here (the store itself is tested in tests/sinks).
    monkeypatch.setattr(alerts_command, "read_rows", lambda args, what, **params: rows)
    parser = argparse.ArgumentParser()
    add_alerts_arguments(parser)
    assert alerts(parser.parse_args(["--json", "--open"])) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [item["alert_id"] for item in printed] == ["a"]


def test_command_reports_store_errors(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    def fail(args: Any, what: str, **params: Any) -> Any:
        raise commands.CommandError("no ragmon store in .ragmon")

    monkeypatch.setattr(alerts_command, "read_rows", fail)
    parser = argparse.ArgumentParser()
    add_alerts_arguments(parser)
    assert alerts(parser.parse_args([])) == 2
    assert "ragmon alerts: no ragmon store" in capsys.readouterr().err
