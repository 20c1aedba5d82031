"""What `pip install ragmon` puts in site-packages: one package, `ragmon`, holding every module of the four folders
pyproject maps into it (ragmon/, collectors/, judges/, sinks/), and no top-level `collectors`, `judges` or `sinks`
that would overwrite (or be overwritten by) the unrelated PyPI projects of those names."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {"ragmon": "ragmon", "ragmon.collectors": "collectors", "ragmon.judges": "judges", "ragmon.sinks": "sinks"}


def _packages_on_disk() -> set[str]:
    """Every directory with an `__init__.py` under the four folders, by its import name."""
    found = set()
    for name, folder in FOLDERS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(REPO / folder)
            found.add(".".join([name, *relative.parts]))
    # ragmon/ itself holds no mapped folder; a directory there named like one would shadow the mapping
    assert not {f for f in FOLDERS.values() if f != "ragmon" and (REPO / "ragmon" / f).exists()}
    return found


def test_pyproject_lists_every_package_and_maps_the_folders() -> None:
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == FOLDERS
    assert set(setuptools["packages"]) == _packages_on_disk()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(REPO)]
    subprocess.run(build, check=True, capture_output=True, cwd=out)
    (built,) = out.glob("ragmon-*.whl")
    return built


def test_the_wheel_installs_only_ragmon(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"ragmon"}
    modules = {name.removesuffix(".py").replace("/", ".") for name in names if name.endswith(".py")}
    for package in _packages_on_disk():
        assert f"{package}.__init__" in modules
    for folder in ("collectors", "judges", "sinks"):
        for source in (REPO / folder).rglob("*.py"):
            dotted = ".".join(source.relative_to(REPO).with_suffix("").parts)
            assert f"ragmon.{dotted}" in modules, source
    # the test support that used to ship in sinks/ stays with the tests
    assert "ragmon.sinks.chhttp" not in modules and "ragmon.sinks.synth" not in modules


def test_the_unpacked_wheel_has_ragmon_judges_but_no_top_level_judges(wheel: Path, tmp_path: Path) -> None:
    zipfile.ZipFile(wheel).extractall(tmp_path)
    probe = (
        "import importlib.util, sys; sys.path.insert(0, sys.argv[1]); "
        "import ragmon.judges.metrics, ragmon.sinks.schema, ragmon.collectors.errors as e; "
        "assert e.__file__.startswith(sys.argv[1]), e.__file__; "
        "print([n for n in ('collectors', 'judges', 'sinks') if importlib.util.find_spec(n) is not None])"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
