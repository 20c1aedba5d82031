"""The `ragmon` command as a user meets it in a shell: errors name the subcommand, a closed pipe is not an error,
an empty window is refused, and the schema is one command away."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _ragmon(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragmon.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_a_mistyped_flag_shows_the_subcommands_usage() -> None:
    run = _ragmon("report", "--sinse", "1h")
    assert run.returncode == 2
    assert run.stderr.startswith("usage: ragmon report ")
    assert "ragmon report: error: unrecognized arguments: --sinse 1h" in run.stderr


def test_an_empty_window_is_refused() -> None:
    for window in ("0m", "0"):
        run = _ragmon("report", "--since", window)
        assert run.returncode == 2
        assert "a window must be longer than zero" in run.stderr


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path: Path) -> None:
    assert _ragmon("migrate", "--data-dir", str(tmp_path)).returncode == 0
    sql = "SELECT number, repeat('x', 100) AS pad FROM numbers(9000)"
    command = [sys.executable, "-m", "ragmon.cli", "query", sql, "--data-dir", str(tmp_path)]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    # ~1 MB of rows, far more than a pipe buffers: the writer is still writing when `| head -1` goes away
    assert process.stdout.readline() == "number\tpad\n"
    process.stdout.close()
    assert process.wait(timeout=120) == 0
    with process.stderr:
        assert "Traceback" not in process.stderr.read()


def test_schema_lists_the_tables_users_query() -> None:
    run = _ragmon("schema")
    assert run.returncode == 0, run.stderr
    tables = [line.split(":")[0] for line in run.stdout.splitlines() if line and not line.startswith(" ")]
    assert tables == [
        "spans",
        "payloads",
        "scores",
        "alerts",
        "spans_1m",
        "sampling_1m",
        "labels",
        "label_writes",
        "trace_questions",
        "trace_questions_1h",
        "question_groups",
        "feedback",
        "feedback_writes",
        "documents_1m",
    ]
    assert "  value " in run.stdout.split("scores:")[1].split("alerts:")[0]  # scores.value, not "score"


def test_alerts_on_a_fresh_store_say_the_rules_need_history(tmp_path: Path) -> None:
    assert _ragmon("migrate", "--data-dir", str(tmp_path)).returncode == 0
    run = _ragmon("alerts", "--data-dir", str(tmp_path))
    assert run.returncode == 0, run.stderr
    first, note = run.stdout.splitlines()
    assert first == "no open or recent alerts"
    assert "need about an hour of traffic before they can fire" in note and note.endswith(
        "this store has no production traffic yet"
    )


def test_a_taken_port_names_its_flag_and_leaves_no_data_dir_behind(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data_dir = tmp_path / "new"
        run = _ragmon("serve", "--data-dir", str(data_dir), "--otlp-http", f"127.0.0.1:{port}", "--api", "127.0.0.1:0")
    assert run.returncode == 2
    assert f"ragmon serve: --otlp-http 127.0.0.1:{port} is already in use" in run.stderr
    assert "Errno" not in run.stderr
    assert not data_dir.exists()


def test_query_cuts_at_max_rows_and_says_so(tmp_path: Path) -> None:
    assert _ragmon("migrate", "--data-dir", str(tmp_path)).returncode == 0
    run = _ragmon("query", "SELECT number FROM numbers(100000)", "--max-rows", "3", "--data-dir", str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["number", "0", "1", "2"]
    assert "the result has more than 3 rows" in run.stderr and "TOO_MANY_ROWS" not in run.stderr
    whole = _ragmon("query", "SELECT number FROM numbers(3)", "--max-rows", "3", "--data-dir", str(tmp_path))
    assert whole.stdout.splitlines() == ["number", "0", "1", "2"] and whole.stderr == ""
    assert _ragmon("query", "SELECT 1", "--max-rows", "0", "--data-dir", str(tmp_path)).returncode == 2


def test_query_describes_tables(tmp_path: Path) -> None:
    assert _ragmon("migrate", "--data-dir", str(tmp_path)).returncode == 0
    run = _ragmon("query", "DESCRIBE scores", "--data-dir", str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == "name\ttype\tnote"
    assert "value\t" in run.stdout
    missing = _ragmon("query", "DESCRIBE score", "--data-dir", str(tmp_path))
    assert missing.returncode == 2 and "no table 'score'" in missing.stderr
