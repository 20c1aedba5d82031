"""`ragmon eval run`: the demo app over a slice of the example dataset, spans captured by an in-memory exporter."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragmon
from ragmon import attributes as attr
from ragmon.cli import main
from ragmon.evaluation.app_entry import load_entry_point, to_app_result
from ragmon.evaluation.dataset import DatasetRow, example_dataset_path, load_dataset
from ragmon.evaluation.demo_entry import answer as demo_answer
from ragmon.evaluation.errors import EvalInputError
from ragmon.evaluation.eval_run import summarise, traced_run
from ragmon.evaluation.gate_runs import read_results

SLICE = ("q01", "q24", "q35", "u01", "u03")


@pytest.fixture(scope="module")
def rows() -> list[DatasetRow]:
    by_id = {row.id: row for row in load_dataset(example_dataset_path())}
    return [by_id[i] for i in SLICE]


def test_demo_run_tags_every_span_and_scores_every_row(rows: list[DatasetRow]) -> None:
    exporter = InMemorySpanExporter()
    results = traced_run(
        rows, demo_answer, run_name="nightly", dataset_name="eval_dataset.jsonl", span_exporter=exporter
    )
    spans = exporter.get_finished_spans()
    # Every exported span carries the run and its row; every row has its request span.
    assert spans and all(s.attributes and s.attributes[attr.RAGMON_EVAL_RUN] == "nightly" for s in spans)
    tagged_rows = {s.attributes[attr.RAGMON_EVAL_ROW_ID] for s in spans if s.attributes}
    assert tagged_rows == set(SLICE)
    by_row = {r.row_id: r for r in results}

    # Retrieval: recompute R@5 and MRR of the search stage by hand from the exported search span.
    for row in rows:
        if not row.relevant:
            assert by_row[row.id].metrics["search.R@5"] is None  # unjudged rows are not scored
            continue
        [search] = [
            s
            for s in spans
            if s.attributes
            and s.attributes.get(attr.RAGMON_EVAL_ROW_ID) == row.id
            and s.attributes.get(attr.GEN_AI_OPERATION_NAME) == "retrieval"
        ]
        ids = [d["id"] for d in json.loads(str(search.attributes[attr.GEN_AI_RETRIEVAL_DOCUMENTS]))]  # type: ignore[index]
        relevant = {p for p, grade in row.relevant.items() if grade >= 1}
        assert by_row[row.id].metrics["search.R@5"] == pytest.approx(len(relevant & set(ids[:5])) / len(relevant))
        first = next((rank for rank, d in enumerate(ids, start=1) if d in relevant), None)
        assert by_row[row.id].metrics["search.MRR"] == pytest.approx(1 / first if first else 0.0)

    # Trajectory: q24 asks about ports, so the demo calls its settings tool with both port settings.
    q24 = by_row["q24"]
    assert q24.metrics["tool_recall"] == 1.0 and q24.metrics["argument_accuracy"] == 1.0
    assert q24.checks["trajectory"] and q24.details["plan"] == "primary"
    assert q24.checks["facts"]  # "4318" and "4317" are in the demo's answer
    # Refusals: u01 (out of domain) is refused by the demo — right; u03 is answered from loosely related docs — a
    # missed refusal, which fails the row.
    assert by_row["u01"].details["refusal"] == "correct_refusal" and by_row["u01"].passed
    assert by_row["u03"].details["refusal"] == "missed_refusal" and not by_row["u03"].passed
    # The trace ids in the results are the ones exported.
    assert set(q24.details["trace_ids"]) <= {format(s.context.trace_id, "032x") for s in spans if s.context}
    summary = summarise("nightly", results)
    assert summary.rows == len(SLICE) and summary.passed == sum(r.passed for r in results)
    assert not ragmon.stats()["configured"]  # the run leaves the SDK unconfigured


def test_a_failing_row_is_recorded_and_the_run_goes_on(rows: list[DatasetRow]) -> None:
    def flaky(row: DatasetRow) -> Any:
        if row.id == "q24":
            raise TimeoutError("tool backend down")
        return demo_answer(row)

    results = traced_run(rows, flaky, run_name="flaky", export=False)
    by_row = {r.row_id: r for r in results}
    assert by_row["q24"].checks == {"app_error": False} and not by_row["q24"].passed
    assert by_row["q24"].details["error"] == "TimeoutError: tool backend down"
    assert by_row["q24"].metrics == {}  # nothing measured, so nothing counted as zero
    assert by_row["q01"].checks["app_error"] and len(results) == len(rows)


def test_app_results_in_every_supported_shape() -> None:
    assert to_app_result("Paris.").answer == "Paris."
    mapped = to_app_result({"answer": "I don't know", "refused": True, "trace_id": "ab"})
    assert (mapped.refused, mapped.trace_id) == (True, "ab")

    class Reply:
        text = "Paris."
        trace_id = None

    assert to_app_result(Reply()).answer == "Paris." and to_app_result(Reply()).refused is None
    assert to_app_result(42).error is not None and to_app_result({"answer": 1}).error is not None


def test_entry_point_errors_are_clear() -> None:
    assert load_entry_point("ragmon.evaluation.demo_entry:answer") is demo_answer
    for spec, message in (
        ("no_colon", "module:function"),
        ("ragmon.no_such_module:f", "cannot import"),
        ("ragmon.evaluation.demo_entry:nope", "has no attribute"),
        ("ragmon.evaluation.demo_entry:DatasetRow.model_config", "not callable"),
    ):
        with pytest.raises(EvalInputError, match=message):
            load_entry_point(spec)


def test_the_app_is_imported_from_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As `python -m` would: the `ragmon` script's sys.path starts at its bin directory, not where it runs."""
    (tmp_path / "worse_app_for_this_test.py").write_text("def answer(row):\n    return 'from the working directory'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    answer = load_entry_point("worse_app_for_this_test:answer")
    assert answer(None) == "from the working directory"


def test_cli_run_writes_a_results_file_the_gate_compares(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = tmp_path / "slice.jsonl"
    lines = example_dataset_path().read_text().splitlines()
    dataset.write_text("\n".join(line for line in lines if json.loads(line)["id"] in SLICE) + "\n")
    outputs = []
    for name in ("base", "cand"):
        out = tmp_path / f"{name}.jsonl"
        code = main(
            [
                "eval",
                "run",
                str(dataset),
                "--app",
                "ragmon.evaluation.demo_entry:answer",
                "--name",
                name,
                "--no-export",
                "--out",
                str(out),
                "--json",
            ]
        )
        assert code == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["name"] == name and summary["rows"] == len(SLICE) and summary["results"] == str(out)
        outputs.append(out)
    rows = read_results(outputs[0])
    assert set(rows) == set(SLICE) and rows["q24"].metrics["tool_recall"] == 1.0
    # The demo is deterministic: the same app twice is no regression.
    assert main(["gate", str(outputs[0]), str(outputs[1])]) == 0
    assert "q24" in outputs[0].read_text() and json.loads(outputs[0].read_text().splitlines()[0])["run"] == "base"


def test_cli_run_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": "a"}\n')
    app = ["--app", "ragmon.evaluation.demo_entry:answer", "--no-export"]
    assert main(["eval", "run", str(broken), *app]) == 2
    assert "broken.jsonl:1 (row 'a'): question: Field required" in capsys.readouterr().err
    assert main(["eval", "run", str(example_dataset_path()), "--app", "nowhere:f", "--no-export"]) == 2
    assert "cannot import 'nowhere'" in capsys.readouterr().err


def test_the_run_marks_spans_started_outside_its_rows_by_their_resource(rows: list[DatasetRow]) -> None:
    """A span the app starts in a thread of its own (no context carried over) is outside every row, so the row
    tagger cannot mark it; the run's resource attribute still does, and the store reads it from there."""
    import threading

    def app(row: DatasetRow) -> str:
        def background() -> None:
            with ragmon.tool("cache warm-up"):
                pass

        worker = threading.Thread(target=background)
        worker.start()
        worker.join()
        return "an answer"

    exporter = InMemorySpanExporter()
    traced_run(rows[:1], app, run_name="nightly-7", span_exporter=exporter)
    [span] = exporter.get_finished_spans()
    assert span.name == "execute_tool cache warm-up"
    assert attr.RAGMON_EVAL_ROW_ID not in (span.attributes or {})  # outside the row: not tagged ...
    assert span.resource.attributes[attr.RAGMON_EVAL_RUN] == "nightly-7"  # ... but marked by the run


def test_third_party_spans_on_the_apps_own_provider_carry_the_run(
    rows: list[DatasetRow], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Instrumentation libraries trace through OpenTelemetry's global provider, which the app set up and exports
    from itself: the run tags the spans started there during a row, so they land marked wherever they go."""
    from opentelemetry import trace as trace_api
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    monkeypatch.setattr(trace_api, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(trace_api, "_TRACER_PROVIDER_SET_ONCE", trace_api.Once())
    apps_exporter = InMemorySpanExporter()
    apps_provider = TracerProvider()
    apps_provider.add_span_processor(SimpleSpanProcessor(apps_exporter))
    trace_api.set_tracer_provider(apps_provider)
    library = trace_api.get_tracer("some-instrumentation")  # as an instrumentor takes it, before the run

    def app(row: DatasetRow) -> str:
        with library.start_as_current_span("ChatCompletion"):
            return "an answer"

    with library.start_as_current_span("before the run"):
        pass
    traced_run(rows[:2], app, run_name="nightly-8", span_exporter=InMemorySpanExporter())
    traced_run(rows[:1], app, run_name="nightly-9", span_exporter=InMemorySpanExporter())  # tagged once, not twice
    marks = [(s.name, (s.attributes or {}).get(attr.RAGMON_EVAL_RUN)) for s in apps_exporter.get_finished_spans()]
    assert marks == [
        ("before the run", None),
        ("ChatCompletion", "nightly-8"),
        ("ChatCompletion", "nightly-8"),
        ("ChatCompletion", "nightly-9"),
    ]
    assert len(apps_provider._active_span_processor._span_processors) == 2  # the app's exporter and one tagger
