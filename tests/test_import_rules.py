"""Which part of ragmon may import which: the arrows of the README's Layout section, checked on every import
statement of the shipped code (module-level and inside functions, and `importlib.import_module("ragmon....")`
with a literal name).

- the SDK (ragmon's own top-level modules and `ragmon.integrations`) imports none of the agent's packages, so
  `pip install ragmon` in an app stays light;
- the parts — `ragmon.collectors` (receive), `ragmon.sinks` (store), `ragmon.judges` (score) — import only the SDK,
  never each other;
- `ragmon.agent` is where the parts are wired together;
- the commands built on it: `ragmon.evaluation` (offline evaluation, back-evaluation of the store with a judge) and
  `ragmon.demo` (the sample app, and `ragmon demo`, which runs it through an embedded agent);
- `ragmon.cli` names every command's module (by string, so `ragmon --help` imports nothing heavy).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {"ragmon": "ragmon", "collectors": "ragmon.collectors", "judges": "ragmon.judges", "sinks": "ragmon.sinks"}

SDK = "sdk"
# part -> the parts it may import (its own modules always)
ALLOWED: dict[str, set[str]] = {
    SDK: set(),
    "integrations": {SDK},
    "collectors": {SDK},
    "sinks": {SDK},
    "judges": {SDK},
    "agent": {SDK, "collectors", "sinks", "judges"},
    "evaluation": {SDK, "agent", "judges", "sinks", "demo"},
    "demo": {SDK, "agent"},
    "cli": {SDK, "agent", "judges", "evaluation", "demo"},
}


def part_of(module: str) -> str | None:
    """The part a `ragmon...` module belongs to (None: not ragmon's)."""
    names = module.split(".")
    if names[0] != "ragmon":
        return None
    if len(names) == 1:
        return SDK
    return names[1] if names[1] in ALLOWED else SDK


def module_name(path: Path) -> str:
    folder, *rest = path.relative_to(REPO).with_suffix("").parts
    names = [*FOLDERS[folder].split("."), *rest]
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def imported(source: str, module: str) -> Iterator[tuple[int, str]]:
    """(line, imported module) for each import in `source` (relative imports resolved against `module`)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*module.split(".")[: -node.level], *([base] if base else [])])
            yield node.lineno, base
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
            "import_module",
            "_lazy",
        ):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield node.lineno, first.value


def violations(source: str, module: str) -> list[str]:
    """The imports of `module` (whose text is `source`) that break an arrow, as readable lines."""
    part = part_of(module)
    assert part is not None
    found = []
    for line, target in imported(source, module):
        other = part_of(target)
        if other is None or other == part:
            continue
        if other not in ALLOWED[part]:
            found.append(f"{module}:{line} imports {target} ({part} may import {sorted(ALLOWED[part]) or 'nothing'})")
    return found


def shipped_modules() -> Iterator[tuple[str, Path]]:
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            yield module_name(path), path


def test_every_import_follows_the_arrows() -> None:
    broken = [v for module, path in shipped_modules() for v in violations(path.read_text(), module)]
    assert broken == []


def test_the_modules_are_all_found() -> None:
    modules = {module for module, _ in shipped_modules()}
    assert {"ragmon", "ragmon.collectors.http_receiver", "ragmon.sinks.store", "ragmon.judges.worker"} <= modules
    assert {part_of(m) for m in modules} == set(ALLOWED)


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("ragmon.judges.worker", "from ragmon.sinks.store import Store"),
        ("ragmon.collectors.http_receiver", "def f():\n    import ragmon.agent.wal"),
        ("ragmon.sinks.store", "from ragmon.judges import metrics"),
        ("ragmon._configure", "import importlib\nimportlib.import_module('ragmon.agent.agent')"),
        ("ragmon.demo.app", "from ragmon.collectors import HttpReceiver"),
        ("ragmon.judges.metrics.faithfulness", "from ...sinks import schema"),
    ],
)
def test_a_broken_arrow_is_reported(module: str, source: str) -> None:
    assert len(violations(source, module)) == 1


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("ragmon.agent.agent", "from ragmon.sinks import Store\nfrom ragmon.collectors import HttpReceiver"),
        ("ragmon.judges.worker", "from ragmon.settings import Settings\nfrom ragmon.judges.queue import Lease"),
        ("ragmon.sinks.store", "from . import schema\nfrom ragmon.model import SPAN_COLUMNS"),
    ],
)
def test_allowed_arrows_pass(module: str, source: str) -> None:
    assert violations(source, module) == []
