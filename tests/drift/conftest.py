"""Fixtures for the drift tests: a hand-driven clock, a scripted HTTP receiver on 127.0.0.1, traffic and judge
scores written into a store on the embedded engine (a database per source) and read back through the
`StoreSignalSource` the agent runs.

Helpers are handed out as fixtures (not imported) because this directory is not a package.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ragmon.sinks import Store, open_store

from ragmon.drift import StoreSignalSource, calibrate
from tests.support.signal_oracle import JudgedScore
from tests.support.span_rows import SpanBatch, insert_spans

# Yesterday 00:00 UTC: minute- and hour-aligned, so window arithmetic in tests is easy to read, and recent, because
# the store's tables drop rows past their TTL (payloads keep 14 days).
EPOCH_S = float((int(time.time()) // 86_400 - 1) * 86_400)


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


class Stores:
    """Stores on the session's embedded engine, a database each, closed when the test ends."""

    def __init__(self, engine_dir: Path) -> None:
        self.engine_dir = engine_dir
        self.opened: list[Store] = []
        self.ingest_seq = 0

    def open(self) -> Store:
        store = open_store(str(self.engine_dir), database=f"t_{uuid.uuid4().hex[:12]}")
        self.opened.append(store)
        return store

    def write_spans(self, store: Store, batch: SpanBatch) -> None:
        """Store the spans and roll them up into the minute rollup, as the agent does once their traces are whole."""
        self.ingest_seq += 1
        batch.ingest_seq = [self.ingest_seq] * len(batch)
        insert_spans(store, batch)
        store.roll_up(self.ingest_seq, self.ingest_seq)


def _store_of(source: StoreSignalSource) -> Store:
    assert isinstance(source.store, Store)
    return source.store


@pytest.fixture
def stores(chdb_engine_dir: Path) -> Iterator[Stores]:
    opened = Stores(chdb_engine_dir)
    yield opened
    for store in opened.opened:
        store.close()


class _Spans:
    """A request's spans as `spans` rows: `add` one span of the trace (its root first)."""

    def __init__(self) -> None:
        self.batch = SpanBatch()

    def add(
        self,
        *,
        time_s: float,
        trace_id: str,
        tenant: str,
        feature: str,
        stage: str,
        duration_ms: float,
        error: bool = False,
        cost_usd: float | None = None,
        tokens: int = 0,
        top1_score: float | None = None,
        similarity_gap: float | None = None,
        norm_deviation: float | None = None,
    ) -> None:
        b = self.batch
        b.tenant.append(tenant)
        b.trace_id.append(trace_id)
        b.span_id.append(f"{trace_id}/{stage}")
        b.parent_span_id.append("" if stage == "request" else f"{trace_id}/request")
        b.name.append(stage)
        b.stage.append(stage)
        b.feature.append(feature)
        b.eval_run.append("")
        b.user.append("")
        b.session.append("")
        b.service.append("rag-api")
        b.start_time.append(round(time_s * 1e6) * 1000)
        b.duration_ms.append(duration_ms)
        b.status.append("error" if error else "ok")
        b.error_type.append("TimeoutError" if error else "")
        b.model.append("")
        b.provider.append("")
        b.input_tokens.append(tokens)
        b.output_tokens.append(0)
        b.cached_input_tokens.append(0)
        b.cost_usd.append(cost_usd)
        b.top1_score.append(top1_score)
        b.similarity_gap.append(similarity_gap)
        b.norm_deviation.append(norm_deviation)
        b.ttft_ms.append(None)
        b.retrieved_ids.append([])
        b.retrieved_scores.append([])
        b.attributes.append({})
        b.ingest_seq.append(0)


@pytest.fixture
def traffic(stores: Stores) -> Callable[..., StoreSignalSource]:
    """Write RAG requests into a store: a root span (stage "request", read as "") plus embed / search / generate
    spans; returns the `StoreSignalSource` over it (pass it back as `source` to add more to the same store).

    `shape(minute)` may override, per minute: requests, latency_ms (median of the generate stage), error_rate,
    top1_mean, gap_mean, normalised (1.0: query vectors are unit-length; 0.0: raw model output), cost_usd, tokens.
    """

    def fill(
        source: StoreSignalSource | None = None,
        *,
        start_s: float = EPOCH_S,
        minutes: int,
        seed: int,
        feature: str = "qa",
        tenant: str = "acme",
        shape: Shape | None = None,
    ) -> StoreSignalSource:
        rng = np.random.default_rng(seed)
        store = stores.open() if source is None else _store_of(source)
        spans = _Spans()
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
                common: dict[str, Any] = {"time_s": t, "trace_id": trace, "tenant": tenant, "feature": feature}
                spans.add(**common, stage="request", duration_ms=generate_ms + retrieve_ms + 5, error=error)
                spans.add(**common, stage="embed", duration_ms=5.0, norm_deviation=abs(norm - 1))
                spans.add(
                    **common,
                    stage="search",
                    duration_ms=retrieve_ms,
                    top1_score=float(np.clip(rng.normal(p["top1_mean"], 0.05), 0, 1)),
                    similarity_gap=float(abs(rng.normal(p["gap_mean"], 0.03))),
                )
                spans.add(
                    **common,
                    stage="generate",
                    duration_ms=generate_ms,
                    error=error,
                    cost_usd=p["cost_usd"] * float(rng.uniform(0.8, 1.2)),
                    tokens=tokens,
                )
        stores.write_spans(store, spans.batch)
        return source or StoreSignalSource(store)

    return fill


@pytest.fixture
def judged(stores: Stores) -> Callable[..., StoreSignalSource]:
    """Write online judge verdicts (`JudgedScore`s; a None value is a failed judge call) and their traces' payloads,
    which carry the sampler's inclusion probability, into a store;
    returns the `StoreSignalSource` over it (pass it back as `source` to add more to the same store)."""

    def write(verdicts: Sequence[JudgedScore], source: StoreSignalSource | None = None) -> StoreSignalSource:
        store = stores.open() if source is None else _store_of(source)
        payloads = {
            (v.tenant, v.trace_id): {
                "tenant": v.tenant,
                "trace_id": v.trace_id,
                "feature": v.feature,
                "start_time": datetime.fromtimestamp(v.time_s, UTC),
                "inclusion_probability": v.inclusion_probability,
            }
            for v in verdicts
        }
        store.insert_payloads(list(payloads.values()))
        store.insert_scores(
            [
                {
                    "tenant": v.tenant,
                    "trace_id": v.trace_id,
                    "feature": v.feature,
                    "metric": v.metric,
                    "judge_version": "v1",
                    "value": v.value,
                    "status": "ok" if v.value is not None else "llm_error",
                    "scored_at": datetime.fromtimestamp(v.time_s, UTC),
                }
                for v in verdicts
            ]
        )
        return source or StoreSignalSource(store)

    return write


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
