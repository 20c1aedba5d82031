"""`ragmon calibrate --from-store` against figures computed by hand (`agreement_case.py`): directly against a server
store, and beside a running `ragmon serve` that owns an embedded one (through its API, as `ragmon report` reads),
where the API key's tenant is all it sees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ragmon.sinks import open_store

from tests.agent.harness import REPO, AgentProcess, EngineServer
from tests.labels import agreement_case as case
from tests.labels.known_labels import JUDGE, OTHER_JUDGE


def _calibrate(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    return subprocess.run(
        [sys.executable, "-m", "ragmon.cli", "calibrate", "--from-store", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def _by_version(out: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(v["metric"], v["judge_version"]): v for v in json.loads(out)["versions"]}


def _assert_hand_computed(entry: dict[str, Any]) -> None:
    assert entry["n"] == 12 and entry["traces"] == 12 and entry["reviewers"] == 1 and entry["unscored"] == 1
    assert entry["threshold"] == 0.5
    assert entry["confusion"] == case.CONFUSION
    assert entry["kappa"] == pytest.approx(case.KAPPA)
    assert entry["accuracy"] == pytest.approx(case.ACCURACY)
    assert entry["tpr"] == pytest.approx(case.TPR) and entry["tnr"] == pytest.approx(case.TNR)
    assert entry["balanced_accuracy"] == pytest.approx(case.BALANCED)
    assert "only 12 labels" in entry["warning"]


@pytest.fixture(scope="module")
def server_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    engine = EngineServer(tmp_path_factory.mktemp("calibrate-engine"))
    try:
        store = open_store(engine.url)
        case.fill(store, other_tenant=False)  # read directly, a store shows every tenant's labels
        store.close()
        yield engine.url
    finally:
        engine.stop()


def test_against_a_server_store(server_store: str) -> None:
    done = _calibrate("--clickhouse-url", server_store, "--json")
    assert done.returncode == 0, done.stderr
    versions = _by_version(done.stdout)
    _assert_hand_computed(versions[("faithfulness", JUDGE)])
    other = versions[("faithfulness", OTHER_JUDGE)]  # labels yes, yes, no against 0.8, 0.2, 0.2
    assert other["n"] == 3 and other["confusion"] == {"tp": 1, "fn": 1, "fp": 0, "tn": 1}
    assert set(versions) == {("faithfulness", JUDGE), ("faithfulness", OTHER_JUDGE)}


def test_text_output_and_filters(server_store: str) -> None:
    done = _calibrate("--clickhouse-url", server_store, "--judge-version", OTHER_JUDGE)
    assert done.returncode == 0, done.stderr
    assert f"faithfulness  judge {OTHER_JUDGE}  threshold 0.500" in done.stdout
    assert JUDGE not in done.stdout
    assert "warning: only 3 labels" in done.stdout
    assert "  label: yes              1          1" in done.stdout
    # an explicit threshold overrides the version's: at 0.15 every OTHER_JUDGE verdict is a yes
    done = _calibrate("--clickhouse-url", server_store, "--judge-version", OTHER_JUDGE, "--threshold", "0.15", "--json")
    assert _by_version(done.stdout)[("faithfulness", OTHER_JUDGE)]["confusion"] == {"tp": 2, "fn": 0, "fp": 1, "tn": 0}
    none = _calibrate("--clickhouse-url", server_store, "--judge-version", "never-ran")
    assert none.returncode == 0 and "no labelled traces the judge scored" in none.stdout


def test_beside_a_running_agent_on_its_embedded_store(tmp_path: Path) -> None:
    data = tmp_path / "data"
    filled = subprocess.run(
        [sys.executable, "-m", "tests.labels.agreement_case", str(data / "chdb")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert filled.returncode == 0, filled.stderr
    keys = json.dumps({"acme": "acme-key", "globex": "globex-key"})
    agent = AgentProcess(data, extra_env={"RAGMON_AGENT__API_KEYS": keys}, grpc=False).start(timeout_s=300)
    try:
        done = _calibrate("--data-dir", str(data), "--api-key", "acme-key", "--json")
        assert done.returncode == 0, done.stderr
        _assert_hand_computed(_by_version(done.stdout)[("faithfulness", JUDGE)])
        globex = _calibrate("--data-dir", str(data), "--api-key", "globex-key", "--json")
        (only,) = json.loads(globex.stdout)["versions"]
        assert only["n"] == 1 and only["confusion"] == {"tp": 0, "fn": 0, "fp": 1, "tn": 0}
        refused = _calibrate("--data-dir", str(data), "--api-key", "wrong")
        assert refused.returncode == 2 and "401" in refused.stderr
    finally:
        agent.stop()
