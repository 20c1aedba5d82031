"""The README's examples run: the SDK example executes and produces the spans it promises."""

from __future__ import annotations

import re
from pathlib import Path

import ragmon

README = (Path(__file__).parent.parent / "README.md").read_text()


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


def test_readme_sampling_config_is_valid(tmp_path: Path) -> None:
    from ragmon.sampling import SamplerConfig
    from ragmon.settings import load_settings

    (toml,) = re.findall(r"```toml\n(.*?)```", README, flags=re.S)
    config = tmp_path / "ragmon.toml"
    config.write_text(toml)
    sampling = SamplerConfig.model_validate(load_settings(config_file=config, env={}).agent.sampling)
    assert [p.type for p in sampling.policies] == ["attribute", "error", "slow", "retrieval_health", "baseline"]
    assert sampling.budget.traces_per_s == 50


def test_the_readme_tables_section_is_the_schema() -> None:
    """The README lists every table and column users query exactly as `ragmon schema --markdown` renders them
    from the schema source; after a schema change, regenerate the section with that command."""
    from ragmon.sinks.schema_doc import render_markdown

    section = README.split("<!-- schema:start -->\n", 1)[1].split("<!-- schema:end -->", 1)[0]
    assert section == render_markdown()


def test_readme_scores_out_example_turns_the_events_on() -> None:
    """The scores-out example's variables are settings ragmon reads, and they give a working exporter."""
    from ragmon.pipeline.score_events import open_events
    from ragmon.settings import load_settings

    block = README.split("<!-- scores-out example", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    env = dict(re.findall(r"^(RAGMON_\w+)='?(.*?)'? \\$", block, flags=re.M))
    assert set(env) == {"RAGMON_JUDGE__EVENTS__ENDPOINT", "RAGMON_JUDGE__EVENTS__HEADERS"}
    events = load_settings(env=env).judge.events
    assert events.endpoint == "http://otel-collector:4318" and events.protocol == "http/protobuf"
    assert events.headers["authorization"].get_secret_value() == "Bearer <token>"
    opened = open_events(events)  # builds the OTLP/HTTP exporter; nothing is sent until a score is
    assert opened is not None
    opened.shutdown(0.0)
