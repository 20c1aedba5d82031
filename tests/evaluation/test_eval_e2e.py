"""End to end with a real agent subprocess: `ragmon eval run` exports the demo's traces to the agent (tagged with
the run and the row), then `ragmon backeval` re-scores them with the LLM judge (the scripted server on loopback),
reading through the agent's API because the agent owns the data dir, and resumes to a no-op."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragmon import attributes as attr
from ragmon.cli import main
from ragmon.evaluation.dataset import example_dataset_path
from ragmon.evaluation.gate_runs import read_results
from ragmon.testing import Completion, ScriptedOpenAIServer
from tests.agent.harness import REPO, AgentProcess

SLICE = ("q01", "q24", "u01")
KEEP_ALL = json.dumps({"policies": [{"type": "baseline", "rate": 1.0}], "decision_grace_s": 0.2})


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    process = AgentProcess(
        tmp_path / "data",
        grpc=False,
        extra_env={"RAGMON_AGENT__SAMPLING": KEEP_ALL, "RAGMON_JUDGE__RUN_IN_AGENT": "false"},
    ).start()
    yield process
    if process.process is not None and process.process.poll() is None:
        process.stop()


def relevance_reply(request: object) -> Completion:
    return Completion(json.dumps({"verdicts": [{"item": i, "verdict": "relevant"} for i in range(4)]}))


@pytest.mark.slow
def test_eval_run_lands_in_the_store_and_backeval_rescores_it(
    tmp_path: Path, agent: AgentProcess, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = tmp_path / "slice.jsonl"
    lines = example_dataset_path().read_text().splitlines()
    dataset.write_text("\n".join(line for line in lines if json.loads(line)["id"] in SLICE) + "\n")
    eval_out = tmp_path / "e2e.jsonl"
    app = "ragmon.evaluation.demo_entry:answer"
    args = ["eval", "run", str(dataset), "--app", app, "--endpoint", agent.otlp_http, "--name", "e2e"]
    assert main([*args, "--out", str(eval_out)]) == 0
    capsys.readouterr()
    # --data-dir starts an embedded agent, which cannot share a directory a running agent owns: said clearly.
    assert main([*args[:5], "--data-dir", str(agent.data_dir), "--out", str(tmp_path / "x.jsonl")]) == 2
    assert f"owned by a running agent (API {agent.api})" in capsys.readouterr().err

    # The run's spans are in the production store, tagged; the sampler kept their text.
    key = attr.RAGMON_EVAL_ROW_ID
    tagged = f"SELECT uniqExact(attributes['{key}']) AS n FROM spans WHERE attributes['{attr.RAGMON_EVAL_RUN}'] = 'e2e'"
    assert agent.wait_for(tagged, len(SLICE), timeout_s=60) == len(SLICE)
    assert agent.wait_for("SELECT count() AS n FROM payloads FINAL", len(SLICE), timeout_s=60) == len(SLICE)

    with ScriptedOpenAIServer(default=relevance_reply) as server:
        monkeypatch.setenv("RAGMON_JUDGE__BASE_URL", server.base_url)
        out = tmp_path / "b-e2e.jsonl"
        backeval = ["backeval", "--data-dir", str(agent.data_dir), "--judge", "llm", "--metrics", "context_relevance"]
        backeval += ["--eval-run", "e2e", "--name", "b-e2e", "--out", str(out), "--yes"]
        assert main(backeval) == 0
        captured = capsys.readouterr()
        assert f"from agent {agent.api}" in captured.err and "estimated cost: 3 traces" in captured.err
        assert "a running agent owns it" in captured.out
        assert len(server.requests) == len(SLICE) and server.handler_errors == []

        # The back-evaluation pairs with the eval run: same row ids.
        rows = read_results(out)
        assert set(rows) == set(read_results(eval_out)) == set(SLICE)
        assert all(row.metrics["context_relevance"] == 1.0 for row in rows.values())

        # Resuming a finished run scores nothing and calls the judge no more.
        assert main(backeval) == 0
        assert "0 traces scored now, 3 before" in capsys.readouterr().out
        assert len(server.requests) == len(SLICE)
    assert main(["gate", str(out), str(out)]) == 0


def ragmon_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`ragmon …` in its own process: the embedded store takes one engine path per process."""
    return subprocess.run(
        [sys.executable, "-m", "ragmon.cli", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_data_dir_run_stores_traces_and_backeval_writes_scores_back(tmp_path: Path) -> None:
    dataset = tmp_path / "slice.jsonl"
    lines = example_dataset_path().read_text().splitlines()
    dataset.write_text("\n".join(line for line in lines if json.loads(line)["id"] in SLICE) + "\n")
    data_dir = tmp_path / "data"
    run = ragmon_cli(
        "eval", "run", str(dataset), "--app", "ragmon.evaluation.demo_entry:answer", "--name", "dd",
        "--data-dir", str(data_dir), "--out", str(tmp_path / "dd.jsonl"),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "kept the text of 3 of 3 traces" in run.stderr
    # the run's report is of the run's traffic (the production view leaves it out)
    table = run.stderr.split("report (what `ragmon report --eval-run dd` shows):\n", 1)[1].split("\n\n", 1)[0]
    assert table.startswith("feature") and "docs-qa" in table and "request" in table
    with ScriptedOpenAIServer(default=relevance_reply) as server:
        out = tmp_path / "b-dd.jsonl"
        backeval = ragmon_cli(
            "backeval", "--data-dir", str(data_dir), "--judge", "llm", "--metrics", "context_relevance",
            "--eval-run", "dd", "--name", "b-dd", "--out", str(out), "--yes",
            env={"RAGMON_JUDGE__BASE_URL": server.base_url},
        )  # fmt: skip
        assert backeval.returncode == 0, backeval.stderr
        assert len(server.requests) == len(SLICE)
    assert f"from store {data_dir}" in backeval.stderr and "3 score rows in the store" in backeval.stdout
    assert set(read_results(out)) == set(SLICE)
    query = ragmon_cli(
        "query", "SELECT count() AS n FROM scores FINAL WHERE run_name = 'b-dd' AND status = 'ok'",
        "--data-dir", str(data_dir), "--json",
    )  # fmt: skip
    assert query.returncode == 0, query.stderr
    assert json.loads(query.stdout.splitlines()[0])["n"] == len(SLICE)


@pytest.mark.slow
def test_an_eval_run_lands_apart_from_production(
    tmp_path: Path, agent: AgentProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """Production traffic and an eval run of the same app and feature through one agent: every span of the run is
    stored with its eval_run, the report shows production unless asked for the run, and the run's own report has
    exactly its requests."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    import ragmon
    from ragmon.demo import RagApp

    provider = TracerProvider(resource=Resource.create({"service.name": "prod-app"}))
    ragmon.configure(tracer_provider=provider, endpoint=agent.otlp_http, service_name="prod-app")
    try:
        app = RagApp()
        for question in ("How do I rotate an API key?", "What does the agent store?"):
            app.answer(question)
        assert ragmon.force_flush(30)
    finally:
        ragmon.shutdown()
        provider.shutdown()

    dataset = tmp_path / "slice.jsonl"
    lines = example_dataset_path().read_text().splitlines()
    dataset.write_text("\n".join(line for line in lines if json.loads(line)["id"] in SLICE) + "\n")
    args = ["eval", "run", str(dataset), "--app", "ragmon.evaluation.demo_entry:answer", "--name", "apart-1"]
    assert main([*args, "--endpoint", agent.otlp_http, "--out", str(tmp_path / "apart.jsonl")]) == 0
    capsys.readouterr()

    # Every span of the run carries it; the production spans none.
    by_run = "SELECT count() AS n FROM spans WHERE eval_run = 'apart-1'"
    unmarked = f"SELECT count() AS n FROM spans WHERE eval_run = '' AND attributes['{attr.RAGMON_EVAL_RUN}'] != ''"
    traces = "SELECT uniqExact(trace_id) AS n FROM spans WHERE eval_run = 'apart-1'"
    assert agent.wait_for(traces, len(SLICE)) == len(SLICE)
    assert agent.query(unmarked) == [{"n": 0}]
    assert (
        agent.query(by_run)[0]["n"]
        == agent.query("SELECT count() AS n FROM spans WHERE service = 'ragmon-eval'")[0]["n"]
    )
    payloads = "SELECT count() AS n FROM payloads FINAL WHERE eval_run = 'apart-1'"
    assert agent.wait_for(payloads, len(SLICE)) == len(SLICE)
    # the report trails the spans: wait until both traffics are rolled up
    rolled = "SELECT sum(spans) AS n FROM spans_1m WHERE stage = 'request'"
    assert agent.wait_for(rolled, 2 + len(SLICE), timeout_s=60) == 2 + len(SLICE)

    def report(*extra: str) -> dict[tuple[str, str], int]:
        assert main(["report", "--json", "--since", "1h", "--data-dir", str(agent.data_dir), *extra]) == 0
        document = json.loads(capsys.readouterr().out)
        shown = f"eval run {extra[-1]}" if "--eval-run" in extra else "evaluation runs" if extra else "production"
        assert document["traffic"] == shown  # the JSON says which traffic it counts, as the text does
        return {(r["feature"], r["stage"]): r["requests"] for r in document["stages"]}

    production, run = report(), report("--eval-run", "apart-1")
    assert {k: v for k, v in production.items() if k[1] == "request"} == {("docs-qa", "request"): 2}
    assert {k: v for k, v in run.items() if k[1] == "request"} == {("docs-qa", "request"): len(SLICE)}
    assert report("--eval") == run
    # the sampler's own counts on /metrics keep the traffics apart too (every trace is kept here, as baseline)
    kept = 'ragmon_sampler_kept_traces_total{{reason="baseline",traffic="{}"}}'
    assert agent.metric(kept.format("production")) == 2
    assert agent.metric(kept.format("evaluation")) == len(SLICE)
    assert report("--eval-run", "another-run") == {}
    assert main(["report", "--since", "1h", "--data-dir", str(agent.data_dir)]) == 0  # the text says which traffic
    assert capsys.readouterr().out.startswith("traffic: production; evaluation runs: --eval or --eval-run NAME\n")
