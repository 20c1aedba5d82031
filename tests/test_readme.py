"""The README's examples run: the SDK example executes and produces the spans it promises."""

from __future__ import annotations

import re
from pathlib import Path

import ragmon

README = (Path(__file__).parent.parent / "README.md").read_text()


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_readme_sdk_example_runs(captured) -> None:
    (example,) = _python_blocks()
    namespace: dict[str, object] = {}
    exec(compile(example, "README.md", "exec"), namespace)
    cap = captured()  # re-point ragmon at an in-memory exporter; the example's configure used the default endpoint
    assert namespace["answer"]("how do I install?", [0.6, 0.8]) == "Run pip install ragmon."
    stages = cap.by_stage()
    assert sorted(stages) == ["embed", "generate", "request", "rerank", "search"]
    assert stages["generate"].attributes["llm.cost.total"] > 0
    assert stages["search"].attributes["ragmon.retrieval.top1_score"] == 0.82


def test_readme_commands_use_the_ci_marker() -> None:
    assert "<!-- test-command" in README
    ci = (Path(__file__).parent.parent / ".ci" / "run").read_text()
    assert "test-command" in ci
    assert ragmon.__version__
