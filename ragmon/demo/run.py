"""Drive the demo RAG app: answer questions under a fault mix and print the spans it produced.

Without an agent (`ragmon demo --local-only`) the spans are kept in memory (an OpenTelemetry `InMemorySpanExporter`)
and printed as a table — trace, stage, name, duration, model, tokens, cost, top-1 score / similarity gap, status,
note — then summarised per stage (count, p50/p95 latency, total cost). With `endpoint`, ragmon also exports them
over OTLP/HTTP to that address.
"""

from __future__ import annotations

import random
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import numpy as np
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import ragmon
from ragmon import attributes as attr
from ragmon.demo.app import INJECTED_FAULTS_ATTRIBUTE, RagApp
from ragmon.demo.embedder import make_embedder
from ragmon.demo.faults import Faults
from ragmon.demo.generator import Generator
from ragmon.demo.passages import Question, load_corpus, load_questions

SERVICE_NAME = "ragmon-demo"
# What `ragmon demo` injects unless told otherwise: a little of everything the agent should notice.
# Strong enough that the drift rules see them against the demo's fault-free history (a 30 ms slowdown did not).
DEMO_FAULTS = Faults(
    slow_ms={"generate": 300.0}, slow_rate=0.15, error_rate={"search": 0.1, "generate": 0.05}, unfaithful_rate=0.15
)
STAGE_ORDER = ("request", "embed", "search", "rerank", "tool", "generate", "other")
_USERS = ("ana", "bo", "chen", "dara", "eli")


def _feature(question: Question) -> str:
    # Two features so per-feature figures have something to compare: troubleshooting questions come from chat.
    return "support-chat" if any(p.startswith("troubleshooting") for p in question.relevant) else question.feature


def _pick_questions(requests: int, seed: int) -> list[Question]:
    questions = list(load_questions())
    rng = random.Random(seed)
    out: list[Question] = []
    while len(out) < requests:
        batch = questions[:]
        rng.shuffle(batch)
        out.extend(batch)
    return out[:requests]


def run_demo(
    requests: int = 20,
    *,
    faults: Faults | None = None,
    endpoint: str | None = None,
    out: TextIO = sys.stdout,
    seed: int = 0,
    embedder: str = "hashing",
    generator: Generator | None = None,
    show_spans: bool = True,
) -> int:
    """Answer `requests` questions, print the span table and the per-stage summary. Returns the exit code."""
    faults = DEMO_FAULTS if faults is None else faults
    memory = InMemorySpanExporter()
    # A private provider: the demo never installs a global one behind the host process's back.
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    if endpoint:
        provider.add_span_processor(SimpleSpanProcessor(memory))  # the table still needs a local copy
        ragmon.configure(service_name=SERVICE_NAME, endpoint=endpoint, capture_content=True, tracer_provider=provider)
    else:
        ragmon.configure(
            service_name=SERVICE_NAME, capture_content=True, tracer_provider=provider, span_exporter=memory
        )
    failures: dict[str, int] = defaultdict(int)
    try:
        corpus = load_corpus()
        app = RagApp(corpus=corpus, embedder=make_embedder(embedder), generator=generator, faults=faults, seed=seed)
        for i, question in enumerate(_pick_questions(requests, seed)):
            try:
                app.answer(question.question, feature=_feature(question), user=_USERS[i % len(_USERS)])
            except Exception as exc:  # the app's failure is the demo's data: keep going
                failures[type(exc).__name__] += 1
        flushed = ragmon.force_flush(timeout_s=10.0)
        exported = ragmon.stats().get("exported", 0)  # before shutdown, which forgets the exporter's counters
    finally:
        ragmon.shutdown(timeout_s=5.0)
        provider.shutdown()
    spans = sorted(memory.get_finished_spans(), key=lambda s: s.start_time or 0)
    print_report(spans, out=out, show_spans=show_spans)
    print(
        f"\n{requests} requests, {sum(failures.values())} failed"
        + (f" ({', '.join(f'{k} x{v}' for k, v in sorted(failures.items()))})" if failures else "")
        + ("" if flushed else "; WARNING: not every span was flushed"),
        file=out,
    )
    if endpoint:
        print(f"exported {exported} spans to {endpoint}", file=out)
    return 0


# --- the report --------------------------------------------------------------------------------------------------
def _stage(span: ReadableSpan) -> str:
    stage = attr.stage_of(span.attributes)
    return str(stage) if stage in STAGE_ORDER else "other"


def _duration_ms(span: ReadableSpan) -> float:
    return ((span.end_time or 0) - (span.start_time or 0)) / 1e6


def _cost(a: Mapping[str, Any]) -> float | None:
    value = a.get(attr.OI_COST_TOTAL, a.get(attr.RAGMON_COST_USD))
    return None if value is None else float(value)


def _row(span: ReadableSpan) -> list[str]:
    a: Mapping[str, Any] = span.attributes or {}
    stage = _stage(span)
    tokens_in, tokens_out = a.get(attr.GEN_AI_USAGE_INPUT_TOKENS), a.get(attr.GEN_AI_USAGE_OUTPUT_TOKENS)
    tokens = f"{tokens_in or 0}/{tokens_out}" if tokens_out is not None else str(tokens_in or "-")
    cost = _cost(a)
    cost_text = "?" if a.get(attr.RAGMON_COST_UNKNOWN_MODEL) else ("-" if cost is None else f"{cost:.6f}")
    top1, gap = a.get(attr.RAGMON_TOP1_SCORE), a.get(attr.RAGMON_SIMILARITY_GAP)
    retrieval = "-" if top1 is None else f"{float(top1):.2f}/{float(gap or 0.0):.2f}"
    failed = span.status.status_code is StatusCode.ERROR
    notes = []
    if failed:
        notes.append(str(a.get(attr.ERROR_TYPE, "error")))
    deviation = a.get(attr.RAGMON_QUERY_NORM_DEVIATION)
    if stage == "embed" and deviation is not None and float(deviation) > 0.01:
        notes.append(f"norm dev {float(deviation):.2f}")
    if attr.RAGMON_TTFT_MS in a:
        notes.append(f"ttft {float(a[attr.RAGMON_TTFT_MS]):.1f} ms")
    if stage == "request":
        notes.append(str(a.get(attr.RAGMON_FEATURE, "")))
        notes.extend(str(f) for f in a.get(INJECTED_FAULTS_ATTRIBUTE, ()))
    return [
        format(span.context.trace_id, "032x")[:8] if span.context else "-",
        stage,
        span.name[:32],
        f"{_duration_ms(span):.1f}",
        str(a.get(attr.GEN_AI_REQUEST_MODEL, "-"))[:24],
        tokens,
        cost_text,
        retrieval,
        "ERROR" if failed else "ok",
        ", ".join(n for n in notes if n),
    ]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO, numeric: set[int]) -> None:
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    print(line(header), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for row in rows:
        print(line(row), file=out)


def print_report(spans: Sequence[ReadableSpan], *, out: TextIO = sys.stdout, show_spans: bool = True) -> None:
    """The span table (trace order, each trace's spans by start time) and the per-stage summary."""
    if show_spans:
        by_trace: dict[int, list[ReadableSpan]] = defaultdict(list)
        for span in spans:
            by_trace[span.context.trace_id if span.context else 0].append(span)
        rows = [_row(s) for trace in by_trace.values() for s in sorted(trace, key=lambda s: s.start_time or 0)]
        header = ["trace", "stage", "name", "ms", "model", "tokens", "cost $", "top1/gap", "status", "note"]
        _table(header, rows, out, numeric={3, 5, 6, 7})
        print(file=out)
    summary = []
    by_stage: dict[str, list[ReadableSpan]] = defaultdict(list)
    for span in spans:
        by_stage[_stage(span)].append(span)
    for stage in STAGE_ORDER:
        group = by_stage.get(stage)
        if not group:
            continue
        durations = np.array([_duration_ms(s) for s in group])
        costs = [c for c in (_cost(s.attributes or {}) for s in group) if c is not None]
        errors = sum(s.status.status_code is StatusCode.ERROR for s in group)
        summary.append(
            [
                stage,
                str(len(group)),
                str(errors),
                f"{np.percentile(durations, 50):.1f}",
                f"{np.percentile(durations, 95):.1f}",
                f"{sum(costs):.6f}" if costs else "-",
            ]
        )
    print("the app's own spans, per stage (before they reach the agent):", file=out)
    _table(["stage", "spans", "errors", "p50 ms", "p95 ms", "cost $"], summary, out, numeric={1, 2, 3, 4, 5})
    if all(_cost(s.attributes or {}) in (None, 0.0) for s in spans):
        print(
            "cost $ 0: the demo's embedder and generator run locally and are free (--llm-base-url prices a real model)",
            file=out,
        )
