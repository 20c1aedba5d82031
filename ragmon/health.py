"""The agent's health: each long-running component reports how it is doing; two pure probes read the reports.

Components (the store writer, the sampler, the roll-ups, the judge worker, alerting) hold a `Component` handle
from one `HealthRegistry` and report:

- `ok()` — a heartbeat: the loop made progress, or ticked while idle;
- `failing(error)` — a try failed and will be retried (the error text, and since when the streak of failures
  began); each failed try is a heartbeat too — the loop is alive, it is the world that is broken;
- `stopped(error)` — the loop ended. `expected=True` when it was asked to (the agent is shutting down).

A component with no heartbeat for longer than its `stall_after_s` is *stalled* (stuck in a call that never
returns, deadlocked): nothing it says can be believed until it beats again.

The probes follow Kubernetes' semantics, where the two answers lead to different actions:

- **liveness** (`live()`, served on /health/live): *should this process be restarted?* A failed liveness probe
  makes the kubelet kill and restart the container, which helps only when the process itself is broken. So it
  fails only for a component that stopped while it should run, or one stalled far beyond its limit
  (`restart_after_s`, by default `RESTART_FACTOR` × `stall_after_s`). A component that is *failing* — the store is
  down, the disk is full — keeps the process live: a restart would not bring the store back, and restarting every
  agent during a store outage would only lose their in-memory state and pile start-ups onto the recovering store.
- **readiness** (`ready()`, served on /health/ready): *should this process receive traffic now?* A failed readiness
  probe takes the pod out of the Service's endpoints until it passes again; nothing is restarted. It passes when
  every component is ok or has been failing for at most its `ready_grace_s` (a blip that backoff rides out should
  not flap the endpoints); it fails for a component failing longer, stalled, or stopped (also when stopping was
  expected: a pod shutting down should leave rotation).

Each probe returns a `Probe`: `ok` (serve 200 when true, 503 when false) and a JSON-able `body`,
``{"status": "ok" | "fail", "components": {name: {"state", "since_s", "error"}}}`` — `state` one of ok, failing,
stalled, stopped; `since_s` how long it has been in that state (for stalled: since its last heartbeat); `error` the
last error text ('' when none). Time comes from the registry's `clock` (monotonic seconds), so tests drive it by
hand. Nothing here serves HTTP.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# A component stalled for this many times its limit is presumed stuck for good: liveness fails and it is restarted.
RESTART_FACTOR = 5.0
# How long a component may be failing and the process still take traffic (backoff rides out a blip).
DEFAULT_READY_GRACE_S = 30.0


class State(StrEnum):
    OK = "ok"
    FAILING = "failing"  # a try failed; retrying with backoff
    STALLED = "stalled"  # no heartbeat for longer than stall_after_s (derived, never reported)
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class ComponentHealth:
    """One component as the probes see it at one instant."""

    name: str
    state: State
    since_s: float  # in this state for this long (stalled: since the last heartbeat)
    error: str
    live: bool  # this component does not ask for a restart
    ready: bool  # this component does not keep the process out of rotation

    def to_json(self) -> dict[str, Any]:
        return {"state": str(self.state), "since_s": round(self.since_s, 3), "error": self.error}


@dataclass(frozen=True, slots=True)
class Probe:
    """A probe's answer: `ok` (HTTP 200 when true, 503 when false) and a JSON-able body."""

    ok: bool
    body: dict[str, Any]


class Component:
    """The handle one component reports through. Thread-safe; reporting is a few attribute writes under a lock."""

    def __init__(
        self,
        registry: HealthRegistry,
        name: str,
        *,
        stall_after_s: float,
        restart_after_s: float,
        ready_grace_s: float,
    ) -> None:
        self.name = name
        self.stall_after_s = stall_after_s
        self.restart_after_s = restart_after_s
        self.ready_grace_s = ready_grace_s
        self._registry = registry
        now = registry.clock()
        self._state = State.OK
        self._since_s = now  # when the current state began
        self._beat_s = now  # registering counts as a heartbeat: a loop that never starts stalls from here
        self._error = ""
        self._stop_expected = False

    def ok(self) -> None:
        """A heartbeat: progress, or an idle tick. Ends a failing streak."""
        with self._registry.lock:
            now = self._registry.clock()
            if self._state is not State.OK:
                self._state, self._since_s, self._error = State.OK, now, ""
            self._beat_s = now

    def failing(self, error: BaseException | str) -> None:
        """A try failed and will be retried; also a heartbeat. `since_s` counts from the first failure."""
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        with self._registry.lock:
            now = self._registry.clock()
            if self._state is not State.FAILING:
                self._state, self._since_s = State.FAILING, now
            self._error = text[:500]
            self._beat_s = now

    def stopped(self, error: BaseException | str = "", *, expected: bool = False) -> None:
        """The loop ended: `expected` when it was asked to stop, else it died (`error`: why)."""
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        with self._registry.lock:
            now = self._registry.clock()
            self._state, self._since_s, self._beat_s = State.STOPPED, now, now
            self._error = text[:500]
            self._stop_expected = expected

    def snapshot(self) -> ComponentHealth:
        with self._registry.lock:
            now = self._registry.clock()
            state, since_s, beat_s, error = self._state, self._since_s, self._beat_s, self._error
            stop_expected = self._stop_expected
        if state is State.STOPPED:
            return ComponentHealth(self.name, state, now - since_s, error, live=stop_expected, ready=False)
        silent_s = now - beat_s
        if silent_s > self.stall_after_s:
            error = error or f"no heartbeat for {silent_s:.0f} s (limit {self.stall_after_s:g} s)"
            live = silent_s <= self.restart_after_s
            return ComponentHealth(self.name, State.STALLED, silent_s, error, live=live, ready=False)
        if state is State.FAILING:
            ready = now - since_s <= self.ready_grace_s
            return ComponentHealth(self.name, state, now - since_s, error, live=True, ready=ready)
        return ComponentHealth(self.name, state, now - since_s, error, live=True, ready=True)


class HealthRegistry:
    """The components of one agent process. `clock`: monotonic seconds (injectable, for tests)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self._components: dict[str, Component] = {}

    def component(
        self,
        name: str,
        *,
        stall_after_s: float,
        restart_after_s: float | None = None,
        ready_grace_s: float = DEFAULT_READY_GRACE_S,
    ) -> Component:
        """The handle for `name` (registered now). Each component states its own `stall_after_s`: longer than
        its slowest normal step and its longest backoff, since each of those is a silence between heartbeats.
        Registering a name again replaces it (a component restarted within the same process)."""
        if stall_after_s <= 0:
            raise ValueError("stall_after_s must be > 0")
        restart_s = RESTART_FACTOR * stall_after_s if restart_after_s is None else restart_after_s
        if restart_s < stall_after_s:
            raise ValueError("restart_after_s must be >= stall_after_s")
        handle = Component(
            self, name, stall_after_s=stall_after_s, restart_after_s=restart_s, ready_grace_s=ready_grace_s
        )
        with self.lock:
            self._components[name] = handle
        return handle

    def snapshot(self) -> dict[str, ComponentHealth]:
        with self.lock:
            components = list(self._components.values())
        return {c.name: c.snapshot() for c in components}

    def live(self) -> Probe:
        """Liveness: false only when a component that should run stopped, or stalled past `restart_after_s`."""
        seen = self.snapshot()
        return _probe(all(c.live for c in seen.values()), seen)

    def ready(self) -> Probe:
        """Readiness: every component ok, or failing for at most its `ready_grace_s`."""
        seen = self.snapshot()
        return _probe(all(c.ready for c in seen.values()), seen)


def _probe(ok: bool, seen: dict[str, ComponentHealth]) -> Probe:
    components = {name: health.to_json() for name, health in sorted(seen.items())}
    return Probe(ok, {"status": "ok" if ok else "fail", "components": components})
