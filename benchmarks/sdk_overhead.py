"""What ragmon costs a RAG app per request, next to raw OpenTelemetry, and whether it loses spans under load.

One request = a root span + embed, search, rerank, generate (5 spans). The same request is written three ways:
uninstrumented (the same stand-in work, no spans), raw OpenTelemetry 1.45 (`start_as_current_span`, the same
information as 3–6 attributes per span, written as a competent user would), and ragmon's API (which also derives
cost, rank-1 score, similarity gap and embedding-norm deviation).

Part 1, overhead — one process, variants alternated in rounds (start order rotated each round), timing
`time.process_time()` (the whole process: app thread *and* export thread, i.e. the total CPU cost per request)
and wall time, with a force_flush closing every timed block so export work is inside it. The app thread's own
CPU (`time.thread_time()`) is reported beside it; the rest of the process CPU is the export thread's (raw
OpenTelemetry's BatchSpanProcessor worker, ragmon's export thread; the receiver runs in another process):

- no-op exporter: each SDK's own batching processor around an exporter that does nothing
  (raw: `BatchSpanProcessor(NoOpExporter())`; ragmon: `configure(span_exporter=NoOpExporter())`);
- real export over OTLP/HTTP to a receiver in a separate process (`_otlp_sink.py`, whose CPU is not charged):
  raw: stock `BatchSpanProcessor(OTLPSpanExporter(...))` defaults; ragmon: its own transport (`endpoint=`).
  Also a raw variant whose queue holds a whole block, i.e. raw OpenTelemetry's cost when it drops nothing.

Part 2, sustained load — a paced loop at `--rate` requests/s for `--load-seconds`, one subprocess per SDK (so the
peak RSS is that SDK's alone): spans received by the sink vs created, drops, peak RSS (VmHWM).

    /work/venv/bin/python benchmarks/sdk_overhead.py                       # ~1–2 minutes
    /work/venv/bin/python benchmarks/sdk_overhead.py --skip-load --requests 1000 --rounds 3
    /work/venv/bin/python benchmarks/sdk_overhead.py --profile ragmon-otlp  # cProfile of the app thread
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import math
import pstats
import random
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Tracer

SPANS_PER_REQUEST = 5
SERVICE_NAME = "sdk-overhead-bench"
EMBED_MODEL = "text-embedding-3-small"
RERANK_MODEL = "rerank-english-v3.0"
CHAT_MODEL = "gpt-4o-mini"
FEATURE = "docs-qa"
SEARCH_TOP_K = 10
RERANK_TOP_K = 5
VECTOR_POOL_SIZE = 32  # distinct query vectors, reused round-robin: building them is not the app's hot path

GOAL_NOOP_RATIO = 1.15  # ragmon ≤ 1.15 × raw OpenTelemetry with a no-op exporter
GOAL_EXPORT_RATIO = 0.7  # ragmon ≤ 0.7 × raw OpenTelemetry's total cost with real OTLP export

_SINK_SCRIPT = Path(__file__).with_name("_otlp_sink.py")


# ---------------------------------------------------------------------------------------------------------------
# The request, three ways
# ---------------------------------------------------------------------------------------------------------------
class Workload:
    """The stand-in work of one request: pick a query vector, build the hit list, rerank it, write an answer.

    Deliberately trivial, so the figures are the instrumentation's; varied per request (ids, scores, users,
    tokens) so no exporter gets an unrealistically cache-friendly stream.
    """

    def __init__(self, vector_dims: int = 1536, seed: int = 7) -> None:
        rng = random.Random(seed)
        self.vector_dims = vector_dims
        self.vectors: list[list[float]] = []
        for _ in range(VECTOR_POOL_SIZE):
            raw = [rng.gauss(0.0, 1.0) for _ in range(vector_dims)]
            norm = math.sqrt(sum(x * x for x in raw))
            self.vectors.append([x / norm for x in raw])  # unit vectors, as OpenAI's embeddings are

    def user(self, i: int) -> str:
        return f"user-{i % 200}"

    def session(self, i: int) -> str:
        return f"session-{i // 4}"

    def embed(self, i: int) -> list[float]:
        return self.vectors[i % VECTOR_POOL_SIZE]

    def search(self, i: int) -> list[tuple[str, float]]:
        base = (i * 7919) % 100_000
        jitter = (i % 13) * 0.001
        return [(f"doc-{base + k}", 0.91 - 0.027 * k - jitter) for k in range(SEARCH_TOP_K)]

    def rerank(self, docs: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
        # A reranker reorders and rescores: reverse pairs of neighbours, new scores in (0, 1).
        reordered = sorted(docs, key=lambda d: d[1] + (0.05 if d[0][-1] in "13579" else 0.0), reverse=True)
        return [(doc_id, 0.98 - 0.09 * rank) for rank, (doc_id, _) in enumerate(reordered[:RERANK_TOP_K])]

    def generate(self, i: int, ranked: Sequence[tuple[str, float]]) -> tuple[str, int, int]:
        answer = f"According to {ranked[0][0]} and {ranked[1][0]}, the answer is {i % 97}."
        return answer, 850 + i % 150, 90 + i % 60


def request_uninstrumented(work: Workload, i: int) -> str:
    work.user(i)
    work.session(i)
    vector = work.embed(i)
    docs = work.search(i)
    ranked = work.rerank(docs)
    answer, _, _ = work.generate(i, ranked)
    return answer if vector else ""


def request_otel(tracer: Tracer, work: Workload, i: int) -> str:
    """Raw OpenTelemetry, GenAI semantic-convention names; static attributes at start, results in one call."""
    root_attributes = {"app.feature": FEATURE, "enduser.id": work.user(i), "session.id": work.session(i)}
    with tracer.start_as_current_span(f"request {FEATURE}", attributes=root_attributes):
        with tracer.start_as_current_span(
            f"embeddings {EMBED_MODEL}",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "embeddings",
                "gen_ai.request.model": EMBED_MODEL,
                "gen_ai.provider.name": "openai",
            },
        ) as span:
            vector = work.embed(i)
            span.set_attributes({"gen_ai.usage.input_tokens": 12, "gen_ai.embeddings.dimension.count": len(vector)})
        with tracer.start_as_current_span(
            "retrieval docs",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "retrieval",
                "gen_ai.data_source.id": "docs",
                "gen_ai.request.top_k": SEARCH_TOP_K,
            },
        ) as span:
            docs = work.search(i)
            span.set_attributes(
                {
                    "gen_ai.retrieval.documents": json.dumps([{"id": d, "score": s} for d, s in docs]),
                    "app.retrieval.count": len(docs),
                }
            )
        with tracer.start_as_current_span(
            f"rerank {RERANK_MODEL}",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "rerank",
                "gen_ai.request.model": RERANK_MODEL,
                "gen_ai.provider.name": "cohere",
                "gen_ai.request.top_k": RERANK_TOP_K,
            },
        ) as span:
            ranked = work.rerank(docs)
            span.set_attribute("gen_ai.retrieval.documents", json.dumps([{"id": d, "score": s} for d, s in ranked]))
        with tracer.start_as_current_span(
            f"chat {CHAT_MODEL}",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": CHAT_MODEL,
                "gen_ai.provider.name": "openai",
            },
        ) as span:
            answer, input_tokens, output_tokens = work.generate(i, ranked)
            span.set_attributes(
                {
                    "gen_ai.usage.input_tokens": input_tokens,
                    "gen_ai.usage.output_tokens": output_tokens,
                    "gen_ai.response.finish_reasons": ("stop",),
                }
            )
    return answer


def request_ragmon(work: Workload, i: int) -> str:
    """ragmon's API; it adds inherited feature/user/session, cost, top-1/gap and norm deviation on its own."""
    import ragmon  # imported here so the raw-OpenTelemetry load subprocess never pays for it

    with ragmon.request(FEATURE, user=work.user(i), session=work.session(i)):
        with ragmon.embed(EMBED_MODEL, provider="openai") as e:
            vector = work.embed(i)
            e.record(input_tokens=12, vectors=vector)
        with ragmon.search(top_k=SEARCH_TOP_K, data_source="docs") as s:
            docs = work.search(i)
            s.record(documents=docs, query_vector=vector)
        with ragmon.rerank(RERANK_MODEL, provider="cohere", top_k=RERANK_TOP_K) as r:
            ranked = work.rerank(docs)
            r.record(documents=ranked)
        with ragmon.generate(CHAT_MODEL, provider="openai") as g:
            answer, input_tokens, output_tokens = work.generate(i, ranked)
            g.record(input_tokens=input_tokens, output_tokens=output_tokens, finish_reason="stop")
    return answer


# ---------------------------------------------------------------------------------------------------------------
# Exporters, the sink, the variants
# ---------------------------------------------------------------------------------------------------------------
class NoOpExporter(SpanExporter):
    """Accepts every batch and does nothing but count it (so delivery can be checked in no-op mode too)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class Sink:
    """The OTLP/HTTP receiver, in its own process. `spans()` is its running total."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, str(_SINK_SCRIPT), "--port", "0"], stdout=subprocess.PIPE, text=True
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline().split()
        if len(line) != 2 or line[0] != "PORT":
            self.close()
            raise RuntimeError(f"OTLP sink did not start (said {line!r})")
        self.endpoint = f"http://127.0.0.1:{line[1]}"

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(f"{self.endpoint}/stats", timeout=10) as response:
            return dict(json.load(response))

    def spans(self) -> int:
        return self.stats()["spans"]

    def close(self) -> None:
        self._process.terminate()
        self._process.wait(10)
        if self._process.stdout is not None:
            self._process.stdout.close()

    def __enter__(self) -> Sink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _provider() -> TracerProvider:
    return TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))


def _otlp_exporter(endpoint: str) -> SpanExporter:
    # Imported lazily: the ragmon load subprocess must not carry the stock exporter's modules in its RSS.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")


@dataclass
class Variant:
    name: str
    run: Callable[[int], object]
    spans_per_request: int = SPANS_PER_REQUEST
    activate: Callable[[], None] = lambda: None  # called before each timed block, outside the timing
    flush: Callable[[], object] = lambda: True
    delivered: Callable[[], int] = lambda: 0  # running total of spans that reached the exporter's destination
    counted_drops: Callable[[], int] | None = None  # the SDK's own drop counter for the current block, if any


def build_variants(work: Workload, sink: Sink | None, names: Sequence[str] | None = None) -> list[Variant]:
    """The variants of Part 1. ragmon's two modes share one provider; `activate` re-configures it."""
    import ragmon

    variants = [Variant("uninstrumented", lambda i: request_uninstrumented(work, i), spans_per_request=0)]

    def raw(name: str, processor: BatchSpanProcessor, delivered: Callable[[], int]) -> Variant:
        provider = _provider()
        provider.add_span_processor(processor)
        tracer = provider.get_tracer("sdk-overhead-bench")
        return Variant(name, lambda i: request_otel(tracer, work, i), flush=provider.force_flush, delivered=delivered)

    noop_raw = NoOpExporter()
    variants.append(raw("otel-noop", BatchSpanProcessor(noop_raw), lambda: noop_raw.spans))

    ragmon_provider = _provider()
    noop_ragmon = NoOpExporter()

    def ragmon_drops() -> int:
        return int(ragmon.stats()["dropped_total"])

    variants.append(
        Variant(
            "ragmon-noop",
            lambda i: request_ragmon(work, i),
            activate=lambda: ragmon.configure(
                tracer_provider=ragmon_provider, span_exporter=noop_ragmon, service_name=SERVICE_NAME
            ),
            flush=lambda: ragmon.force_flush(60.0),
            delivered=lambda: noop_ragmon.spans,
            counted_drops=ragmon_drops,
        )
    )
    if sink is not None:
        variants.append(raw("otel-otlp", BatchSpanProcessor(_otlp_exporter(sink.endpoint)), sink.spans))
        variants.append(
            Variant(
                "ragmon-otlp",
                lambda i: request_ragmon(work, i),
                activate=lambda: ragmon.configure(
                    tracer_provider=ragmon_provider, endpoint=sink.endpoint, service_name=SERVICE_NAME
                ),
                flush=lambda: ragmon.force_flush(60.0),
                delivered=sink.spans,
                counted_drops=ragmon_drops,
            )
        )
    return [v for v in variants if names is None or v.name in names]


def add_unbounded_otel(variants: list[Variant], sink: Sink, queue_spans: int, work: Workload) -> None:
    """Raw OpenTelemetry with a queue that holds a whole block: its total cost when it drops nothing."""
    provider = _provider()
    provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(sink.endpoint), max_queue_size=queue_spans))
    tracer = provider.get_tracer("sdk-overhead-bench")
    variants.append(
        Variant(
            "otel-otlp-bigq", lambda i: request_otel(tracer, work, i), flush=provider.force_flush, delivered=sink.spans
        )
    )


# ---------------------------------------------------------------------------------------------------------------
# Part 1: overhead per request
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Block:
    cpu_us: float  # per request, the whole process: app thread + export thread
    app_cpu_us: float  # per request, the app (main) thread alone: the request path
    wall_us: float  # per request
    created: int
    delivered: int
    counted_drops: int | None


@dataclass
class OverheadResult:
    blocks: dict[str, list[Block]] = field(default_factory=dict)

    def median_cpu_us(self, name: str) -> float:
        return statistics.median(b.cpu_us for b in self.blocks[name])

    def median_app_cpu_us(self, name: str) -> float:
        return statistics.median(b.app_cpu_us for b in self.blocks[name])

    def median_export_cpu_us(self, name: str) -> float:
        return statistics.median(b.cpu_us - b.app_cpu_us for b in self.blocks[name])

    def median_wall_us(self, name: str) -> float:
        return statistics.median(b.wall_us for b in self.blocks[name])

    def paired_ratios(self, numerator: str, denominator: str, metric: str = "cpu_us") -> list[float]:
        """The per-round ratios: neighbours in time share the machine's noise."""
        pairs = zip(self.blocks[numerator], self.blocks[denominator], strict=True)
        return [getattr(a, metric) / getattr(b, metric) for a, b in pairs]

    def paired_ratio(self, numerator: str, denominator: str, metric: str = "cpu_us") -> float:
        """Median over rounds of the per-round ratio."""
        return statistics.median(self.paired_ratios(numerator, denominator, metric))


def run_block(variant: Variant, first: int, requests: int) -> Block:
    variant.activate()
    delivered_before = variant.delivered()
    gc.collect()  # don't charge this block for garbage the previous variant left
    run = variant.run
    cpu0, wall0, app0 = time.process_time(), time.perf_counter(), time.thread_time()
    for i in range(first, first + requests):
        run(i)
    app1 = time.thread_time()  # before the flush: raw OpenTelemetry's force_flush exports on the calling thread
    variant.flush()  # export work belongs to the request's cost
    cpu1, wall1 = time.process_time(), time.perf_counter()
    return Block(
        cpu_us=(cpu1 - cpu0) / requests * 1e6,
        app_cpu_us=(app1 - app0) / requests * 1e6,
        wall_us=(wall1 - wall0) / requests * 1e6,
        created=requests * variant.spans_per_request,
        delivered=variant.delivered() - delivered_before,
        counted_drops=variant.counted_drops() if variant.counted_drops else None,
    )


def run_overhead(variants: Sequence[Variant], requests: int, rounds: int, warmup: int = 200) -> OverheadResult:
    for variant in variants:  # imports, caches, the first connection
        run_block(variant, 0, warmup)
    result = OverheadResult({v.name: [] for v in variants})
    first = warmup
    for r in range(rounds):
        shift = r % len(variants)
        for variant in [*variants[shift:], *variants[:shift]]:  # rotate so no variant always runs first
            result.blocks[variant.name].append(run_block(variant, first, requests))
        first += requests
    return result


def print_overhead(result: OverheadResult, requests: int, rounds: int) -> None:
    base = result.median_cpu_us("uninstrumented") if "uninstrumented" in result.blocks else 0.0
    print(f"\nPart 1 — per-request cost, {rounds} rounds × {requests} requests, medians (µs/request)")
    header = (
        f"{'variant':<16}{'CPU µs':>10}{'app µs':>9}{'export µs':>10}{'wall µs':>10}{'CPU−base':>10}"
        f"{'created':>10}{'delivered':>11}{'lost':>8}{'counted':>9}"
    )
    print(header)
    print("-" * len(header))
    for name, blocks in result.blocks.items():
        created = sum(b.created for b in blocks)
        delivered = sum(b.delivered for b in blocks)
        counted = [b.counted_drops for b in blocks if b.counted_drops is not None]
        cpu = result.median_cpu_us(name)
        print(
            f"{name:<16}{cpu:>10.1f}{result.median_app_cpu_us(name):>9.1f}{result.median_export_cpu_us(name):>10.1f}"
            f"{result.median_wall_us(name):>10.1f}{cpu - base:>10.1f}"
            f"{created:>10}{delivered if created else 0:>11}{created - delivered if created else 0:>8}"
            f"{sum(counted) if counted else '-':>9}"
        )
    print("  CPU = the whole process (app + export threads); app = the app thread's request loop; export = CPU − app")
    print("\nratios (median of per-round ratios [range over rounds]; CPU includes the export thread)")
    pairs = [
        ("ragmon-noop", "otel-noop", GOAL_NOOP_RATIO),
        ("ragmon-otlp", "otel-otlp", GOAL_EXPORT_RATIO),
        ("ragmon-otlp", "otel-otlp-bigq", GOAL_EXPORT_RATIO),
    ]
    for ragmon_name, otel_name, goal in pairs:
        if ragmon_name not in result.blocks or otel_name not in result.blocks:
            continue
        ratios = result.paired_ratios(ragmon_name, otel_name)
        cpu = statistics.median(ratios)
        app = result.paired_ratio(ragmon_name, otel_name, "app_cpu_us")
        wall = result.paired_ratio(ragmon_name, otel_name, "wall_us")
        over_r = result.median_cpu_us(ragmon_name) - base
        over_o = result.median_cpu_us(otel_name) - base
        verdict = "meets" if cpu <= goal else "MISSES"
        print(
            f"  {ragmon_name}/{otel_name}: CPU {cpu:.2f}× [{min(ratios):.2f}–{max(ratios):.2f}]  app {app:.2f}×  "
            f"wall {wall:.2f}×  overhead-only {over_r / over_o:.2f}×   goal ≤ {goal}× → {verdict}"
        )


# ---------------------------------------------------------------------------------------------------------------
# Part 2: sustained load, one subprocess per SDK
# ---------------------------------------------------------------------------------------------------------------
LOAD_KINDS = ("otel", "otel-q100k", "ragmon")


def _proc_status_kb(field_name: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def load_child(kind: str, endpoint: str, rate: float, seconds: float, vector_dims: int) -> dict[str, Any]:
    """Runs in the subprocess: a paced loop, then a flush; returns what it saw (the parent asks the sink)."""
    work = Workload(vector_dims)
    total = int(rate * seconds)
    counted_drops: Callable[[], int | None] = lambda: None  # noqa: E731 — replaced for ragmon
    if kind == "ragmon":
        import ragmon

        ragmon.configure(tracer_provider=_provider(), endpoint=endpoint, service_name=SERVICE_NAME)

        def run(i: int) -> object:
            return request_ragmon(work, i)

        def flush() -> object:
            return ragmon.force_flush(120.0)

        def counted_drops() -> int | None:
            return int(ragmon.stats()["dropped_total"])
    else:
        provider = _provider()
        queue = {"otel": 2048, "otel-q100k": max(2048, total * SPANS_PER_REQUEST)}[kind]
        provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(endpoint), max_queue_size=queue))
        tracer = provider.get_tracer("sdk-overhead-bench")

        def run(i: int) -> object:
            return request_otel(tracer, work, i)

        def flush() -> object:
            return provider.force_flush(120_000)

    for i in range(50):  # warm-up, not paced, counted as created
        run(-1 - i)
    flush()
    gc.collect()
    rss_before_kb = _proc_status_kb("VmRSS")
    interval_s = 1.0 / rate
    max_lag_s = 0.0
    # VmHWM alone can lag behind VmRSS (the kernel syncs per-thread RSS counters lazily): sample too, ~10×/s.
    sample_every = max(1, int(rate / 10))
    peak_rss_kb = rss_before_kb
    cpu0 = time.process_time()
    start = time.perf_counter()
    i = 0
    while i < total:
        due = start + i * interval_s
        now = time.perf_counter()
        if now < due:
            time.sleep(due - now)  # overshoots by ~0.1 ms; the loop then catches up, as a burst would
            continue
        max_lag_s = max(max_lag_s, now - due)
        run(i)
        i += 1
        if i % sample_every == 0:
            peak_rss_kb = max(peak_rss_kb, _proc_status_kb("VmRSS"))
    loop_s = time.perf_counter() - start
    flush_started = time.perf_counter()
    flushed = flush()
    flush_s = time.perf_counter() - flush_started
    cpu_s = time.process_time() - cpu0
    peak_rss_kb = max(peak_rss_kb, _proc_status_kb("VmRSS"), _proc_status_kb("VmHWM"))
    return {
        "kind": kind,
        "requests": total,
        "created": (total + 50) * SPANS_PER_REQUEST,
        "achieved_rate": total / loop_s,
        "max_lag_ms": max_lag_s * 1e3,
        "flush_s": flush_s,
        "flushed": bool(flushed),
        "cpu_us_per_request": cpu_s / total * 1e6,
        "rss_before_mb": rss_before_kb / 1024,
        "peak_rss_mb": peak_rss_kb / 1024,
        "counted_drops": counted_drops(),
    }


def run_load(sink: Sink, kinds: Sequence[str], rate: float, seconds: float, vector_dims: int) -> list[dict[str, Any]]:
    results = []
    for kind in kinds:  # one after another: two cores, and the sink needs one
        received_before = sink.spans()
        done = subprocess.run(
            [
                sys.executable, __file__, "--load-child", kind, "--endpoint", sink.endpoint, "--rate", str(rate),
                "--load-seconds", str(seconds), "--vector-dims", str(vector_dims),
            ],
            capture_output=True, text=True, timeout=seconds * 10 + 120, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"load child {kind} failed:\n{done.stderr[-3000:]}")
        outcome = json.loads(done.stdout.strip().splitlines()[-1])
        outcome["received"] = sink.spans() - received_before
        outcome["lost"] = outcome["created"] - outcome["received"]
        results.append(outcome)
    return results


def print_load(results: Sequence[dict[str, Any]], rate: float, seconds: float) -> None:
    print(
        f"\nPart 2 — sustained load: {rate:.0f} requests/s for {seconds:g} s, OTLP/HTTP to the sink, a process per SDK"
    )
    header = (
        f"{'sdk':<12}{'req/s':>8}{'max lag ms':>11}{'created':>9}{'received':>10}{'lost':>8}{'counted':>9}"
        f"{'flush s':>9}{'CPU µs/req':>11}{'RSS0 MB':>9}{'peak MB':>9}{'Δ MB':>7}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        counted = "-" if r["counted_drops"] is None else r["counted_drops"]
        print(
            f"{r['kind']:<12}{r['achieved_rate']:>8.0f}{r['max_lag_ms']:>11.1f}{r['created']:>9}{r['received']:>10}"
            f"{r['lost']:>8}{counted:>9}{r['flush_s']:>9.2f}{r['cpu_us_per_request']:>11.1f}"
            f"{r['rss_before_mb']:>9.1f}{r['peak_rss_mb']:>9.1f}{r['peak_rss_mb'] - r['rss_before_mb']:>7.1f}"
        )
    print("  lost = created − received by the sink; counted = the SDK's own drop counter (raw OTel has none)")


# ---------------------------------------------------------------------------------------------------------------
def profile(name: str, work: Workload, sink: Sink | None, requests: int) -> None:
    """cProfile of one variant's app thread (export threads are not seen by cProfile)."""
    (variant,) = build_variants(work, sink, [name])
    run_block(variant, 0, 200)
    variant.activate()
    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(requests):
        variant.run(i)
    profiler.disable()
    variant.flush()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(30)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per variant per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--load-seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=2000.0, help="requests/s in the load test (5 spans each)")
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--vector-dims", type=int, default=1536, help="embedding size (text-embedding-3-small)")
    parser.add_argument("--profile", metavar="VARIANT", help="cProfile one variant's app thread instead")
    parser.add_argument("--load-child", choices=LOAD_KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.load_child:
        print(json.dumps(load_child(args.load_child, args.endpoint, args.rate, args.load_seconds, args.vector_dims)))
        return
    work = Workload(args.vector_dims)
    with Sink() as sink:
        if args.profile:
            profile(args.profile, work, sink, args.requests)
            return
        print(f"Python {sys.version.split()[0]}, OTLP sink at {sink.endpoint} (separate process)")
        if not args.skip_overhead:
            variants = build_variants(work, sink)
            add_unbounded_otel(variants, sink, (args.requests + 200) * SPANS_PER_REQUEST, work)
            result = run_overhead(variants, args.requests, args.rounds)
            print_overhead(result, args.requests, args.rounds)
        if not args.skip_load:
            print_load(run_load(sink, LOAD_KINDS, args.rate, args.load_seconds, args.vector_dims), args.rate,
                       args.load_seconds)  # fmt: skip


if __name__ == "__main__":
    main()
