"""The package's public surface: `__all__` names exist and load lazily; the CLI module stays light."""

from __future__ import annotations

import json
import subprocess
import sys

import ragmon.drift as drift


def test_all_is_unique_and_resolves() -> None:
    assert len(set(drift.__all__)) == len(drift.__all__)  # ruff (RUF022) keeps it sorted
    for name in drift.__all__:
        assert getattr(drift, name) is not None


def _loaded_after(statement: str, roots: tuple[str, ...]) -> list[str]:
    """Modules in (or under) `roots` that a fresh interpreter has loaded after running `statement`."""
    listing = f"sorted(m for m in sys.modules if m in {roots!r} or m.startswith(tuple(r + '.' for r in {roots!r})))"
    code = f"import json, sys; {statement}; print(json.dumps({listing}))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(result.stdout)
    return loaded


def test_registering_the_cli_command_loads_no_agent_dependencies() -> None:
    # `ragmon --help` builds every subcommand's parser: `ragmon alerts` must not pull numpy, httpx or the store.
    statement = (
        "import argparse; from ragmon.commands import alerts; alerts.add_alerts_arguments(argparse.ArgumentParser())"
    )
    assert _loaded_after(statement, ("numpy", "httpx", "ragmon.sinks", "ragmon.collectors", "chdb")) == []


def test_the_evaluator_does_not_load_the_store_or_receivers() -> None:
    roots = ("ragmon.sinks", "ragmon.collectors", "ragmon.judges", "chdb")
    assert _loaded_after("from ragmon.drift import AlertEvaluator", roots) == []
