"""`ragmon check`: read a settings file as `ragmon serve` would at start-up and say what it means, starting nothing.

The SDK's settings tree keeps `[agent.sampling]` and `[agent.alerts]` as plain tables: their models
(`ragmon.sampling.config.SamplerConfig`, `ragmon.drift.rules.AlertsConfig`) are built from the policy
and detector registries, which an app importing the SDK must not load. They are validated by the agent — at
start-up, and here beforehand (in CI, or before a rollout), through the same `Agent` constructor, so `check` can
never accept what `serve` would refuse. It opens no port, store or data directory. Exit 0 valid, 2 not.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragmon.agent import Agent
from ragmon.judges.registry import available as available_judges
from ragmon.memory import format_size
from ragmon.pricing import PriceFileError, load_price_table
from ragmon.settings import Settings, load_settings


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="settings file (TOML or JSON); RAGMON_* variables apply too")
    parser.add_argument("--json", action="store_true", help="the summary as one JSON object")


def check(args: argparse.Namespace) -> int:
    source = str(args.config) if args.config else "the default settings with RAGMON_* variables"
    try:
        settings = load_settings(config_file=args.config)
        agent = Agent(settings)  # validates sampling, alerts, redaction names, keys and the memory budget
        load_price_table(settings.sdk.price_file)
        if settings.judge.backend not in available_judges():
            raise ValueError(f"judge.backend {settings.judge.backend!r} is unknown; available: {available_judges()}")
    except (ValidationError, ValueError, OSError, PriceFileError) as exc:
        print(f"ragmon check: not valid: {source}: {config_error(exc)}", file=sys.stderr)
        return 2
    summary = describe(settings, agent)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"ragmon check: valid: {source}")
        for name, text in _lines(summary):
            print(f"  {name:<10} {text}")
    return 0


def config_error(exc: Exception) -> str:
    """A settings error without the input it was given: alert channels and keys carry secrets, and pydantic's
    message would echo the whole offending table."""
    if not isinstance(exc, ValidationError):
        return str(exc)
    problems = [
        f"{'.'.join(str(part) for part in error['loc']) or exc.title}: {error['msg']}"
        for error in exc.errors(include_url=False, include_input=False)
    ]
    return f"{exc.title}: " + "; ".join(problems)


def describe(settings: Settings, agent: Agent) -> dict[str, Any]:
    """What the agent would run with: the validated sections, keys counted, never shown."""
    section = settings.agent
    sampler = agent.sampler_config
    alerts = agent.alerts_config
    memory = agent.memory
    return {
        "store": section.clickhouse_url or f"embedded ClickHouse (chDB) in {section.data_dir}",
        "receivers": {"otlp_http": section.otlp_http, "otlp_grpc": section.otlp_grpc or None, "api": section.api},
        "sampling": {
            "policies": [
                {"type": policy.type, **policy.model_dump(exclude_defaults=True, exclude={"type"})}
                for policy in sampler.policies
            ],
            "budget": sampler.budget.model_dump(exclude_defaults=True),
        },
        "alerts": {
            "enabled": alerts.enabled,
            "rules": [rule.name for rule in alerts.effective_rules()],
            "channels": ["log", *alerts.channels],
        },
        "memory": {
            "limit_bytes": memory.limit_bytes,
            "insert_batch_bytes": memory.insert_batch_bytes,
            "backlog_bytes": memory.backlog_bytes,
            "engine_bytes": memory.engine_bytes,
        },
        "judge": {"backend": settings.judge.backend, "in_agent": settings.judge.run_in_agent},
        "keys": {
            "api_tenants": len(section.api_keys),
            "reviewers": sum(map(len, section.reviewer_keys.values())),
            "feedback_keys": sum(map(len, section.feedback_keys.values())),
        },
    }


def _lines(summary: dict[str, Any]) -> list[tuple[str, str]]:
    receivers = summary["receivers"]
    sampling = summary["sampling"]
    alerts = summary["alerts"]
    memory = summary["memory"]
    judge = summary["judge"]
    keys = summary["keys"]
    policies = "; ".join(
        policy["type"] + "".join(f" {k}={v}" for k, v in policy.items() if k != "type")
        for policy in sampling["policies"]
    )
    limit = memory["limit_bytes"]
    return [
        ("store", summary["store"]),
        (
            "receivers",
            f"OTLP/HTTP {receivers['otlp_http']}, OTLP/gRPC {receivers['otlp_grpc'] or 'off'}, API {receivers['api']}",
        ),
        ("sampling", policies + (f" (budget {sampling['budget']})" if sampling["budget"] else "")),
        (
            "alerts",
            f"{len(alerts['rules'])} rules to channels {', '.join(alerts['channels'])}" if alerts["enabled"] else "off",
        ),
        (
            "memory",
            "no limit"
            if limit is None
            else f"limit {format_size(limit)}: insert batches {format_size(memory['insert_batch_bytes'])}, "
            f"backlog {format_size(memory['backlog_bytes'])}"
            + (f", engine {format_size(memory['engine_bytes'])}" if memory["engine_bytes"] else ""),
        ),
        ("judge", f"{judge['backend']}, " + ("in the agent" if judge["in_agent"] else "by `ragmon judge` workers")),
        ("keys", f"API keys for {keys['api_tenants']} tenants, {keys['reviewers']} reviewer keys"),
    ]
