"""Fixtures for the fault and hostile-input suite: receivers on ephemeral 127.0.0.1 ports wired to a recording
consumer, and the summary table printed at the end of the session (`pytest_terminal_summary`).

Bigger sizes: ``RAGMON_FAULTS_LONG=1 pytest -m faults tests/faults`` (``RAGMON_FAULTS_HOLD_S`` sets the held-load
duration alone). A second table lists one row per fault scenario (`scenario_rows`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ragmon.collectors import CollectorCounters, GrpcReceiver, HttpReceiver

from tests.faults import scenario_rows
from tests.faults.faults_support import LONG, TALLY, Recorder, Tally

MAX_BODY = 64 * 1024


@pytest.fixture(scope="module")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def fault_counters() -> CollectorCounters:
    return CollectorCounters()


@pytest.fixture(scope="module")
def fuzz_http(recorder: Recorder, fault_counters: CollectorCounters) -> Iterator[HttpReceiver]:
    """One receiver per module (hypothesis examples share it: surviving them all is the point)."""
    receiver = HttpReceiver(
        recorder, port=0, counters=fault_counters, max_body_bytes=MAX_BODY, worker_threads=2
    ).start()
    yield receiver
    receiver.stop(timeout_s=2.0)


@pytest.fixture(scope="module")
def fuzz_grpc(recorder: Recorder, fault_counters: CollectorCounters) -> Iterator[GrpcReceiver]:
    receiver = GrpcReceiver(recorder, port=0, counters=fault_counters, max_message_bytes=MAX_BODY).start()
    yield receiver
    receiver.stop(timeout_s=2.0)


def _alive(t: Tally) -> str:
    if not t.health_checks and not t.good_sent:
        return "n/a (no receiver checks this run)"
    ok = not t.health_failures and t.good_sent == t.good_delivered
    return "yes" if ok else "NO"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    _tally_summary(terminalreporter)
    scenarios = scenario_rows.rows()
    if scenarios:
        terminalreporter.write_sep("=", "ragmon fault scenarios (one row per scenario)")
        for line in scenario_rows.table(scenarios):
            terminalreporter.write_line(line)


def _tally_summary(terminalreporter: pytest.TerminalReporter) -> None:
    t = TALLY
    if not t.requests and not t.connections_held and not t.security_probes:
        return
    rejected = ", ".join(f"{status}={n}" for status, n in sorted(t.by_status.items())) or "none"
    rows = [
        ("mode", "long (RAGMON_FAULTS_LONG=1)" if LONG else "short"),
        ("requests tried", t.requests),
        ("faults injected", t.faults),
        ("accepted (200/OK)", t.accepted),
        ("  of which partial_success", t.partial),
        ("rejected by status", rejected),
        ("good requests sent / delivered intact", f"{t.good_sent} / {t.good_delivered}"),
        ("health checks / failed", f"{t.health_checks} / {t.health_failures}"),
        ("connections held / closed by server", f"{t.connections_held} / {t.connections_closed_by_server}"),
        ("security probes / refused (4xx)", f"{t.security_probes} / {t.security_refused}"),
        ("server alive throughout", _alive(t)),
    ]
    terminalreporter.write_sep("=", "ragmon fault suite")
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        terminalreporter.write_line(f"{name:<{width}}  {value}")
