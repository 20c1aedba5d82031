"""`ragmon judge` (via ragmon.commands.judge): the queue status without a store, and loud start-up failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ragmon.judges.queue import JudgeQueue, Kept

from ragmon import cli
from ragmon.commands.judge import format_summary

REPO = Path(__file__).resolve().parents[2]


def test_status_prints_the_queue_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    queue = JudgeQueue.in_data_dir(tmp_path)
    queue.enqueue([Kept("t", f"{i:032x}") for i in range(3)], "local:v")
    queue.close()
    assert cli.main(["judge", "--data-dir", str(tmp_path), "--status"]) == 0
    assert capsys.readouterr().out == "judge queue: 3 items (queued 3)\n"
    assert cli.main(["judge", "--data-dir", str(tmp_path), "--status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"states": {"queued": 3}, "final_statuses": {}}


def test_the_exit_summary_reads_as_a_sentence() -> None:
    summary = {
        "traces": {"ok": 118, "mixed": 2},
        "scores": {"ok": 400, "unscorable": 80},
        "rows_delivered": 480,
        "delivery_errors": 0,
        "payload_errors": 3,
        "columns_the_scores_table_lacks": {},
    }
    assert format_summary(summary) == (
        "judged 120 traces (ok 118, mixed 2); 480 scores stored (ok 400, unscorable 80)\n"
        "3 payload reads failed (the log says why)"
    )


def test_the_summary_says_what_became_of_the_evaluation_events() -> None:
    summary = {
        "traces": {"ok": 3},
        "scores": {"ok": 12},
        "rows_delivered": 12,
        "delivery_errors": 0,
        "payload_errors": 0,
        "columns_the_scores_table_lacks": {},
        "evaluation_events": {"emitted": 12, "exported": 9, "batches": 2, "dropped": {"export_failed": 3}},
    }
    assert format_summary(summary).splitlines()[1] == "evaluation events: 9 of 12 sent, 3 dropped (export_failed 3)"


def test_a_judge_worker_sends_its_scores_as_events_and_says_so_at_exit(tmp_path: Path) -> None:
    from ragmon.judges.registry import judge_version

    from tests.otlp_logs_receiver import HttpLogsReceiver

    migrated = subprocess.run(
        [sys.executable, "-m", "ragmon.cli", "migrate", "--data-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrated.returncode == 0, migrated.stderr
    queue = JudgeQueue.in_data_dir(tmp_path)
    queue.enqueue([Kept("t", f"{i + 1:032x}") for i in range(3)], judge_version("local"))
    queue.close()
    receiver = HttpLogsReceiver()
    try:
        env = {**os.environ, "RAGMON_JUDGE__EVENTS__ENDPOINT": receiver.endpoint}
        command = [sys.executable, "-m", "ragmon.cli", "judge", "--until-empty", "--json", "--data-dir", str(tmp_path)]
        run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
        assert run.returncode == 0, run.stderr
        got = receiver.wait_for(12, timeout_s=5)
    finally:
        receiver.stop()
    # No payload in the store for these traces: each metric is `skipped`, and its event says so, with no value.
    assert {(e.trace_id, e.attributes["error.type"]) for e in got} == {(f"{i + 1:032x}", "skipped") for i in range(3)}
    assert all("gen_ai.evaluation.score.value" not in e.attributes for e in got)
    summary = json.loads(run.stdout)
    assert summary["scores"] == {"skipped": 12}
    events = summary["evaluation_events"]
    assert (events["emitted"], events["exported"], events["dropped"]) == (12, 12, {})


def test_an_empty_queue_on_a_store_ends_with_the_summary(tmp_path: Path) -> None:
    # In processes of their own: the embedded engine serves one data path per process, and the suite has its own.
    def ragmon(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ragmon.cli", *args, "--data-dir", str(tmp_path)]
        return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)

    assert ragmon("migrate").returncode == 0
    run = ragmon("judge", "--until-empty")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "judged 0 traces (none); 0 scores stored (none)\n"


@pytest.mark.parametrize("how", ["--clickhouse-url", "--config"])
def test_the_store_can_be_named_as_the_other_store_commands_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    url = "http://127.0.0.1:9"  # nothing listens on the discard port: the error must name this store
    if how == "--config":
        config = tmp_path / "ragmon.toml"
        config.write_text(f'[agent]\nclickhouse_url = "{url}"\n')
        args = ["--config", str(config)]
    else:
        args = ["--clickhouse-url", url]
    assert cli.main(["judge", "--data-dir", str(tmp_path), "--until-empty", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ragmon judge: cannot open the store") and "127.0.0.1" in err


def test_an_unknown_judge_fails_fast_naming_the_plugin_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["judge", "--data-dir", str(tmp_path), "--judge", "nope"]) == 2
    assert "ragmon.judges" in capsys.readouterr().err


def test_a_data_dir_held_by_a_process_that_cannot_be_asked_is_a_readable_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragmon.agent.agent import DataDirLock

    (tmp_path / "chdb").mkdir()
    holder = DataDirLock(tmp_path)  # as a `ragmon judge` that opened the embedded store itself holds it
    holder.acquire()
    holder.publish({"command": "ragmon judge"})
    try:
        assert cli.main(["judge", "--data-dir", str(tmp_path), "--until-empty"]) == 2
    finally:
        holder.release()
    err = capsys.readouterr().err
    assert "Run `ragmon serve` and start workers beside it" in err
    assert "Cannot lock file" not in err


def test_no_store_in_the_data_dir_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["judge", "--data-dir", str(tmp_path), "--until-empty"]) == 2
    assert "no ragmon store in" in capsys.readouterr().err
