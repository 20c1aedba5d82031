"""Fixtures for the drift tests: a hand-driven clock, a scripted HTTP receiver on 127.0.0.1, a traffic generator.

Helpers are handed out as fixtures (not imported) because this directory is not a package.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from ragmon.drift import InMemorySignalSource, Observation, calibrate

# A Monday 00:00 UTC: minute- and hour-aligned, so window arithmetic in tests is easy to read.
EPOCH_S = 1_767_571_200.0


class HandClock:
    """A clock the test moves: `clock()` is now; `advance(seconds)`."""

    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


@pytest.fixture
def clock() -> HandClock:
    return HandClock(EPOCH_S)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Receiver:
    """A real HTTP server answering each POST with the next scripted (status, headers); 200 once the script ends."""

    url: str
    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    requests: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_reply(self) -> tuple[int, dict[str, str]]:
        with self.lock:
            return self.script.pop(0) if self.script else (200, {})


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            target = state["receiver"]
            with target.lock:
                target.requests.append(Received(self.path, dict(self.headers.items()), json.loads(raw)))
            status, headers = target.next_reply()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    host, port = server.server_address[:2]
    state["receiver"] = Receiver(f"http://{host!s}:{port}/hook")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield state["receiver"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


Shape = Callable[[int], dict[str, float]]  # minute index -> overrides of the traffic's parameters


@pytest.fixture
def traffic() -> Callable[..., InMemorySignalSource]:
    """Fill an `InMemorySignalSource` with RAG requests: a root span ("") plus embed / retrieval / generate spans.

    `shape(minute)` may override, per minute: requests, latency_ms (median of the generate stage), error_rate,
    top1_mean, gap_mean, normalised (1.0: query vectors are unit-length; 0.0: raw model output), cost_usd, tokens.
    """

    def fill(
        source: InMemorySignalSource | None = None,
        *,
        start_s: float = EPOCH_S,
        minutes: int,
        seed: int,
        feature: str = "qa",
        tenant: str = "acme",
        shape: Shape | None = None,
    ) -> InMemorySignalSource:
        rng = np.random.default_rng(seed)
        source = source or InMemorySignalSource()
        rows: list[Observation] = []
        for minute in range(minutes):
            p = {
                "requests": 30.0,
                "latency_ms": 400.0,
                "error_rate": 0.01,
                "top1_mean": 0.78,
                "gap_mean": 0.08,
                "normalised": 1.0,
                "cost_usd": 0.002,
                "tokens": 900.0,
            }
            if shape is not None:
                p.update(shape(minute))
            for i in range(int(p["requests"])):
                t = start_s + minute * 60.0 + float(rng.uniform(0, 60))
                trace = f"{feature}-{minute:05d}-{i:03d}"
                query = rng.normal(size=16)
                vector = query / np.linalg.norm(query) if p["normalised"] else query
                norm = float(np.linalg.norm(vector))  # what the SDK measures on the query vector
                generate_ms = float(rng.lognormal(np.log(p["latency_ms"]), 0.3))
                retrieve_ms = float(rng.lognormal(np.log(40.0), 0.2))
                error = bool(rng.random() < p["error_rate"])
                tokens = int(rng.normal(p["tokens"], 50))
                common = {"time_s": t, "trace_id": trace, "tenant": tenant, "feature": feature}
                rows.append(Observation(**common, stage="", duration_ms=generate_ms + retrieve_ms + 5, error=error))
                rows.append(Observation(**common, stage="embeddings", duration_ms=5.0, norm_deviation=abs(norm - 1)))
                rows.append(
                    Observation(
                        **common,
                        stage="retrieval",
                        duration_ms=retrieve_ms,
                        top1_score=float(np.clip(rng.normal(p["top1_mean"], 0.05), 0, 1)),
                        similarity_gap=float(abs(rng.normal(p["gap_mean"], 0.03))),
                    )
                )
                rows.append(
                    Observation(
                        **common,
                        stage="generate",
                        duration_ms=generate_ms,
                        error=error,
                        cost_usd=p["cost_usd"] * float(rng.uniform(0.8, 1.2)),
                        tokens=tokens,
                    )
                )
        source.add(rows)
        return source

    return fill


@pytest.fixture
def series_delays() -> Callable[..., calibrate.DelayRun]:
    """`calibrate.series_step_delays`: step a Gaussian series after 100 windows, a fresh detector per trial."""
    return calibrate.series_step_delays


@pytest.fixture
def series_false_alarms() -> Callable[..., int]:
    return calibrate.series_false_alarms


@pytest.fixture
def sample_delays() -> Callable[..., calibrate.DelayRun]:
    return calibrate.sample_step_delays


@pytest.fixture
def sample_false_alarms() -> Callable[..., int]:
    return calibrate.sample_false_alarms
