"""`ragmon check`: a settings file validated as `serve` validates it at start-up, and what it means, printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragmon.agent.agent import Agent
from ragmon.cli import main
from ragmon.settings import load_settings

SECRET = "hunter2-webhook-token"

# Each is refused by the agent at start-up; a `check` that let one through would send a broken config to production.
REFUSED = {
    "unknown sampling policy": '[agent.sampling]\npolicies = [{type = "slwo"}]\n',
    "stage rule without a floor": '[agent.sampling]\npolicies = [{type = "slow", stage_relative_to_p95 = 2.0, '
    "min_excess_ms = 0}]\n",
    "unknown drift signal": '[[agent.alerts.rules]]\nname = "x"\nsignal = "nope"\n',
    "rule to a channel never defined": '[[agent.alerts.rules]]\nname = "x"\nsignal = "error_rate"\n'
    'channels = ["pager"]\n',
    "memory limit that is not a size": '[agent]\nmemory_limit = "lots"\n',
    "unknown redaction builtin": '[agent.redaction]\nbuiltins = ["emails", "shoe_sizes"]\n',
    "unknown judge": '[judge]\nbackend = "oracle"\n',
}


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ragmon.toml"
    path.write_text(text)
    return path


def test_defaults_are_valid_and_the_summary_says_what_serve_would_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    config = _write(tmp_path, '[agent]\nmemory_limit = "1GiB"\ndata_dir = "store"\n')
    assert main(["check", "--config", str(config), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [policy["type"] for policy in summary["sampling"]["policies"]] == [
        "error",
        "slow",
        "retrieval_health",
        "baseline",
    ]
    assert summary["memory"]["limit_bytes"] == 1024**3
    assert summary["judge"] == {"backend": "local", "in_agent": True}
    assert not (tmp_path / "store").exists()  # nothing was started or created

    assert main(["check", "--config", str(_write(tmp_path, '[agent]\nmemory_limit = "2GiB"\n')), "--json"]) == 0
    bigger = json.loads(capsys.readouterr().out)
    assert bigger["memory"]["insert_batch_bytes"] > summary["memory"]["insert_batch_bytes"]


def test_a_configured_policy_list_is_shown_as_configured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _write(
        tmp_path,
        '[agent.sampling]\npolicies = [{type = "error"}, {type = "slow", trace_threshold_ms = 2000}, '
        '{type = "baseline", rate = 0.1}]\n',
    )
    assert main(["check", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"ragmon check: valid: {config}")
    assert "sampling   error; slow trace_threshold_ms=2000.0; baseline rate=0.1\n" in out


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_check_refuses_what_serve_refuses(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _write(tmp_path, REFUSED[case])
    assert main(["check", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ragmon check: not valid: {config}: ")
    if case != "unknown judge":  # the judge is built when judging starts; check looks it up beforehand
        with pytest.raises(ValueError):
            Agent(load_settings(config_file=config, env={}))


def test_neither_check_nor_serve_echoes_the_secrets_of_a_table_they_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _write(
        tmp_path,
        f'[agent.alerts.channels.oncall]\ntype = "webhok"\nurl = "https://hooks.example/{SECRET}"\n'
        f'headers = {{Authorization = "Bearer {SECRET}"}}\n',
    )
    store = tmp_path / "store"
    for argv in (["check", "--config", str(config)], ["serve", "--config", str(config), "--data-dir", str(store)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "unknown type 'webhok'" in err
        assert SECRET not in err
    assert not store.exists()
