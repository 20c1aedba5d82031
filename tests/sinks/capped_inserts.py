"""Run as a process of its own (chDB hosts one engine per process): OTLP batches stored through the agent's ingest
path into an embedded engine capped so small that inserts fail with MEMORY_LIMIT_EXCEEDED, each batch retried as the
agent's writer retries it (same deduplication token). Prints one JSON line: errors raised, spans and captured-text
rows per batch.

`python -m tests.sinks.capped_inserts CAP_MIB BATCHES DATA_DIR FIRST_BATCH`: stores batches FIRST_BATCH.. into the
store in DATA_DIR. At so small a cap the engine's own count of its memory can stay above the cap long after the
memory was freed (its tracker is not corrected from RSS in an embedded process, whose RSS is Python's too); on a busy
machine that has lasted minutes. A batch still refused after `STUCK_AFTER_S` ends the process with exit status
`STUCK` and `{"stuck_at": batch, "errors": n}`: the caller starts a new process on the same directory from that
batch, as an agent restarted by its supervisor would, and the batch is sent again under the same token."""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from ragmon.sinks import open_store, otlp_views
from ragmon.sinks.envelope import seal
from ragmon.sinks.errors import StoreError

import ragmon
from ragmon.otlp_encoding import encode_spans

REQUESTS_PER_BATCH = 15


def request_bodies(count: int) -> tuple[list[bytes], int]:
    """`count` export requests of ~500 RAG spans each (root, embed, search, rerank, generate per trace)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "capped"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ragmon.configure(tracer_provider=provider, span_exporter=InMemorySpanExporter(), capture_content=True)
    rng = random.Random(3)
    bodies, spans_per_body = [], 0
    for _ in range(count):
        exporter.clear()
        for _ in range(100):
            question = "How do I rotate a key? " * 5
            with ragmon.request("docs-qa", user=f"u{rng.randrange(50)}", question=question) as request:
                with ragmon.embed("text-embedding-3-small") as e:
                    e.record(input_tokens=12)
                with ragmon.search(top_k=10) as s:
                    s.record(documents=[(f"doc-{rng.randrange(10**6)}", 0.9 - k / 20) for k in range(10)])
                with ragmon.rerank("rerank-v3.5", top_k=4) as r:
                    r.record(documents=[(f"doc-{rng.randrange(10**6)}", 0.9 - k / 10) for k in range(4)])
                with ragmon.generate("gpt-4o-mini") as g:
                    g.record(input_tokens=900, output_tokens=120, answer="Open Settings, then Keys. " * 8)
                request.record(answer="Open Settings, then Keys.")
        spans = exporter.get_finished_spans()
        spans_per_body = len(spans)
        bodies.append(encode_spans(spans))
    ragmon.shutdown()
    return bodies, spans_per_body


STUCK = 3  # exit status: a batch still refused after STUCK_AFTER_S (see the module docstring)
STUCK_AFTER_S = 60.0


class Stuck(Exception):
    def __init__(self, errors: int) -> None:
        self.errors = errors


def retried(action: Callable[[], object], deadline_s: float = STUCK_AFTER_S) -> int:
    """Run `action` until it succeeds, as the writer does (a statement past the cap fails; later it fits); the
    errors it met. Raises `Stuck` past the deadline."""
    errors, started = 0, time.monotonic()
    while True:
        try:
            action()
            return errors
        except StoreError as exc:
            if not exc.retryable:
                raise
            errors += 1
            if time.monotonic() - started > deadline_s:
                raise Stuck(errors) from exc
            time.sleep(0.05)


def main(cap_mib: int, batches: int, data_dir: str, first_batch: int) -> None:
    bodies, spans_per_body = request_bodies(REQUESTS_PER_BATCH * batches)  # the same bodies in every process
    store = open_store(f"{data_dir}/chdb", engine_memory_bytes=cap_mib * 1024**2)
    otlp_views.install(store)
    errors = 0
    for b in range(first_batch, batches):
        first = b * REQUESTS_PER_BATCH + 1
        batch = bodies[first - 1 : first - 1 + REQUESTS_PER_BATCH]
        envelopes = [seal(body, "acme", first + i) for i, body in enumerate(batch)]
        token = f"wal:test:{first}-{first + REQUESTS_PER_BATCH - 1}"
        try:
            errors += retried(lambda envelopes=envelopes, token=token: store.insert_otlp(envelopes, token))
        except Stuck as stuck:
            print(json.dumps({"stuck_at": b, "errors": errors + stuck.errors}))
            sys.exit(STUCK)
    per_batch = f"intDiv(ingest_seq - 1, {REQUESTS_PER_BATCH})"

    def read(sql: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        retried(lambda: rows.extend(store.query(sql, max_rows=10_000)), deadline_s=600.0)
        return rows

    counts = {
        table: {row["b"]: row["n"] for row in read(f"SELECT {per_batch} AS b, count() AS n FROM {table} GROUP BY b")}
        for table in ("spans", "span_content")
    }
    print(json.dumps({"errors": errors, "spans_per_batch": spans_per_body * REQUESTS_PER_BATCH, **counts}))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
