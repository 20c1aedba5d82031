"""Smoke test of benchmarks/poison.py at tiny sizes: every path stores every span it should and quarantines only
what it must. Correctness only — no timing is asserted (the machine is shared)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "poison.py"


def _load_benchmark() -> ModuleType:
    # benchmarks/ is a directory of scripts, not a package: load the file itself.
    spec = importlib.util.spec_from_file_location("poison_benchmark", _BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_each_path_stores_every_span_and_quarantines_only_damaged_records(
    chdb_engine_dir: Path, tmp_path: Path
) -> None:
    bench = _load_benchmark()
    requests, every = 12, 4
    runs = bench.run_rounds(bench.PATHS, requests, 5, every, 1, chdb_engine_dir, tmp_path)
    spans = requests * 5  # the template holds one whole trace of 5 spans
    for (path, variant), [run] in runs.items():
        damaged = path == "damaged" and variant == "poisoned"
        poison = requests // every if damaged else 0
        assert run.spans_stored == spans - poison * 5, (path, variant)
        assert run.quarantined == poison, (path, variant)
        assert run.inserts >= 1 and run.seconds > 0
