"""Fixtures for the offline-evaluation tests: the Cranfield files, a random qrels/run generator, gate run files."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

CRANFIELD = Path(__file__).resolve().parents[3] / "shared" / "data" / "retrieval" / "cranfield"


@pytest.fixture(scope="session")
def cranfield() -> Path:
    if not (CRANFIELD / "qrels.tsv").exists():
        pytest.skip(f"Cranfield data not found at {CRANFIELD}")
    return CRANFIELD


@pytest.fixture(scope="session")
def golden(cranfield: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((cranfield / "golden_metrics_bm25.json").read_text())
    return loaded


RandomCase = tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]


def random_case(seed: int) -> RandomCase:
    """Qrels and a run with the awkward cases trec_eval has rules for.

    Score ties (scores drawn from a handful of values), document ids of different lengths (so byte order differs
    from numeric order), negative and zero grades, queries with no relevant document, empty rankings, run queries
    without qrels and qrels queries without a run.
    """
    rng = random.Random(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(rng.randint(5, 40)):
        qid = str(q * 7)
        docs = [str(d) for d in rng.sample(range(1, 300), 60)]
        shape = rng.random()
        if shape > 0.1:  # 10 % of queries: in the run only
            judged = docs[: rng.randint(0, 25)]
            qrels[qid] = {d: rng.choice((-1, 0, 0, 1, 1, 2, 3, 4)) for d in judged}
        if shape < 0.9:  # 10 % of queries: in the qrels only
            retrieved = docs[rng.randint(0, 10) : rng.randint(10, 60)] if rng.random() > 0.1 else []
            scores = [0.5, 1.0, 1.25, 2.0, 3.0] if rng.random() < 0.5 else [rng.random() for _ in range(8)]
            run[qid] = {d: rng.choice(scores) for d in retrieved}
    return qrels, run


@pytest.fixture
def make_random_case() -> Callable[[int], RandomCase]:
    return random_case


def write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture
def jsonl(tmp_path: Path) -> Callable[[str, Iterable[Mapping[str, Any]]], Path]:
    """Write rows to ``tmp_path / name`` as JSONL and return the path."""

    def write(name: str, rows: Iterable[Mapping[str, Any]]) -> Path:
        return write_jsonl(tmp_path / name, rows)

    return write
