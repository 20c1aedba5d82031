"""Fixtures for the judge tests: a scripted OpenAI-compatible server on loopback and an LLM judge pointed at it
with short timeouts and backoffs, so failure paths run in milliseconds without sleeping beyond the script."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ragmon.judges.llm_judge import LLMJudge, LLMJudgeConfig

from ragmon.testing import Completion, ScriptedOpenAIServer

DEV_DATA = Path(__file__).parents[2].parent / "shared/data/faithfulness/dev.jsonl"


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as s:
        yield s


JudgeFactory = Callable[..., LLMJudge]


@pytest.fixture
async def make_judge(server: ScriptedOpenAIServer) -> AsyncIterator[JudgeFactory]:
    judges: list[LLMJudge] = []

    def factory(**overrides: Any) -> LLMJudge:
        options: dict[str, Any] = {
            "base_url": server.base_url,
            "model": "gpt-4o-mini",
            "timeout_s": 2.0,
            "max_attempts": 3,
            "initial_backoff_s": 0.01,
            "max_backoff_s": 0.05,
            "retry_deadline_s": 5.0,
            "max_tokens": 256,
        }
        options.update(overrides)
        judge = LLMJudge(LLMJudgeConfig(**options))
        judges.append(judge)
        return judge

    yield factory
    for judge in judges:
        await judge.aclose()


def reply(obj: Any, **kwargs: Any) -> Completion:
    """A completion whose content is `obj` as JSON."""
    return Completion(json.dumps(obj), **kwargs)
