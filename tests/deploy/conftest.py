"""Fixtures for the deployment tests: the repository's deploy/ files, parsed."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def load_all(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def parse_dockerfile(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        instruction, _, rest = line.partition(" ")
        out.append((instruction.upper(), rest.strip()))
    return out


def dockerfile_env(instructions: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction, rest in instructions:
        if instruction == "ENV":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                env[key] = value
    return env


@pytest.fixture(scope="session")
def compose() -> dict[str, Any]:
    (doc,) = load_all(DEPLOY / "docker" / "compose.yaml")
    return doc


@pytest.fixture(scope="session")
def dockerfile() -> list[tuple[str, str]]:
    return parse_dockerfile((DEPLOY / "docker" / "Dockerfile").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def k8s_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        docs.extend(load_all(path))
    return docs


@pytest.fixture(scope="session")
def collector_config() -> dict[str, Any]:
    (doc,) = load_all(DEPLOY / "otel-collector" / "config.yaml")
    return doc


def k8s_find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
