"""The README's and the reference's examples run: the SDK example executes and produces the spans it promises, and
the settings the README and docs/ show are settings ragmon accepts, meaning what they say."""

from __future__ import annotations

import re
from pathlib import Path

import ragmon

REPO = Path(__file__).parent.parent
README = (REPO / "README.md").read_text()
AGENT_DOC = (REPO / "docs" / "agent.md").read_text()
JUDGES_DOC = (REPO / "docs" / "judges.md").read_text()
TABLES_DOC = (REPO / "docs" / "tables.md").read_text()


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_readme_sdk_example_runs(captured) -> None:
    example = _python_blocks()[0]
    namespace: dict[str, object] = {}
    exec(compile(example, "README.md", "exec"), namespace)
    cap = captured(capture_content=True)  # in memory, configured as the example is (it used the default endpoint)
    assert namespace["answer"]("how do I install?", [0.6, 0.8]) == "Run pip install ragmon."
    stages = cap.by_stage()
    assert sorted(stages) == ["embed", "generate", "request", "rerank", "search"]
    assert stages["generate"].attributes["llm.cost.total"] > 0
    assert stages["search"].attributes["ragmon.retrieval.top1_score"] == 0.82
    # the passage text the judges read rides along when content capture is on (the example turns it on)
    texts = stages["search"].attributes["ragmon.retrieval.document_texts"]
    assert texts is not None and tuple(texts) == ("Install with pip install ragmon.", "...")  # type: ignore[arg-type]


def test_readme_commands_use_the_ci_marker() -> None:
    assert "<!-- test-command" in README
    ci = (Path(__file__).parent.parent / ".ci" / "run").read_text()
    assert "test-command" in ci
    assert ragmon.__version__


def _toml_block(text: str, holding: str) -> str:
    (toml,) = [block for block in re.findall(r"```toml\n(.*?)```", text, flags=re.S) if holding in block]
    return toml


def test_readme_sampling_config_is_valid(tmp_path: Path) -> None:
    from ragmon.sampling import SamplerConfig
    from ragmon.settings import load_settings

    toml = _toml_block(AGENT_DOC, "[agent.sampling]")
    config = tmp_path / "ragmon.toml"
    config.write_text(toml)
    sampling = SamplerConfig.model_validate(load_settings(config_file=config, env={}).agent.sampling)
    assert [p.type for p in sampling.policies] == ["attribute", "error", "slow", "retrieval_health", "baseline"]
    assert sampling.budget.traces_per_s == 50


def test_the_readme_tables_section_is_the_schema() -> None:
    """docs/tables.md lists every table and column users query exactly as `ragmon schema --markdown` renders them
    from the schema source; after a schema change, regenerate it with `python docs/generate.py`."""
    from ragmon.sinks.schema_doc import render_markdown

    section = TABLES_DOC.split("<!-- schema:start -->\n", 1)[1].split("<!-- schema:end -->", 1)[0]
    assert section == render_markdown()


def test_readme_scores_out_example_turns_the_events_on() -> None:
    """The scores-out example's variables are settings ragmon reads, and they give a working exporter."""
    from ragmon.pipeline.score_events import open_events
    from ragmon.settings import load_settings

    block = JUDGES_DOC.split("<!-- scores-out example", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    env = dict(re.findall(r"^(RAGMON_\w+)='?(.*?)'? \\$", block, flags=re.M))
    assert set(env) == {"RAGMON_JUDGE__EVENTS__ENDPOINT", "RAGMON_JUDGE__EVENTS__HEADERS"}
    events = load_settings(env=env).judge.events
    assert events.endpoint == "http://otel-collector:4318" and events.protocol == "http/protobuf"
    assert events.headers["authorization"].get_secret_value() == "Bearer <token>"
    opened = open_events(events)  # builds the OTLP/HTTP exporter; nothing is sent until a score is
    assert opened is not None
    opened.shutdown(0.0)


def test_readme_walkthrough_keeps_every_trace() -> None:
    """The README's first `ragmon serve` sets the sampler to keep the text of every trace, so the one request the
    walkthrough sends is kept and judged."""
    from ragmon.sampling import SamplerConfig
    from ragmon.settings import load_settings

    (line,) = [line for line in README.splitlines() if line.startswith("RAGMON_AGENT__SAMPLING=")]
    env = dict([line.split(" ragmon serve", 1)[0].replace("'", "").split("=", 1)])
    sampling = SamplerConfig.model_validate(load_settings(env=env).agent.sampling)
    assert [(p.type, getattr(p, "rate", None)) for p in sampling.policies] == [("baseline", 1.0)]


def test_agent_doc_alert_rules_are_valid(tmp_path: Path) -> None:
    """The alert rule and channel docs/agent.md shows pass the agent's start-up validation, as written."""
    from ragmon.drift import AlertsConfig
    from ragmon.settings import load_settings

    config = tmp_path / "ragmon.toml"
    config.write_text(_toml_block(AGENT_DOC, "[[agent.alerts.rules]]"))
    alerts = AlertsConfig.model_validate(load_settings(config_file=config, env={}).agent.alerts)
    (rule,) = alerts.rules
    assert (rule.name, rule.signal, rule.detector.type, rule.channels) == (
        "checkout_latency",
        "latency_p95_ms",
        "cusum",
        ["oncall"],
    )
    assert alerts.channels["oncall"].type == "webhook"
