"""Judge backends by name: the built-ins ("local", "llm") and any plugin registered under the entry-point group
``ragmon.judges`` (a callable taking the JudgeSettings and returning a Judge). An unknown name fails loudly,
naming the group and what is available. (The metrics a judge scores have their own registry:
`ragmon.judges.metrics.REGISTRY`.)"""

from __future__ import annotations

import asyncio
from importlib.metadata import entry_points
from typing import Any

from ragmon.judges.protocol import Judge

from ragmon.settings import JudgeSettings

ENTRY_POINT_GROUP = "ragmon.judges"


def _local(settings: JudgeSettings, **options: Any) -> Judge:
    from ragmon.judges.local_judge import LocalJudge

    threshold = settings.faithfulness_threshold
    if threshold is not None:
        options = {"faithfulness_threshold": threshold, **options}
    return LocalJudge(**options)


def _llm(settings: JudgeSettings, **options: Any) -> Judge:
    from ragmon.judges.llm_judge import LLMJudge, LLMJudgeConfig

    if not settings.base_url:
        raise ValueError("the llm judge needs judge.base_url (RAGMON_JUDGE__BASE_URL)")
    config = LLMJudgeConfig(
        base_url=settings.base_url,
        api_key=settings.api_key,
        model=settings.model,
        requests_per_minute=settings.requests_per_minute,
        budget_usd=settings.budget_usd,
        **options,
    )
    return LLMJudge(config)


BUILTIN = {"local": _local, "llm": _llm}


def available() -> list[str]:
    return sorted({*BUILTIN, *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))})


def judge_version(name: str, settings: JudgeSettings | None = None) -> str:
    """The version `make_judge(name, settings)` judges as, without building a built-in judge (the local one would
    load its model, the LLM one open a client): the agent enqueues kept traces for it when workers judge them."""
    settings = settings or JudgeSettings()
    if name == "local":
        from ragmon.judges.local_judge import expected_version

        return expected_version(threshold=settings.faithfulness_threshold)
    if name == "llm":
        from ragmon.judges.llm_judge import llm_version

        return llm_version(settings.model)
    judge = make_judge(name, settings)  # a plugin: only it knows its version
    try:
        return judge.version
    finally:
        asyncio.run(judge.aclose())


def make_judge(name: str, settings: JudgeSettings | None = None, **options: Any) -> Judge:
    settings = settings or JudgeSettings()
    factory = BUILTIN.get(name)
    if factory is not None:
        return factory(settings, **options)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            judge: Judge = ep.load()(settings, **options)
            return judge
    raise ValueError(
        f"unknown judge {name!r}: not built in and not in entry-point group {ENTRY_POINT_GROUP!r}; "
        f"available: {', '.join(available())}"
    )
