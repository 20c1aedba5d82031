"""The JSONL dataset format: the shipped example loads, shorthands expand, and every bad line is named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragmon.demo.passages import load_corpus, load_questions
from ragmon.evaluation.dataset import DatasetRow, example_dataset_path, load_dataset, parse_dataset
from ragmon.evaluation.errors import EvalInputError


def test_example_dataset_matches_the_demo_questions_and_corpus() -> None:
    rows = load_dataset(example_dataset_path())
    by_id = {row.id: row for row in rows}
    questions = load_questions()
    # Every labelled demo question is in it, with its labels unchanged.
    for question in questions:
        assert by_id[question.id].question == question.question
        assert dict(by_id[question.id].relevant) == question.relevant
    # Every labelled paragraph exists in the corpus (labels are paragraph ids).
    paragraphs = {p.id for p in load_corpus()}
    assert {pid for row in rows for pid in row.relevant} <= paragraphs
    # The example exercises every field kind: unanswerable rows, facts, must-not phrases, plans with alternatives.
    assert any(not row.answerable for row in rows)
    assert any(row.facts for row in rows) and any(row.must_not for row in rows)
    assert any(row.expected_plan and row.expected_plan.alternatives for row in rows)


def test_shorthands_and_defaults() -> None:
    text = json.dumps(
        {
            "id": 7,
            "question": "When was it built?",
            "reference_answer": "In 1889.",
            "facts": ["1889", ["three hundred", "300"], {"name": "height", "alternatives": ["330 m"]}],
            "expected_plan": {"steps": [{"tool": "search"}]},
        }
    )
    [row] = parse_dataset(text)
    assert row.id == "7" and row.answerable is True and row.reference_answer == ("In 1889.",)
    assert [f.alternatives for f in row.facts] == [("1889",), ("three hundred", "300"), ("330 m",)]
    assert row.facts[2].name == "height"
    assert row.expected_plan is not None
    assert row.expected_plan.labelled()[0][0] == "primary" and row.expected_plan.steps[0].arguments is None


def test_every_bad_line_is_reported_with_its_line_number(tmp_path: Path) -> None:
    good = json.dumps({"id": "a", "question": "q?"})
    lines = [
        good,
        "",  # blank: skipped
        "# a comment",
        "{not json",
        json.dumps({"id": "b"}),  # no question
        json.dumps({"id": "c", "question": "q?", "must_nto": ["x"]}),  # typo: unknown key
        json.dumps({"id": "d", "question": "q?", "answerable": False, "facts": ["x"]}),
        json.dumps({"id": "e", "question": "q?", "relevant": {"p1": "high"}}),
        json.dumps(["a", "list"]),
        good,  # duplicate id
    ]
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(EvalInputError) as caught:
        load_dataset(path)
    message = str(caught.value)
    assert message.startswith("7 invalid dataset line(s)")
    assert f"{path}:4: not JSON" in message
    assert f"{path}:5 (row 'b'): question: Field required" in message
    assert f"{path}:6 (row 'c'): must_nto: Extra inputs are not permitted" in message
    assert f"{path}:7 (row 'd')" in message and "cannot require facts" in message
    assert f"{path}:8 (row 'e'): relevant.p1" in message
    assert f"{path}:9: expected a JSON object, got list" in message
    assert "duplicate id 'a'" in message


def test_empty_and_missing_files_are_input_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n# only a comment\n")
    with pytest.raises(EvalInputError, match="no rows"):
        load_dataset(empty)
    with pytest.raises(EvalInputError, match="cannot read"):
        load_dataset(tmp_path / "missing.jsonl")


def test_rows_are_immutable() -> None:
    row = DatasetRow(id="x", question="q?")
    with pytest.raises(ValueError):
        row.question = "changed"  # type: ignore[misc]


def test_the_docs_dataset_example_is_valid() -> None:
    import re

    doc = (Path(__file__).parents[2] / "docs" / "evaluation.md").read_text()
    (example,) = re.findall(r"```jsonl\n(.*?)```", doc, flags=re.S)
    rows = parse_dataset(example, "docs/evaluation.md")
    assert [row.id for row in rows] == ["q24", "u01"]
    assert rows[0].expected_plan is not None and rows[0].expected_plan.alternatives[0].label == "docs only"
    assert rows[1].answerable is False
