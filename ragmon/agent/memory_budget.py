"""How the agent shares `agent.memory_limit` out: insert batch, in-memory backlog, receivers' in-flight bytes, the
embedded engine's own cap, and the resident-memory marks where the receivers start and stop pushing back.

What the agent's memory is made of (benchmarks/ingest.py, embedded store, RSS; the figures in docs/results.md): a fixed
part before the first span — most of it the engine's shared library, resident as file-backed pages from import on (more
once ingesting has touched more of it), the rest Python and the engine's idle state — then, under load, the engine's
memory for the inserts in progress (tens of times the request bytes of a batch), the request bodies waiting for the
store, and the bodies being received and decoded. So a fixed part is set aside and the rest (the working share) is split
in proportions that keep today's defaults at 2 GiB and shrink with a smaller limit. A size the user set explicitly is
kept as it is.

The shares are sized so that the resident-memory guard (collectors/memory_guard.py) rarely has to act: it is the
backstop for what the proportions do not foresee (many connections at once, the engine's caches, the allocators
keeping freed pages), not the way memory is normally bounded.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragmon.memory import format_size
from ragmon.settings import AgentSettings

MiB = 1024**2

# Set aside before any work, a little above what was measured (docs/results.md): the embedded engine's library and
# idle state plus Python, once the library's pages for ingesting are in; with a ClickHouse server store, Python alone.
RESERVED_EMBEDDED = 576 * MiB
RESERVED_SERVER = 160 * MiB
ENGINE_CAP = True  # see `engine_bytes` below
ENGINE_OUTSIDE = 512 * MiB  # of RESERVED_EMBEDDED, what the engine's tracker does not count: library pages, Python
MIN_WORKING = 96 * MiB  # below this nothing useful fits; a limit that small is refused by the settings anyway

# The receivers push back above HIGH_WATER of the limit and take requests again below LOW_WATER: a gap, so one
# request admitted at the mark does not flip the answer back and forth at every sample.
HIGH_WATER = 0.88
LOW_WATER = 0.82


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    limit_bytes: int | None  # None: no limit (fixed sizes, no engine cap, no pushback)
    insert_batch_bytes: int
    backlog_bytes: int
    inflight_bytes: int  # bodies being received or decoded, across connections (HTTP receiver)
    grpc_concurrent_rpcs: int  # grpcio holds each waiting RPC's whole message: its bound is a count
    engine_bytes: int | None  # the embedded engine's max_server_memory_usage
    high_water_bytes: int | None
    low_water_bytes: int | None


# Without a limit: the fixed sizes ragmon used before memory_limit existed.
_UNLIMITED_INFLIGHT = 256 * MiB


def memory_budget(agent: AgentSettings) -> MemoryBudget:
    """The agent's sizes for its memory limit; explicitly set `insert_batch_max_bytes` / `backlog_max_bytes` win."""
    explicit = agent.model_fields_set
    limit = agent.memory_limit
    if limit is None:
        return MemoryBudget(
            None, agent.insert_batch_max_bytes, agent.backlog_max_bytes, _UNLIMITED_INFLIGHT, 64, None, None, None
        )
    embedded = not agent.clickhouse_url
    working = max(MIN_WORKING, limit - (RESERVED_EMBEDDED if embedded else RESERVED_SERVER))
    # Peak resident memory grows by tens of times the batch's request bytes (the engine's insert, the sampler's and
    # rollup's queries on the fresh range, Python's copies; benchmarks/ingest.py, docs/results.md): 1/64 of the
    # working share keeps that well inside the share. 32 MiB, the old default, is where a larger batch stops buying
    # throughput.
    batch = _clamp(working // 64, 1 * MiB, 32 * MiB)
    backlog = _clamp(working // 16, 1 * MiB, 64 * MiB)
    inflight = _clamp(working // 8, 4 * MiB, _UNLIMITED_INFLIGHT)
    return MemoryBudget(
        limit_bytes=limit,
        insert_batch_bytes=agent.insert_batch_max_bytes if "insert_batch_max_bytes" in explicit else batch,
        backlog_bytes=agent.backlog_max_bytes if "backlog_max_bytes" in explicit else backlog,
        inflight_bytes=inflight,
        # OTLP exporters send ~0.1-4 MiB a message: the in-flight share in 4 MiB messages (64: grpcio's old default)
        grpc_concurrent_rpcs=_clamp(inflight // (4 * MiB), 4, 64),
        # The engine's max_server_memory_usage (its tracker counts its own allocations only, not its library's
        # pages nor Python's): a statement past it fails as MEMORY_LIMIT_EXCEEDED and is retried (the writer's
        # batch with its deduplication token) instead of the process growing. It was off while chDB's streaming
        # insert lost batches whose views failed under it without an error; inserts now run as statements that
        # report their views' errors (sinks/chdb_backend.py, tests/sinks/test_chdb_insert_errors.py).
        engine_bytes=max(MIN_WORKING, limit - ENGINE_OUTSIDE) if embedded and ENGINE_CAP else None,
        high_water_bytes=int(limit * HIGH_WATER),
        low_water_bytes=int(limit * LOW_WATER),
    )


# The smallest limit the embedded agent was measured to keep under saturation (benchmarks/ingest.py
# --memory-limits, engine capped; the peak per limit is in deploy/CAPACITY.md): below it, not even half the batch
# size and a tighter engine cap kept it under, since the engine's library and Python alone take most of a smaller
# limit and the engine's tracker does not see all it holds.
EMBEDDED_KEPT_FROM = 1024 * MiB


def limit_warning(agent: AgentSettings) -> str | None:
    """A limit below what the embedded store is measured to keep: said at start-up, not found by the OOM killer."""
    limit = agent.memory_limit
    if limit is None or agent.clickhouse_url or limit >= EMBEDDED_KEPT_FROM:
        return None
    return (
        f"memory_limit {format_size(limit)} is below what the embedded store is measured to keep under saturation "
        f"({format_size(EMBEDDED_KEPT_FROM)}: ~550 MB is the engine's library and Python before any work; at 768 MiB "
        "the agent peaked at 793-871 MiB): give it 1 GiB, or use a ClickHouse server store (--clickhouse-url)"
    )


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def describe(budget: MemoryBudget) -> str:
    """One line for the log: the limit and what it was shared into."""
    sizes = (
        f"insert batches of {format_size(budget.insert_batch_bytes)}, {format_size(budget.backlog_bytes)} of "
        f"requests waiting in memory, {format_size(budget.inflight_bytes)} being received"
    )
    if budget.limit_bytes is None or budget.high_water_bytes is None:
        return f"no limit; {sizes}"
    engine = f", the engine capped at {format_size(budget.engine_bytes)}" if budget.engine_bytes else ""
    return (
        f"limit {format_size(budget.limit_bytes)}; {sizes}{engine}; receivers push back above "
        f"{format_size(budget.high_water_bytes)} resident"
    )
