"""The regression gate: exit codes 0/1/2, deltas with seeded intervals, newly failing and protected rows."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from ragmon.evaluation.bootstrap import bootstrap_delta_ci
from ragmon.evaluation.gate_cli import add_gate_arguments, gate

Writer = Callable[[str, Iterable[Mapping[str, Any]]], Path]


def run_gate(*argv: str | Path) -> int:
    parser = argparse.ArgumentParser(prog="ragmon gate")
    add_gate_arguments(parser)
    return gate(parser.parse_args([str(a) for a in argv]))


def rows(scores: list[float], passed: list[bool] | None = None, **extra: list[float]) -> list[dict[str, Any]]:
    out = []
    for i, score in enumerate(scores):
        metrics: dict[str, Any] = {"correct": score} | {name: values[i] for name, values in extra.items()}
        row: dict[str, Any] = {"row_id": f"r{i}", "question_id": f"q{i // 2}", "metrics": metrics}
        if passed is not None:
            row["passed"] = passed[i]
        out.append(row)
    return out


BASE = [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0]


def test_identical_runs_pass(jsonl: Writer, capsys: pytest.CaptureFixture[str]) -> None:
    base = jsonl("base.jsonl", rows(BASE))
    assert run_gate(base, base) == 0
    out = capsys.readouterr().out
    assert "## ragmon gate: ✅ pass" in out and "| correct | 0.7000 | 0.7000 | +0.0000 |" in out


def test_drop_beyond_tolerance_is_a_regression(jsonl: Writer, tmp_path: Path) -> None:
    base = jsonl("base.jsonl", rows(BASE))
    worse = list(BASE)
    worse[0] = 0.0  # mean 0.7 → 0.6
    cand = jsonl("cand.jsonl", rows(worse))
    assert run_gate(base, cand) == 1
    assert run_gate(base, cand, "--tolerance", "correct=0.1") == 0  # exactly at the tolerance: allowed
    assert run_gate(base, cand, "--tolerance", "correct=0.05") == 1
    assert run_gate(base, cand, "--default-tolerance", "0.2") == 0
    assert run_gate(base, cand, "--ignore", "correct") == 0
    out = tmp_path / "report.json"
    assert run_gate(base, cand, "--json-out", out, "--markdown-out", tmp_path / "report.md") == 1
    report = json.loads(out.read_text())
    assert report["verdict"] == "regression" and report["exit_code"] == 1
    (metric,) = report["metrics"]
    assert metric["delta"] == pytest.approx(-0.1) and metric["status"] == "regression"
    assert metric["ci_low"] <= metric["delta"] <= metric["ci_high"]
    assert "❌ regression" in (tmp_path / "report.md").read_text()


def test_lower_is_better_metrics_regress_upwards(jsonl: Writer) -> None:
    base = jsonl("base.jsonl", rows(BASE, latency_ms=[100.0] * 10))
    cand = jsonl("cand.jsonl", rows(BASE, latency_ms=[130.0] * 10))
    assert run_gate(base, cand, "--lower-is-better", "latency_ms", "--tolerance", "latency_ms=20") == 1
    assert run_gate(base, cand, "--lower-is-better", "latency_ms", "--tolerance", "latency_ms=50") == 0
    assert run_gate(cand, base, "--lower-is-better", "latency_ms") == 0  # faster is fine


def test_a_mean_can_rise_while_a_protected_row_breaks(
    jsonl: Writer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    passed = [s == 1.0 for s in BASE]
    better = [1.0] * 10
    better[0] = 0.0
    cand_passed = [s == 1.0 for s in better]
    base = jsonl("base.jsonl", rows(BASE, passed))
    cand = jsonl("cand.jsonl", rows(better, cand_passed))
    protected = tmp_path / "protected.txt"
    protected.write_text("# the most asked question\nr0\n")
    assert run_gate(base, cand) == 0  # the mean rose 0.7 → 0.9; r0 newly fails but is not protected
    assert "Newly failing rows (1)" in capsys.readouterr().out
    assert run_gate(base, cand, "--protected", protected) == 1
    assert "Protected rows that regressed (1)" in capsys.readouterr().out
    protected.write_text("q0\n")  # a question id protects all its rows
    assert run_gate(base, cand, "--protected", protected, "--format", "json") == 1
    report = json.loads(capsys.readouterr().out)
    assert report["protected_regressions"] == [
        {"row_id": "r0", "question_id": "q0", "reason": "passed in baseline, fails in candidate"}
    ]
    assert report["newly_passing"] and report["metrics"][0]["delta"] == pytest.approx(0.2)


def test_protected_row_missing_from_candidate_regresses(jsonl: Writer, tmp_path: Path) -> None:
    base = jsonl("base.jsonl", rows(BASE, [True] * 10))
    cand = jsonl("cand.jsonl", rows(BASE, [True] * 10)[1:])
    protected = tmp_path / "protected.txt"
    protected.write_text("r0\n")
    assert run_gate(base, cand, "--protected", protected) == 1


def test_checks_give_the_verdict_when_passed_is_absent(jsonl: Writer, tmp_path: Path) -> None:
    base = jsonl("base.jsonl", [{"row_id": "a", "checks": {"facts": True, "refusal": True}}])
    cand = jsonl("cand.jsonl", [{"row_id": "a", "checks": {"facts": True, "refusal": False}}])
    protected = tmp_path / "p.txt"
    protected.write_text("a\n")
    assert run_gate(base, cand, "--protected", protected) == 1


def test_a_metric_the_candidate_never_measured_regresses(jsonl: Writer) -> None:
    # A judge failing on every row leaves only nulls: that must not read as "nothing to compare".
    base = jsonl("base.jsonl", rows(BASE, faithfulness=[0.9] * 10))
    nulls = rows(BASE)
    for row in nulls:
        row["metrics"]["faithfulness"] = None
    cand = jsonl("cand.jsonl", nulls)
    assert run_gate(base, cand) == 1
    assert run_gate(base, cand, "--ignore", "faithfulness") == 0
    assert run_gate(cand, base) == 0  # a metric new in the candidate is reported, not gated


def test_nulls_leave_rows_out_of_a_metric_rather_than_counting_zero(jsonl: Writer) -> None:
    base = jsonl("base.jsonl", rows(BASE))
    partly = rows(BASE)
    partly[0]["metrics"]["correct"] = None
    cand = jsonl("cand.jsonl", partly)
    assert run_gate(base, cand) == 0


@pytest.mark.parametrize(
    ("argv_extra", "content"),
    [
        (["--tolerance", "corect=0.1"], None),  # typo: metric in neither run
        (["--tolerance", "correct"], None),  # not METRIC=X (argparse usage error)
        (["--tolerance", "correct=-1"], None),
        ([], '{"row_id": "r0", "metrics": {"correct": "high"}}\n'),
        ([], '{"row_id": "r0"}\n{"row_id": "r0"}\n'),
        ([], "not json\n"),
        ([], ""),
        (["--protected", "{missing}"], None),
        (["--protected", "{unknown_id}"], None),
    ],
)
def test_usage_and_input_errors_exit_2(
    jsonl: Writer, tmp_path: Path, argv_extra: list[str], content: str | None
) -> None:
    base = jsonl("base.jsonl", rows(BASE))
    cand = base
    if content is not None:
        cand = tmp_path / "cand.jsonl"
        cand.write_text(content)
    (tmp_path / "unknown.txt").write_text("no-such-row\n")
    argv = [a.format(missing=tmp_path / "absent.txt", unknown_id=tmp_path / "unknown.txt") for a in argv_extra]
    try:
        code = run_gate(base, cand, *argv)
    except SystemExit as exc:  # argparse reports usage errors by exiting 2
        code = int(exc.code or 0)
    assert code == 2


def test_missing_run_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_gate(tmp_path / "nope.jsonl", tmp_path / "nope.jsonl") == 2
    assert "ragmon gate: error:" in capsys.readouterr().err


def test_bootstrap_is_seeded_and_resamples_questions() -> None:
    diffs = [0.0, 0.0, -1.0, -1.0, 0.0, 0.0, 1.0, 0.0]
    clusters = ["a", "a", "b", "b", "c", "c", "d", "d"]
    first = bootstrap_delta_ci(diffs, clusters, seed=3, name="m")
    assert first == bootstrap_delta_ci(diffs, clusters, seed=3, name="m")
    continuous = [0.13, -0.4, 0.27, 0.05, -0.31, 0.6, 0.02, -0.11]
    assert bootstrap_delta_ci(continuous, clusters, seed=3) != bootstrap_delta_ci(continuous, clusters, seed=4)
    low, high = first
    assert low <= sum(diffs) / len(diffs) <= high
    # Rows of one question move together: with one row per question the interval is narrower than with clusters.
    rows_only = bootstrap_delta_ci(diffs, [str(i) for i in range(8)], seed=3, name="m")
    assert (rows_only[1] - rows_only[0]) < (high - low)
    assert bootstrap_delta_ci([0.5], ["a"]) == (0.5, 0.5)
