"""`ragmon.testing.FlakyReplies`, the judge suite's fault injector: reproducible by seed, close to its ratio,
every fault kind served as promised, and bad arguments refused loudly."""

from __future__ import annotations

import httpx
import pytest

from ragmon.testing import Completion, FlakyReplies, ScriptedOpenAIServer

pytestmark = pytest.mark.faults


def _kinds(flaky: FlakyReplies, n: int) -> list[str]:
    for i in range(n):
        flaky({"i": i})
    return [record.kind for record in flaky.records]


def test_the_same_seed_gives_the_same_faults_and_the_ratio_holds() -> None:
    first = _kinds(FlakyReplies(Completion("ok"), seed=3), 1000)
    assert first == _kinds(FlakyReplies(Completion("ok"), seed=3), 1000)
    assert first != _kinds(FlakyReplies(Completion("ok"), seed=4), 1000)
    assert 0.65 < sum(kind != "ok" for kind in first) / 1000 < 0.75


def test_each_fault_kind_reaches_the_client_as_described() -> None:
    seen: dict[str, tuple[int, str]] = {}
    flaky = FlakyReplies(Completion("ok"), failure_ratio=0.9, seed=1, timeout_delay_s=0.5)
    with ScriptedOpenAIServer(default=flaky) as server, httpx.Client(timeout=0.25) as client:
        for i in range(60):
            try:
                response = client.post(f"{server.base_url}/chat/completions", json={"i": i})
                outcome = (response.status_code, response.headers.get("retry-after", "") + response.text[:20])
            except httpx.TimeoutException:
                outcome = (0, "timeout")
            except httpx.TransportError:
                outcome = (-1, "cut short")
            seen.setdefault(flaky.records[i].kind, outcome)
    assert seen.keys() == {"ok", "429", "500", "503_html", "timeout", "garbage", "truncated"}
    assert seen["429"][0] == 429 and seen["429"][1][:1].isdigit()  # Retry-After present
    assert seen["500"][0] == 500 and seen["503_html"] == (503, "<html><body>503 Serv")
    assert seen["timeout"] == (0, "timeout") and seen["truncated"][0] == -1
    assert seen["garbage"][0] == 200 and seen["ok"][0] == 200


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault kinds"):
        FlakyReplies(Completion(), kinds=("boom",))
    with pytest.raises(ValueError, match="failure_ratio"):
        FlakyReplies(Completion(), failure_ratio=1.5)
