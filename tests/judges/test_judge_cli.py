"""`ragmon judge` (via judges.cli): the queue status without a store, and loud start-up failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judges import cli
from judges.queue import JudgeQueue, Kept


def test_status_prints_the_queue_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    queue = JudgeQueue.in_data_dir(tmp_path)
    queue.enqueue([Kept("t", f"{i:032x}") for i in range(3)], "local:v")
    queue.close()
    assert cli.main(["judge", "--data-dir", str(tmp_path), "--status"]) == 0
    assert json.loads(capsys.readouterr().out) == {"states": {"queued": 3}, "final_statuses": {}}


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
