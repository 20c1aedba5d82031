"""`ragmon compare` on a data directory holding two releases: the text names the release, the broken question and
the paragraph it stopped retrieving; --json is the named read's document; one release only is exit 1 saying why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FILL = """
import sys
from ragmon.sinks import open_store
from tests.support.release_rows import Traffic, write
from tests.sinks.test_compare import BILL_A, BILL_B, RESET_A, RESET_B, T0
from ragmon.data_dir import embedded_store
store = open_store(str(embedded_store(sys.argv[1])))
stretches = [Traffic("A", T0, 900, 4.0, (RESET_A, BILL_A))]
if sys.argv[2] == "two":
    stretches.append(Traffic("B", T0 + 3600, 300, 4.0, (RESET_B, BILL_B)))
write(store, stretches)
store.close()
"""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_compare_names_the_release_question_and_paragraph(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert _run("-c", FILL, str(data), "two").returncode == 0
    text = _run("-m", "ragmon.cli", "compare", "--data-dir", str(data))
    assert text.returncode == 0, text.stderr
    assert "release B against A" in text.stdout
    first = text.stdout.split("per recurring question (worst first):")[1]
    assert first.lstrip().startswith("[REGRESSED] 'How do I reset my password?'")
    assert "stopped being retrieved: para-7" in first
    document = json.loads(_run("-m", "ragmon.cli", "compare", "--data-dir", str(data), "--json").stdout)
    assert document["groups"][0]["stopped_retrieving"] == ["para-7"]


def test_one_release_is_exit_1_saying_why(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert _run("-c", FILL, str(data), "one").returncode == 0
    out = _run("-m", "ragmon.cli", "compare", "--data-dir", str(data), "--feature", "support")
    assert out.returncode == 1 and "no release before 'A'" in out.stderr
    assert _run("-m", "ragmon.cli", "compare", "--data-dir", str(data), "--bogus").returncode == 2
