"""``ragmon eval retrieval`` output and exit codes; the package's import hygiene and public surface."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ragmon.evaluation
from ragmon.evaluation.cli import add_eval_arguments, eval_command


def run_eval(*argv: str | Path) -> int:
    parser = argparse.ArgumentParser(prog="ragmon eval")
    add_eval_arguments(parser)
    return eval_command(parser.parse_args([str(a) for a in argv]))


def test_json_output_on_cranfield(cranfield: Path, golden: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code = run_eval(
        "retrieval", "--qrels", cranfield / "qrels.tsv", "--run", cranfield / "run_bm25_top100.tsv", "--json"
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"mean", "per_query"}
    expected_keys = [f"{m}@{k}" for m in ("P", "R", "F1", "nDCG", "hit") for k in (5, 10)] + ["MRR"]
    assert list(report["mean"]) == expected_keys
    assert report["mean"]["nDCG@10"] == pytest.approx(golden["mean"]["ndcg_cut_10"], abs=1e-9)
    assert report["per_query"]["1"]["P@5"] == pytest.approx(golden["per_query"]["1"]["P_5"], abs=1e-9)
    assert len(report["per_query"]) == 225


def test_text_output_and_custom_cutoffs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "q").write_text("1 0 a 1\n1 0 b 1\n2 0 c 1\n")
    (tmp_path / "r").write_text("1 Q0 a 1 2.0 t\n1 Q0 x 2 1.0 t\n3 Q0 a 1 1.0 t\n")
    assert run_eval("retrieval", "--qrels", tmp_path / "q", "--run", tmp_path / "r", "--k", "1,2") == 0
    out = capsys.readouterr().out
    assert "1 queries evaluated; 1 run queries without qrels skipped; 1 judged queries absent" in out
    assert "P@1" in out and "nDCG@2" in out and "MRR" in out


def test_chunk_run_from_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "q").write_text("1 0 doc#p1 2\n1 0 doc#p2 1\n")
    chunk = {"query_id": "1", "chunks": [{"chunk_id": "c", "paragraphs": ["doc#p1"]}] * 2}
    (tmp_path / "run.jsonl").write_text(json.dumps(chunk) + "\n")
    assert run_eval("retrieval", "--qrels", tmp_path / "q", "--run", tmp_path / "run.jsonl", "--k", "2", "--json") == 0
    per_query = json.loads(capsys.readouterr().out)["per_query"]["1"]
    assert per_query["P@2"] == 0.5 and per_query["R@2"] == 0.5


def test_input_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "q").write_text("1 0 a 1\n")
    (tmp_path / "r").write_text("9 Q0 a 1 2.0 t\n")
    assert run_eval("retrieval", "--qrels", tmp_path / "q", "--run", tmp_path / "r") == 2  # no common query
    assert run_eval("retrieval", "--qrels", tmp_path / "absent", "--run", tmp_path / "r") == 2
    assert "ragmon eval retrieval: error:" in capsys.readouterr().err
    assert run_eval() == 2  # no subcommand
    with pytest.raises(SystemExit) as exc:
        run_eval("retrieval", "--qrels", tmp_path / "q", "--run", tmp_path / "r", "--k", "0")
    assert exc.value.code == 2


def test_import_hygiene() -> None:
    # `import ragmon` must not pull in evaluation; the CLI module must not pull in numpy until a command runs.
    script = (
        "import sys, ragmon; assert 'ragmon.evaluation' not in sys.modules;"
        "import ragmon.evaluation.cli, ragmon.evaluation.gate_cli, ragmon.evaluation.backeval_cli;"
        "assert 'numpy' not in sys.modules, 'numpy imported eagerly'"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def test_public_surface_resolves() -> None:
    assert ragmon.evaluation.__all__ == sorted(ragmon.evaluation.__all__)
    for name in ragmon.evaluation.__all__:
        assert getattr(ragmon.evaluation, name) is not None
    with pytest.raises(AttributeError):
        _ = ragmon.evaluation.no_such_name
