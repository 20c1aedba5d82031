"""The labelled data beside the dev data: the converter of public releases (benchmarks/faithfulness_data.py), the
SummEdits and FaithDial audit rows it made (data/faithfulness/), and reading several files, gzipped or not, as one
set."""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from ragmon.judges.calibration import is_heldout, load_rows

from ragmon.commands.judge import add_calibrate_arguments, calibrate
from tests.judges.conftest import DEV_DATA

REPO = Path(__file__).resolve().parents[2]
SUMMEDITS = REPO / "data" / "faithfulness" / "summedits.jsonl.gz"
FAITHDIAL_AUDIT = REPO / "data" / "faithfulness" / "faithdial_audit.jsonl.gz"
sys.path.insert(0, str(REPO / "benchmarks"))
import faithfulness_data  # noqa: E402
import kappa_prevalence  # noqa: E402

DOC = "The council met on Tuesday. It approved a budget of 4 million dollars for the new library."


def _summedits_release(directory: Path) -> None:
    items = [
        {"id": "a_og", "doc": DOC, "summary": "The council approved 4 million dollars for a library.", "label": "1"},
        {"id": "a_1", "doc": DOC, "summary": "The council rejected 4 million dollars for a library.", "label": "0"},
        {"id": "a_2", "doc": DOC, "summary": "The council approved 9 million dollars for a library.", "label": 0},
        {"id": "a_3", "doc": DOC, "summary": "Unlabelled edit.", "label": "?"},
    ]
    (directory / "summedits_news.json").write_text(json.dumps(items), encoding="utf-8")


def test_summedits_conversion_is_reproducible_and_groups_a_document(tmp_path: Path) -> None:
    _summedits_release(tmp_path)
    first, second = tmp_path / "one.jsonl.gz", tmp_path / "two.jsonl.gz"
    assert faithfulness_data.main(["summedits", str(tmp_path), str(first)]) == 0
    assert faithfulness_data.main(["summedits", str(tmp_path), str(second)]) == 0
    assert first.read_bytes() == second.read_bytes()

    rows = load_rows(first)
    assert [(r.id, r.faithful) for r in rows] == [
        ("summedits/news/a_og", True),
        ("summedits/news/a_1", False),
        ("summedits/news/a_2", False),
    ]  # the "?" label is not a label
    assert {r.group for r in rows} == {rows[0].group} and rows[0].group.startswith("summedits/")
    assert {(r.dataset, r.subset, r.task) for r in rows} == {("summedits", "news", "summarization")}
    assert rows[0].sample.passages == [DOC] and rows[0].sample.question == faithfulness_data.SUMMARY_QUESTION
    # the split follows the group: every row of the document on the same side
    assert len({is_heldout(r.split_key) for r in rows}) == 1
    assert len(load_rows(first, "heldout")) in (0, 3)


def test_begin_tsv_conversion_keeps_generic_replies_unlabelled(tmp_path: Path) -> None:
    tsv = tmp_path / "begin_dev_tc.tsv"
    header = "model_name\tdata_source\tknowledge\tmessage\tresponse\tbegin_label"
    lines = [
        header,
        'doha\ttc\tThe NFL has 32 teams.\tdo you like football?\tthe "nfl" has 32 teams\tFully attributable',
        "t5\ttc\tThe NFL has 32 teams.\tright?\tthe nfl has 40 teams\tNot fully attributable",
        "gpt2\ttc\tThe NFL has 32 teams.\tok\tthat's cool\tGeneric",
    ]
    tsv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "tc.jsonl"
    assert faithfulness_data.main(["begin", str(tsv), str(out)]) == 0
    written = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["label"]["faithful"] for r in written] == [True, False, None]
    assert written[0]["answer"] == 'the "nfl" has 32 teams'  # quotes are text in BEGIN's TSV, not quoting
    rows = load_rows(out)
    assert [(r.faithful, r.subset, r.task) for r in rows] == [
        (True, "tc", "grounded_dialogue"),
        (False, "tc", "grounded_dialogue"),
    ]


def test_faithdial_audit_conversion_maps_the_taxonomy(tmp_path: Path) -> None:
    """The model files and the people's file name their columns differently; labels come lower-cased, with the
    release's own typos, and "uncooperative" beside "entailment" is still entailed."""
    (tmp_path / "GPT2").mkdir()
    (tmp_path / "gold").mkdir()
    knowledge = "The NFL has 32 teams, split into two conferences."
    (tmp_path / "GPT2" / "gpt2_processed_wow.csv").write_text(
        "knowledge,history,gpt2,begin_label,vrm_label\n"
        f'"{knowledge}",do you like football?,The NFL has 32 teams .,entailment,edification\n'
        f'"{knowledge}",ok,"Yes, the NFL has 32 teams in two conferences .","entailmentt,uncooperative",ack\n'
        f'"{knowledge}",ok,The NFL has 40 teams .,"entailment,hallucination",edification\n'
        f'"{knowledge}",ok,cool,generic,ack\n',
        encoding="utf-8",
    )
    (tmp_path / "gold" / "topical.csv").write_text(
        "evidence,history,response,BEGIN,VRM\n"
        f'"{knowledge}",hi,Do you like football?,Entailment,question\n'
        f'"{knowledge}",hi,The NFL was founded on the moon.,Hallucination,disclosure\n'
        f'"{knowledge}",hi,Sure.,Uncooperative,ack\n'
        f'"{knowledge}",hi,Not annotated.,,ack\n',
        encoding="utf-8",
    )
    out = tmp_path / "audit.jsonl"
    assert faithfulness_data.main(["faithdial-audit", str(tmp_path), str(out)]) == 0
    written = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(r["meta"]["generator"], r["subset"], r["label"]["faithful"]) for r in written] == [
        ("gpt2", "wow", True),
        ("gpt2", "wow", True),
        ("gpt2", "wow", False),
        ("gpt2", "wow", None),
        ("gold", "topicalchat", True),
        ("gold", "topicalchat", False),
        ("gold", "topicalchat", None),
    ]  # the unannotated gold row is left out
    assert written[0]["question"] == "do you like football?" and written[0]["context"] == [knowledge]
    assert len({r["group"] for r in written}) == 1  # one knowledge text, one group
    assert {r.task for r in load_rows(out)} == {"grounded_dialogue"}


@pytest.mark.skipif(not FAITHDIAL_AUDIT.exists(), reason="data/faithfulness/faithdial_audit.jsonl.gz is absent")
def test_shipped_faithdial_audit_rows() -> None:
    rows = load_rows(FAITHDIAL_AUDIT)
    assert len(rows) == 2194
    assert {r.subset for r in rows} == {"wow", "cmu", "topicalchat"}
    assert 0.2 < sum(r.faithful for r in rows) / len(rows) < 0.3
    sides: dict[str, set[bool]] = defaultdict(set)
    for row in rows:
        sides[row.group].add(is_heldout(row.split_key))
    assert all(len(s) == 1 for s in sides.values())


@pytest.mark.skipif(not SUMMEDITS.exists(), reason="data/faithfulness/summedits.jsonl.gz is absent")
def test_shipped_summedits_rows() -> None:
    rows = load_rows(SUMMEDITS)
    assert len(rows) == 4681
    by_domain: dict[str, list[bool]] = defaultdict(list)
    for row in rows:
        by_domain[row.subset].append(row.faithful)
    assert sorted(by_domain) == [
        "ectsum",
        "news",
        "podcast",
        "qmsumm",
        "sales_call",
        "sales_email",
        "samsum",
        "scitldr",
    ]
    for labels in by_domain.values():
        assert 0.2 < sum(labels) / len(labels) < 0.5  # both labels in every domain, the inconsistent edits more
    sides: dict[str, set[bool]] = defaultdict(set)
    for row in rows:
        sides[row.group].add(is_heldout(row.split_key))
    assert all(len(s) == 1 for s in sides.values())  # no document on both sides of the split
    heldout_groups = sum(s == {True} for s in sides.values()) / len(sides)
    assert 0.15 < heldout_groups < 0.45  # about 30 % of ~160 documents


def test_calibrate_reads_several_files_as_one_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _summedits_release(tmp_path)
    summaries = tmp_path / "summaries.jsonl.gz"
    faithfulness_data.main(["summedits", str(tmp_path), str(summaries)])
    qa = tmp_path / "qa.jsonl"
    qa_rows: list[dict[str, Any]] = [
        {
            "id": f"qa-{i}",
            "dataset": "qa_kind",
            "task": "qa",
            "question": "How tall is the tower?",
            "context": ["The tower is 330 metres tall."],
            "answer": answer,
            "label": {"faithful": faithful},
        }
        for i, (answer, faithful) in enumerate([("330 metres", True), ("It is 512 metres tall.", False)])
    ]
    qa.write_text("".join(json.dumps(r) + "\n" for r in qa_rows), encoding="utf-8")
    capsys.readouterr()
    parser = argparse.ArgumentParser()
    add_calibrate_arguments(parser)
    assert calibrate(parser.parse_args([str(qa), str(summaries), "--json"])) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n"] == 5
    assert {kind: figures["n"] for kind, figures in report["by_dataset"].items()} == {"qa_kind": 2, "summedits": 3}

    with gzip.open(summaries, "rb") as handle:
        broken = handle.read()[:-40]  # a file cut short mid-row: a clear error naming it, not a traceback
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(broken)
    assert calibrate(parser.parse_args([str(qa), str(cut)])) == 2
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.skipif(not DEV_DATA.exists(), reason="../shared/data (the shared dev data) is absent")
def test_kappa_falls_with_the_faithful_share_while_auc_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """benchmarks/kappa_prevalence.py: the same judge on the same kind, only the faithful share changed."""
    lines = [line for line in DEV_DATA.read_text(encoding="utf-8").splitlines() if '"dataset": "begin"' in line]
    path = tmp_path / "begin.jsonl"
    path.write_text("\n".join(lines[:600]) + "\n", encoding="utf-8")
    assert kappa_prevalence.main([str(path), "--split", "all", "--shares", "0.35,0.12", "--draws", "5"]) == 0
    table = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    (share_a, _, kappa_a, _, _, balanced_a, auc_a), (share_b, _, kappa_b, _, _, balanced_b, auc_b) = table
    assert (share_a, share_b) == ("0.350", "0.120")
    assert float(kappa_b) < float(kappa_a) - 0.03  # rarer faithful answers: lower κ …
    assert abs(float(auc_b) - float(auc_a)) < 0.03  # … from a judge that ranks them as well as before
    assert abs(float(balanced_b) - float(balanced_a)) < 0.05
