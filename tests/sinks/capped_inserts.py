"""Run as a process of its own (chDB hosts one engine per process): OTLP batches stored through the agent's ingest
path into an embedded engine capped so small that inserts fail with MEMORY_LIMIT_EXCEEDED, each batch retried as the
agent's writer retries it (same deduplication token). Prints one JSON line: errors raised, spans and captured-text
rows per batch."""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragmon
from ragmon._otlp import encode_spans
from ragmon.sinks import open_store, otlp_ingest
from ragmon.sinks.envelope import seal
from ragmon.sinks.errors import StoreError

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


def main(cap_mib: int, batches: int) -> None:
    bodies, spans_per_body = request_bodies(REQUESTS_PER_BATCH * batches)
    store = open_store(f"{tempfile.mkdtemp(prefix='capped')}/chdb", engine_memory_bytes=cap_mib * 1024**2)
    otlp_ingest.install(store)
    errors = 0
    for b in range(batches):
        first = b * REQUESTS_PER_BATCH + 1
        envelopes = [
            seal(body, "acme", first + i) for i, body in enumerate(bodies[first - 1 : first - 1 + REQUESTS_PER_BATCH])
        ]
        for _attempt in range(300):
            try:
                store.insert_otlp(envelopes, f"wal:test:{first}-{first + REQUESTS_PER_BATCH - 1}")
                break
            except StoreError as exc:
                if not exc.retryable:
                    raise
                errors += 1
                time.sleep(0.05)
    per_batch = f"intDiv(ingest_seq - 1, {REQUESTS_PER_BATCH})"
    counts = {
        table: {
            row["b"]: row["n"]
            for row in store.query(f"SELECT {per_batch} AS b, count() AS n FROM {table} GROUP BY b", max_rows=10_000)
        }
        for table in ("spans", "span_content")
    }
    print(json.dumps({"errors": errors, "spans_per_batch": spans_per_body * REQUESTS_PER_BATCH, **counts}))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
