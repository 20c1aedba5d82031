"""Clock jumps. The wall clock is for timestamps, never for durations: the sampler's decision timers, the store
writer's retry timers and the judge queue's leases must all run on clocks no one can set.

- In process, with `time.time` / `time.time_ns` patched to jump a day forward, two days back, a year forward and
  back, while traces whose spans carry timestamps skewed by up to a year are sent through the agent: every
  acknowledged span is stored once, every trace is decided as complete (not by timeout, not held), and every kept
  trace's judge item ends final.
- The judge queue (unit level, through its clock seams): a wall clock jumping forward does not expire a held lease
  (no second worker gets it early); jumping back does not pin a released item; a new boot voids old leases.

Python code that did ``from time import time`` keeps the real clock: this injects a jump into ragmon's code, which
calls ``time.time()``, not into chDB (whose own clock cannot be moved without root).
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status
from ragmon.judges.queue import ItemState, JudgeQueue, Kept
from ragmon.sinks import Store, open_store

from ragmon.agent.agent import Agent
from ragmon.settings import load_settings
from tests.faults import scenario_rows

pytestmark = pytest.mark.faults

DAY_S = 86_400.0
# Offsets of the agent's wall clock, one per round of traces: forward a day, back two, a year ahead, back to true.
WALL_JUMPS_S = (0.0, DAY_S, -DAY_S, 365 * DAY_S, 0.0)
# Skews of the spans' own timestamps, within the store's retention (spans 30 days, payloads 14 days: older rows
# are retention's to drop, not loss).
SPAN_SKEWS_S = (0.0, -10 * DAY_S, -3600.0, 3600.0, DAY_S, 365 * DAY_S)
TRACES_PER_SKEW = 5


class JumpingWallClock:
    """`time.time` / `time.time_ns` plus an offset the test moves."""

    def __init__(self) -> None:
        self.offset_s = 0.0
        self._time = time.time
        self._time_ns = time.time_ns

    def time(self) -> float:
        return self._time() + self.offset_s

    def time_ns(self) -> int:
        return self._time_ns() + int(self.offset_s * 1e9)


@pytest.fixture
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    opened = open_store(chdb_engine_dir, database=f"faults_clock_{uuid.uuid4().hex[:8]}")
    yield opened
    opened.close()


def _trace(skew_s: float) -> tuple[bytes, set[str], str]:
    """An error trace (kept by the error policy): a root and two children, stamped `skew_s` off the wall clock."""
    trace_id = os.urandom(16)
    start = time.time_ns() + int(skew_s * 1e9)
    root_id = os.urandom(8)
    spans = [
        Span(
            trace_id=trace_id,
            span_id=root_id,
            name="request",
            start_time_unix_nano=start,
            end_time_unix_nano=start + 50_000_000,
            status=Status(code=Status.STATUS_CODE_ERROR, message="boom"),
            attributes=[KeyValue(key="ragmon.feature", value=AnyValue(string_value="clock"))],
        )
    ]
    for i in range(2):
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=os.urandom(8),
                parent_span_id=root_id,
                name=f"child {i}",
                start_time_unix_nano=start + (i + 1) * 1_000_000,
                end_time_unix_nano=start + (i + 2) * 10_000_000,
            )
        )
    resource = ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])
    resource.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value="clock-svc")))
    body = ExportTraceServiceRequest(resource_spans=[resource]).SerializeToString()
    return body, {s.span_id.hex() for s in spans}, trace_id.hex()


def _post(port: int, body: bytes) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _poll(read: Any, done: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.1)
        value = read()
    return value


def test_agent_decides_and_stores_everything_across_wall_clock_jumps(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = JumpingWallClock()
    settings = load_settings(
        {
            "agent": {
                "data_dir": tmp_path,
                "otlp_http": "127.0.0.1:0",
                "otlp_grpc": "",
                "api": "127.0.0.1:0",
                "sampling": {"decision_grace_s": 0.2},
            }
        },
        env={},
    )
    agent = Agent(settings, store=store).start()
    acknowledged: set[str] = set()
    traces: set[str] = set()
    sent = 0
    try:
        monkeypatch.setattr(time, "time", clock.time)
        monkeypatch.setattr(time, "time_ns", clock.time_ns)
        for offset_s in WALL_JUMPS_S:
            clock.offset_s = offset_s  # the jump, between two rounds of traffic
            for skew_s in SPAN_SKEWS_S:
                for _ in range(TRACES_PER_SKEW):
                    body, span_ids, trace_id = _trace(skew_s)
                    sent += 1
                    assert _post(agent.receivers[0].port, body) == 200
                    acknowledged |= span_ids
                    traces.add(trace_id)
        monkeypatch.undo()  # the true clock again, for waiting and reading

        quoted = ",".join(f"'{s}'" for s in sorted(acknowledged))
        stored_sql = f"SELECT count() AS n, uniqExact(span_id) AS u FROM spans WHERE span_id IN ({quoted})"
        stored = _poll(lambda: store.query(stored_sql)[0], lambda row: int(row["u"]) == len(acknowledged))
        decided = _poll(
            lambda: agent.sampler.counts["decided_by:complete"],
            lambda n: n >= len(traces) and agent.pipeline.decisions.waiting == 0,
        )
        judging = agent.pipeline.judging
        assert judging is not None
        pending = _poll(judging.queue.pending, lambda n: n == 0)
        counts = dict(agent.sampler.counts)
        kept_items = judging.queue.counts()
    finally:
        agent.stop()
    lost = len(acknowledged) - int(stored["u"])
    duplicates = int(stored["n"]) - int(stored["u"])
    scenario_rows.record(
        scenario_rows.ScenarioRow(
            scenario="wall clock jumps (+1d, -1d, +1y) and span skew (-10d..+1y)",
            unit="spans",
            tried=sent,
            faults=len(WALL_JUMPS_S) - 1,
            acknowledged=len(acknowledged),
            stored=int(stored["u"]),
            lost=lost,
            duplicates=duplicates,
            note=f"traces {len(traces)}, decided complete {decided}, timeout {counts.get('decided_by:timeout', 0)}, "
            f"judge items final {kept_items[ItemState.DONE] + kept_items[ItemState.FAILED]}",
        )
    )
    assert lost == 0 and duplicates == 0
    # Every trace decided because it was complete: none waited for the timeout, none was decided early by one.
    assert decided == len(traces)
    assert counts.get("decided_by:timeout", 0) == 0 and not any(k.startswith("evicted") for k in counts)
    assert counts.get("decided:keep", 0) == len(traces)  # error traces: all kept, whatever their timestamps
    assert pending == 0 and kept_items[ItemState.DONE] + kept_items[ItemState.FAILED] == len(traces)


# --- the judge queue's leases, through its clock seams ------------------------------------------------------------
class ManualWall:
    def __init__(self) -> None:
        self.now_s = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now_s


def test_a_wall_clock_jump_forward_does_not_hand_a_held_lease_to_a_second_worker(tmp_path: Path) -> None:
    wall = ManualWall()
    first = JudgeQueue(tmp_path / "q.sqlite", wall_clock=wall)
    second = JudgeQueue(tmp_path / "q.sqlite", wall_clock=wall)
    first.enqueue([Kept("t", f"{i:032x}") for i in range(5)], "v")
    held = first.lease(5, lease_s=30)
    wall.now_s += 365 * DAY_S  # NTP steps, or an operator fixes the date
    assert second.lease(5, lease_s=30) == []  # not stolen: the lease still has ~30 s on the boot clock
    assert first.renew(held, lease_s=30) == 5
    assert all(first.record(lease, [], status="ok") for lease in held)  # the holder still owns them
    first.close()
    second.close()


def test_a_wall_clock_jump_back_does_not_pin_a_released_item(tmp_path: Path) -> None:
    wall = ManualWall()
    queue = JudgeQueue(tmp_path / "q.sqlite", wall_clock=wall)
    queue.enqueue([Kept("t", "a" * 32)], "v")
    [lease] = queue.lease(1)
    assert queue.release(lease, retry_in_s=0.05, error="HTTP 503")
    wall.now_s -= 2 * DAY_S
    retaken = _poll(lambda: queue.lease(1), lambda got: bool(got), timeout_s=10.0)
    assert [item.trace_id for item in retaken] == ["a" * 32]  # 50 ms later on the boot clock, not two days
    queue.close()


def test_leases_of_an_earlier_boot_are_void(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite"
    before = JudgeQueue(path, boot_id=lambda: "boot-1")
    before.enqueue([Kept("t", f"{i:032x}") for i in range(3)], "v")
    assert len(before.lease(3, lease_s=3600)) == 3
    before.close()
    same_boot = JudgeQueue(path, boot_id=lambda: "boot-1")
    assert same_boot.lease(3) == []  # still held: same boot, lease not run out
    same_boot.close()
    after = JudgeQueue(path, boot_id=lambda: "boot-2")  # a reboot: the boot clock restarted, the holders are gone
    retaken = after.lease(3)
    assert len(retaken) == 3 and all(lease.attempts == 2 for lease in retaken)
    after.close()
