"""Run as a process of its own (chDB hosts one engine per process): OTLP batches stored through the agent's ingest
path, first into an embedded engine capped so small that inserts fail with MEMORY_LIMIT_EXCEEDED, then, as an
agent restarted by its supervisor would, the batches that failed sent again under the same deduplication token.

    python -m tests.sinks.capped_inserts capped CAP_MIB BATCHES DATA_DIR
        every batch once into the capped engine; prints {"failed": [batch, ...], "errors": n}
    python -m tests.sinks.capped_inserts retry BATCHES DATA_DIR FAILED_JSON
        an uncapped engine on the same store sends the failed batches again (retried as the writer retries), and
        prints the spans and captured-text rows stored per batch

Why two processes, not one that retries until the capped engine lets a batch through: at so small a cap the
engine's own count of its memory can stay above the cap long after the memory was freed (its tracker is not
corrected from RSS in an embedded process, whose RSS is Python's too), and on a busy machine its merges keep it
there for minutes — a test that waited for that depended on the machine's load. Here the cap only decides which
batches fail; a batch whose insert *reported success* is never sent again, so a failure inside a view that the
insert swallowed (the bug this guards against) still shows as a batch missing from `spans` or `span_content`."""

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


def retried(action: Callable[[], object], deadline_s: float = 600.0) -> int:
    """Run `action` until it succeeds, as the writer does (on the uncapped engine a statement can still meet a
    passing error); the errors it met."""
    errors, started = 0, time.monotonic()
    while True:
        try:
            action()
            return errors
        except StoreError as exc:
            if not exc.retryable or time.monotonic() - started > deadline_s:
                raise
            errors += 1
            time.sleep(0.05)


def _batch(bodies: list[bytes], b: int) -> tuple[list[bytes], str]:
    """Batch `b`'s envelopes (sequence numbers from b * REQUESTS_PER_BATCH + 1) and its deduplication token."""
    first = b * REQUESTS_PER_BATCH + 1
    batch = bodies[first - 1 : first - 1 + REQUESTS_PER_BATCH]
    envelopes = [seal(body, "acme", first + i) for i, body in enumerate(batch)]
    return envelopes, f"wal:test:{first}-{first + REQUESTS_PER_BATCH - 1}"


def capped(cap_mib: int, batches: int, data_dir: str) -> None:
    bodies, _ = request_bodies(REQUESTS_PER_BATCH * batches)
    store = open_store(f"{data_dir}/chdb", engine_memory_bytes=cap_mib * 1024**2)
    retried(lambda: otlp_views.install(store))
    failed = []
    for b in range(batches):
        envelopes, token = _batch(bodies, b)
        try:
            store.insert_otlp(envelopes, token)
        except StoreError as exc:
            if not exc.retryable:
                raise
            failed.append(b)
    store.close()
    print(json.dumps({"failed": failed, "errors": len(failed)}))


def retry(batches: int, data_dir: str, failed: list[int]) -> None:
    bodies, spans_per_body = request_bodies(REQUESTS_PER_BATCH * batches)  # the same bodies in every process
    store = open_store(f"{data_dir}/chdb")
    otlp_views.install(store)
    for b in failed:
        envelopes, token = _batch(bodies, b)
        retried(lambda envelopes=envelopes, token=token: store.insert_otlp(envelopes, token))
    per_batch = f"intDiv(ingest_seq - 1, {REQUESTS_PER_BATCH})"

    def read(sql: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        retried(lambda: rows.extend(store.query(sql, max_rows=10_000)))
        return rows

    counts = {
        table: {row["b"]: row["n"] for row in read(f"SELECT {per_batch} AS b, count() AS n FROM {table} GROUP BY b")}
        for table in ("spans", "span_content")
    }
    print(json.dumps({"spans_per_batch": spans_per_body * REQUESTS_PER_BATCH, **counts}))


if __name__ == "__main__":
    if sys.argv[1] == "capped":
        capped(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        retry(int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4]))
