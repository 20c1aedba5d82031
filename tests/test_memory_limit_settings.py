"""agent.memory_limit: sizes as people and Kubernetes write them, the container's cgroup limit as the default, and
the agent's buffers shrinking with the limit while explicit sizes are kept."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from pydantic import ValidationError

from ragmon.agent.memory_budget import limit_warning, memory_budget
from ragmon.memory import DEFAULT_MEMORY_LIMIT, cgroup_memory_limit, default_memory_limit, parse_size
from ragmon.settings import AgentSettings, load_settings

MiB, GiB = 1024**2, 1024**3


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1GiB", GiB),
        ("768MiB", 768 * MiB),
        ("768MB", 768_000_000),
        ("1.5GiB", 3 * GiB // 2),
        ("1Gi", GiB),  # as a pod spec writes it
        ("512mi", 512 * MiB),
        (" 2 G ", 2_000_000_000),
        ("805306368", 805_306_368),  # what the downward API puts in the variable
        ("1024k", 1_024_000),
        (1_000_000, 1_000_000),
    ],
)
def test_sizes_parse(text: str | int, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "1 GiBs", "-1GiB", "1.5.2G", "GiB"])
def test_non_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def _cgroup(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return root


def test_cgroup_v2_limit_is_read(tmp_path: Path) -> None:
    root = _cgroup(tmp_path, "memory.max", str(768 * MiB))
    assert cgroup_memory_limit(root) == 768 * MiB
    assert default_memory_limit(root) == 768 * MiB


def test_cgroup_v2_without_a_limit_falls_back_to_the_default(tmp_path: Path) -> None:
    root = _cgroup(tmp_path, "memory.max", "max")
    assert cgroup_memory_limit(root) is None
    assert default_memory_limit(root) == DEFAULT_MEMORY_LIMIT == 2 * GiB


def test_cgroup_v1_limit_and_its_unlimited_value(tmp_path: Path) -> None:
    limited = _cgroup(tmp_path / "a", "memory/memory.limit_in_bytes", str(GiB))
    assert cgroup_memory_limit(limited) == GiB
    unlimited = _cgroup(tmp_path / "b", "memory/memory.limit_in_bytes", "9223372036854771712")
    assert cgroup_memory_limit(unlimited) is None
    assert default_memory_limit(unlimited) == DEFAULT_MEMORY_LIMIT


def test_no_cgroup_files_at_all(tmp_path: Path) -> None:
    assert cgroup_memory_limit(tmp_path) is None
    assert default_memory_limit(tmp_path) == DEFAULT_MEMORY_LIMIT


def test_memory_limit_from_the_environment_and_none() -> None:
    assert load_settings(env={"RAGMON_AGENT__MEMORY_LIMIT": "1.5GiB"}).agent.memory_limit == 3 * GiB // 2
    assert load_settings(env={"RAGMON_AGENT__MEMORY_LIMIT": str(GiB)}).agent.memory_limit == GiB
    assert load_settings(env={"RAGMON_AGENT__MEMORY_LIMIT": "none"}).agent.memory_limit is None
    with pytest.raises(ValidationError, match="memory_limit"):
        load_settings(env={"RAGMON_AGENT__MEMORY_LIMIT": "100MiB"})  # below what the engine alone needs
    with pytest.raises(ValidationError, match="not a size"):
        load_settings(env={"RAGMON_AGENT__MEMORY_LIMIT": "a lot"})


def test_the_default_limit_is_this_machines_cgroup_limit_or_2_gib() -> None:
    assert AgentSettings().memory_limit == default_memory_limit()


def test_derived_sizes_shrink_with_the_limit() -> None:
    limits = [768 * MiB, GiB, 3 * GiB // 2, 2 * GiB, 8 * GiB]
    budgets = [memory_budget(AgentSettings(memory_limit=limit)) for limit in limits]
    for smaller, larger in itertools.pairwise(budgets):
        assert smaller.insert_batch_bytes <= larger.insert_batch_bytes
        assert smaller.backlog_bytes <= larger.backlog_bytes
        assert smaller.inflight_bytes <= larger.inflight_bytes
        assert smaller.grpc_concurrent_rpcs <= larger.grpc_concurrent_rpcs
    small, large = budgets[0], budgets[-1]
    assert small.insert_batch_bytes < large.insert_batch_bytes and small.backlog_bytes < large.backlog_bytes
    for budget, limit in zip(budgets, limits, strict=True):
        assert budget.high_water_bytes is not None and budget.low_water_bytes is not None
        assert budget.low_water_bytes < budget.high_water_bytes < limit
        # what the agent holds on purpose fits under the limit, with room for the engine's library and Python
        held = budget.insert_batch_bytes + budget.backlog_bytes + budget.inflight_bytes
        assert held < limit - 512 * MiB
        # the engine is capped below the limit by what its tracker does not count (library pages, Python)
        assert budget.engine_bytes is not None and budget.engine_bytes <= limit - 512 * MiB


def test_explicit_sizes_win_and_no_limit_keeps_the_fixed_sizes() -> None:
    explicit = memory_budget(AgentSettings(memory_limit=768 * MiB, insert_batch_max_bytes=48 * MiB))
    assert explicit.insert_batch_bytes == 48 * MiB
    assert explicit.backlog_bytes < AgentSettings.model_fields["backlog_max_bytes"].default  # still derived
    unlimited = memory_budget(AgentSettings(memory_limit=None))
    assert unlimited.limit_bytes is None and unlimited.engine_bytes is None and unlimited.high_water_bytes is None
    assert unlimited.insert_batch_bytes == 32 * MiB and unlimited.backlog_bytes == 64 * MiB
    # a server store has no engine in the process to cap, and more of the limit for the rest
    server = memory_budget(AgentSettings(memory_limit=GiB, clickhouse_url="http://ch:8123"))
    assert server.engine_bytes is None
    assert server.backlog_bytes >= memory_budget(AgentSettings(memory_limit=GiB)).backlog_bytes


def test_a_limit_below_what_the_embedded_store_keeps_is_said_at_start() -> None:
    warning = limit_warning(AgentSettings(memory_limit=768 * MiB))
    assert warning is not None and "below what the embedded store is measured to keep" in warning
    assert limit_warning(AgentSettings(memory_limit=GiB)) is None
    assert limit_warning(AgentSettings(memory_limit=768 * MiB, clickhouse_url="http://ch:8123")) is None
    assert limit_warning(AgentSettings(memory_limit=None)) is None
