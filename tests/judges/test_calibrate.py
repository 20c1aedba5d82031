"""Agreement statistics by hand, and `ragmon calibrate` on a slice of the shared dev data."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from judges.calibration import agreement, fit_threshold, is_heldout
from judges.cli import add_calibrate_arguments, calibrate
from tests.judges.conftest import DEV_DATA


def test_agreement_by_hand() -> None:
    labels = [True, True, True, False, False, False, False, True]
    preds = [True, True, False, False, False, True, False, True]
    got = agreement(labels, preds)
    # tp 3, tn 3, fp 1, fn 1: accuracy 6/8; p_e = .5·.5 + .5·.5 = .5; kappa = (.75 − .5)/.5
    assert got == {"n": 8, "accuracy": 0.75, "balanced_accuracy": 0.75, "kappa": 0.5, "tpr": 0.75, "tnr": 0.75}
    assert agreement([True, True], [True, True])["kappa"] is None  # p_e = 1: undefined, not 0 or 1
    assert agreement([True, False], [True, True])["tnr"] == 0.0


def test_fit_threshold_maximises_kappa() -> None:
    assert fit_threshold([0.1, 0.4, 0.6, 0.9], [False, False, True, True]) == 0.6


def test_split_is_a_fixed_hash_of_the_id() -> None:
    ids = [f"row-{i}" for i in range(1000)]
    share = sum(map(is_heldout, ids)) / len(ids)
    assert 0.25 < share < 0.35
    assert [is_heldout(i) for i in ids[:20]] == [is_heldout(i) for i in ids[:20]]


@pytest.mark.skipif(not DEV_DATA.exists(), reason="shared dev data not present")
def test_calibrate_local_on_a_slice_of_dev(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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
    assert report["threshold"] == 1.0 and report["threshold_source"] == "config"
    for key in ("accuracy", "balanced_accuracy", "kappa", "tpr", "tnr"):
        assert 0.0 <= report[key] <= 1.0
    # far better than chance on this slice, for the judge and for the baseline computed alongside it
    assert report["kappa"] > 0.4 and report["baseline"]["kappa"] > 0.4

    assert calibrate(parser.parse_args([str(path), "--fit-threshold"])) == 0
    text = capsys.readouterr().out
    assert "fitted on the fitting split" in text and "overlap" in text
