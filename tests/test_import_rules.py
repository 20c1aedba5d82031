"""Which part of ragmon may import which: the arrows of docs/architecture.md, checked on every import statement of
the shipped code (module-level and inside functions, and `importlib.import_module("ragmon....")` with a literal name).

- the SDK (ragmon's own top-level modules and `ragmon.integrations`) imports none of the agent's packages, so
  `pip install ragmon` in an app stays light;
- the parts — `ragmon.collectors` (receive), `ragmon.sinks` (store), `ragmon.judges` (score), `ragmon.sampling`
  (the tail sampler's policies), `ragmon.drift` (signals, detectors, rules, alert channels) and `ragmon.dashboard`
  (its routes, review queue and keys) — import only the SDK and the store's or judges' modules they read;
- `ragmon.pipeline` is a span's path from the write-ahead log to a score (log, store, sample, keep, queue, roll up,
  judge), built from the parts above;
- `ragmon.agent` is where the parts are wired together: receivers, pipeline, alerting, API and dashboard;
- the commands built on it: `ragmon.commands` (serve, report, query, alerts, judge, ...), `ragmon.evaluation`
  (offline evaluation, back-evaluation of the store with a judge) and `ragmon.demo` (the sample app, and
  `ragmon demo`, which runs it through an embedded agent);
- `ragmon.cli` names every command's module (by string, so `ragmon --help` imports nothing heavy).

And no part reaches into another's privates: a name or module starting with `_` is imported only inside its part.
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
    "sampling": {SDK},
    "drift": {SDK, "sinks"},
    "dashboard": {SDK, "collectors", "sinks", "judges"},
    "pipeline": {SDK, "collectors", "sinks", "judges", "sampling", "questions"},
    "agent": {SDK, "collectors", "sinks", "judges", "sampling", "drift", "dashboard", "pipeline", "questions"},
    "commands": {SDK, "agent", "pipeline", "sinks", "judges", "sampling", "drift"},
    "evaluation": {SDK, "agent", "pipeline", "judges", "sinks", "demo", "commands"},
    "demo": {SDK, "agent", "commands", "sampling", "drift"},
    "cli": {SDK, "commands", "judges", "evaluation", "demo"},
    "questions": {SDK},
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


# Parts whose modules other parts reach only through the package itself (its `__init__` is the public surface).
# `ragmon.cli` is the exception that names each command's own module, so `ragmon --help` loads only the one it runs.
ONE_SURFACE = {"agent", "sampling", "drift", "dashboard", "commands", "pipeline", "questions"}


def imported(source: str, module: str) -> Iterator[tuple[int, str, list[str]]]:
    """(line, imported module, names imported from it) for each import in `source` (relative imports resolved
    against `module`)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*module.split(".")[: -node.level], *([base] if base else [])])
            yield node.lineno, base, [alias.name for alias in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
            "import_module",
            "_lazy",
        ):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield node.lineno, first.value, []


def _private(names: list[str]) -> list[str]:
    return [name for name in names if name.startswith("_") and not name.startswith("__")]


def violations(source: str, module: str) -> list[str]:
    """The imports of `module` (whose text is `source`) that break an arrow, reach into another part's privates or
    past another part's surface, as readable lines."""
    part = part_of(module)
    assert part is not None
    found = []
    for line, target, names in imported(source, module):
        other = part_of(target)
        if other is None or other == part:
            continue
        where = f"{module}:{line} imports {target}"
        if other not in ALLOWED[part]:
            found.append(f"{where} ({part} may import {sorted(ALLOWED[part]) or 'nothing'})")
        # The SDK's instrumentations ship in the SDK's own package and read its state: one part in all but name.
        sdk_family = {part, other} == {"integrations", SDK}
        if (private := _private(target.split(".")) + _private(names)) and not sdk_family:
            found.append(f"{where}: {', '.join(private)} private to {other}")
        if other in ONE_SURFACE and part != "cli" and target != f"ragmon.{other}":
            found.append(f"{where}: other parts import ragmon.{other} itself, its public surface")
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
        ("ragmon.collectors.http_receiver", "def f():\n    import ragmon.sinks.store"),
        ("ragmon.sinks.store", "from ragmon.judges import metrics"),
        ("ragmon._configure", "import importlib\nimportlib.import_module('ragmon.agent')"),
        ("ragmon.demo.app", "from ragmon.collectors import HttpReceiver"),
        ("ragmon.judges.metrics.faithfulness", "from ...sinks import schema"),
        ("ragmon.sampling.batch", "from ragmon.drift import SIGNALS"),
        ("ragmon.commands.judge", "from ragmon.sinks.store import _dedupe"),
        ("ragmon.agent.agent", "from ragmon.judges._private_helpers import x"),
        ("ragmon.demo.pipeline", "from ragmon.commands.common import CommandError"),
        ("ragmon.agent.alerting", "def f():\n    from ragmon.drift.rules import AlertsConfig"),
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
        ("ragmon.sinks.store", "from ragmon.sinks._helpers import _dedupe"),
        ("ragmon.agent.agent", "from ragmon.drift import AlertsConfig\nfrom ragmon.sampling import Sampler"),
        ("ragmon.cli", "import importlib\nimportlib.import_module('ragmon.commands.serve')"),
    ],
)
def test_allowed_arrows_pass(module: str, source: str) -> None:
    assert violations(source, module) == []
