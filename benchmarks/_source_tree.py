"""Run ragmon from a given source tree: this checkout, or a git worktree of another revision (`--against REV`).

The installed (editable) ragmon maps `ragmon.collectors`, `ragmon.judges` and `ragmon.sinks` to this checkout's
top-level folders (pyproject's package-dir). A worktree of another revision is not installed, so its code is imported
by putting the tree first on `sys.path` and adding the tree's root to `ragmon.__path__` (the same mapping: the
`collectors/` folder is then `ragmon.collectors`). Revisions from before that mapping import `collectors`, `judges`
and `sinks` as top-level packages, which the `sys.path` entry alone serves.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
THIS_TREE = "this tree"

_SITECUSTOMIZE = """\
# Written by benchmarks/_source_tree.py: every Python process of this run imports ragmon from {tree!r}.
import sys
sys.path.insert(0, {tree!r})
import ragmon
ragmon.__path__.append({tree!r})
"""


def namespaced(tree: Path) -> bool:
    """Whether `tree` imports its agent packages as `ragmon.collectors` etc. (else as top-level `collectors`)."""
    return "package-dir" in (tree / "pyproject.toml").read_text()


def import_from(tree: Path) -> None:
    """Make this process import ragmon (and its agent packages) from `tree`; call before anything imports ragmon."""
    if "ragmon" in sys.modules:
        raise RuntimeError("ragmon was imported before its source tree was chosen")
    sys.path.insert(0, str(tree))
    import ragmon

    ragmon.__path__.append(str(tree))


def agent_package(tree: Path, name: str) -> ModuleType:
    """The tree's `collectors`, `judges` or `sinks`, under whichever name that revision gives it."""
    module = importlib.import_module(f"ragmon.{name}" if namespaced(tree) else name)
    if not Path(module.__file__ or "").resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"{module.__name__} came from {module.__file__}, not from {tree}")
    return module


def environment(tree: Path, scratch: Path) -> dict[str, str]:
    """Environment variables under which every Python process (the benchmark and the agents it starts) imports
    ragmon from `tree`: a `sitecustomize` in `scratch`, which Python runs at start-up from PYTHONPATH."""
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(tree=str(tree.resolve())))
    return {**os.environ, "PYTHONPATH": str(scratch)}


@contextlib.contextmanager
def trees(against: str | None, scratch: Path) -> Iterator[dict[str, Path]]:
    """{"this tree": this checkout[, against: a detached git worktree of that revision under `scratch`]}; the
    worktree is removed afterwards."""
    if against is None:
        yield {THIS_TREE: REPO}
        return
    other = scratch / "against"
    add = ["git", "-C", str(REPO), "worktree", "add", "--detach", str(other), against]
    subprocess.run(add, check=True, capture_output=True)
    try:
        yield {THIS_TREE: REPO, against: other}
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(other)], check=False)


def alternate(
    trees: dict[str, Path],
    rounds: int,
    run: Callable[[Path], dict[str, float]],
    show: Callable[[str, dict[str, float]], None],
) -> dict[str, dict[str, float]]:
    """`run` each tree `rounds` times, which tree goes first changing every round (this machine's speed drifts
    within minutes: only runs alternated like this compare), `show`ing every run; the medians per tree."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for round_index in range(rounds):
        print(f"round {round_index + 1}", flush=True)
        order = list(trees) if round_index % 2 == 0 else list(reversed(trees))
        for name in order:
            runs[name].append(run(trees[name]))
            show(name, runs[name][-1])
    return {
        name: {figure: statistics.median(run[figure] for run in side) for figure in side[0]}
        for name, side in runs.items()
    }
