"""The health registry on a clock driven by hand: ok, failing (ready only within its grace), stalled (not ready;
not live only far past its limit), stopped (not live unless asked to stop), and the probes' JSON bodies."""

from __future__ import annotations

import json

import pytest

from ragmon.health import HealthRegistry


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


def _registry() -> tuple[HealthRegistry, Clock]:
    clock = Clock()
    return HealthRegistry(clock=clock), clock


def test_components_that_beat_are_live_and_ready() -> None:
    health, clock = _registry()
    writer = health.component("writer", stall_after_s=10)
    judge = health.component("judge", stall_after_s=5)
    for _ in range(10):
        clock.advance(4)
        writer.ok()
        judge.ok()
    assert health.live().ok and health.ready().ok
    body = health.ready().body
    assert body["status"] == "ok"
    assert body["components"]["judge"] == {"state": "ok", "since_s": 40.0, "error": ""}
    json.dumps(body)  # served as is


def test_failing_is_ready_within_its_grace_then_not_but_always_live() -> None:
    health, clock = _registry()
    judge = health.component("judge", stall_after_s=60, ready_grace_s=30)
    judge.failing(OSError(28, "No space left on device"))
    clock.advance(20)
    judge.failing("database or disk is full")  # a retry: the streak goes on, since_s counts from its start
    ready = health.ready()
    assert ready.ok
    assert ready.body["components"]["judge"] == {
        "state": "failing",
        "since_s": 20.0,
        "error": "database or disk is full",
    }
    clock.advance(20)
    judge.failing("database or disk is full")
    assert not health.ready().ok  # failing for 40 s: out of rotation
    assert health.live().ok  # but a restart would not empty the disk
    assert health.ready().body["status"] == "fail"
    judge.ok()  # the fault passed
    assert health.ready().ok
    assert health.ready().body["components"]["judge"] == {"state": "ok", "since_s": 0.0, "error": ""}


def test_a_silent_component_stalls_then_asks_for_a_restart_far_past_its_limit() -> None:
    health, clock = _registry()
    sampler = health.component("sampling", stall_after_s=10, restart_after_s=100)
    other = health.component("writer", stall_after_s=1000)
    sampler.ok()
    clock.advance(10)
    assert health.ready().ok  # at the limit, not past it
    clock.advance(1)
    ready = health.ready()
    assert not ready.ok
    assert ready.body["components"]["sampling"]["state"] == "stalled"
    assert ready.body["components"]["sampling"]["since_s"] == 11.0
    assert "no heartbeat for 11 s" in ready.body["components"]["sampling"]["error"]
    assert ready.body["components"]["writer"]["state"] == "ok"
    assert health.live().ok  # stalled, but maybe only slow: no restart yet
    clock.advance(90)
    live = health.live()
    assert not live.ok and live.body["components"]["sampling"]["state"] == "stalled"
    other.ok()
    sampler.ok()  # it came back by itself
    assert health.live().ok and health.ready().ok


def test_a_failing_component_that_goes_silent_is_stalled_and_keeps_its_error() -> None:
    health, clock = _registry()
    writer = health.component("writer", stall_after_s=30)
    writer.failing("store unavailable")
    clock.advance(31)
    seen = health.ready().body["components"]["writer"]
    assert seen == {"state": "stalled", "since_s": 31.0, "error": "store unavailable"}


def test_the_default_restart_limit_is_far_beyond_the_stall_limit() -> None:
    health, clock = _registry()
    health.component("alerting", stall_after_s=10)
    clock.advance(49)
    assert health.live().ok and not health.ready().ok
    clock.advance(2)
    assert not health.live().ok


def test_a_stopped_component_is_not_live_unless_it_was_asked_to_stop() -> None:
    health, _ = _registry()
    judge = health.component("judge", stall_after_s=60)
    judge.stopped(RuntimeError("boom"))
    live = health.live()
    assert not live.ok
    assert live.body["components"]["judge"] == {"state": "stopped", "since_s": 0.0, "error": "RuntimeError: boom"}
    assert not health.ready().ok

    health, clock = _registry()
    writer = health.component("writer", stall_after_s=60)
    writer.stopped(expected=True)  # shutting down: leave rotation, but nothing to restart
    assert health.live().ok and not health.ready().ok
    clock.advance(10_000)
    assert health.live().ok  # a stopped component is not stalled


def test_a_component_registered_but_never_reporting_stalls_from_its_registration() -> None:
    health, clock = _registry()
    health.component("rollups", stall_after_s=5)
    assert health.ready().ok
    clock.advance(6)
    assert health.ready().body["components"]["rollups"]["state"] == "stalled"


def test_limits_are_checked() -> None:
    health, _ = _registry()
    with pytest.raises(ValueError):
        health.component("x", stall_after_s=0)
    with pytest.raises(ValueError):
        health.component("x", stall_after_s=10, restart_after_s=5)
