"""What the third-party RAG apps share: the documents, the questions with their scripted LLM replies, a local
bag-of-words embedding the scripted server answers with, the OpenTelemetry SDK set-up, and the app's run loop.

Each app (`langchain_app`, `llamaindex_app`, `openai_app`) is a subprocess, one per instrumentation (they patch
globally), run from the repository root::

    python -m tests.thirdparty.apps.langchain_app openinference --base-url URL --otlp URL --results FILE

It answers the questions one after the other and writes ``--results``: per question the answer (or the error),
the ids of the traces whose spans ended while it was being answered and how many spans did (a side channel: a
span processor that only looks, so the test can tell which stored trace is which request without reading what
the instrumentation sent), and how many spans ended in all. ``--dump FILE`` replaces the OTLP exporter with an
in-memory one and writes every finished span, with all its attributes and events, as JSON
(tests/thirdparty/dump_spans.py).

This module is imported by the test process too (for the documents, questions and `scripted_reply`), so it
imports nothing beyond the standard library, OpenTelemetry and `ragmon.testing` at the top.
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import json
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor

from ragmon.testing import Completion, EmbeddingsReply, ErrorReply, Reply

CHAT_MODEL = "gpt-4o-mini"  # in ragmon/data/prices.json: spans get a cost
EMBEDDING_MODEL = "text-embedding-3-small"
EMBEDDING_DIMENSIONS = 64
RETRIEVE_TOP_K = 2
API_KEY = "sk-test"  # the scripted server takes any key

# --- the corpus ----------------------------------------------------------------------------------------------
DOCUMENTS: tuple[tuple[str, str], ...] = (
    (
        "thermostat.md",
        "The Aurora X2 thermostat connects over Wi-Fi and Zigbee. It learns the household schedule within a week.",
    ),
    (
        "warranty.md",
        "Every Aurora device carries a two-year limited warranty. Water damage is not covered by the warranty.",
    ),
    (
        "battery.md",
        "The Aurora door sensor runs on one CR2032 coin battery. A fresh battery lasts about eighteen months.",
    ),
    (
        "reset.md",
        "To factory reset the Aurora hub, hold the pairing button for ten seconds until the ring blinks amber.",
    ),
    (
        "privacy.md",
        "Aurora stores camera clips in the Frankfurt data centre for thirty days. Clips are encrypted at rest.",
    ),
    (
        "returns.md",
        "Unopened Aurora products can be returned within sixty days of delivery for a full refund.",
    ),
)


@dataclass(frozen=True)
class Question:
    """One user request and how the scripted LLM answers it. `answer` None: the LLM call fails (HTTP 500)."""

    id: str
    text: str
    answer: str | None
    prompt_tokens: int
    completion_tokens: int
    kind: str  # copied: the answer is a passage's sentence; invented: a claim absent from every document; ...
    source: str  # the document that answers it (retrieval should bring it)

    def reply(self) -> Reply:
        if self.answer is None:
            return ErrorReply(500)
        return Completion(
            self.answer, prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens, model=CHAT_MODEL
        )


QUESTIONS: tuple[Question, ...] = (
    Question(
        "q1",
        "Which wireless protocols does the Aurora X2 thermostat use?",
        "The Aurora X2 thermostat connects over Wi-Fi and Zigbee.",
        231,
        12,
        "copied",
        "thermostat.md",
    ),
    Question(
        "q2",
        "How long is the warranty on Aurora devices?",
        "Aurora devices come with a lifetime warranty that includes free yearly on-site servicing by a technician.",
        244,
        19,
        "invented",
        "warranty.md",
    ),
    Question(
        "q3",
        "Which battery does the Aurora door sensor need?",
        "The Aurora door sensor runs on one CR2032 coin battery.",
        219,
        11,
        "copied",
        "battery.md",
    ),
    Question(
        "q4",
        "How do I factory reset the Aurora hub?",
        "Hold the pairing button for ten seconds until the ring blinks amber.",
        226,
        14,
        "paraphrased",
        "reset.md",
    ),
    Question(
        "q5",
        "Can I return an unopened Aurora product?",
        "Unopened Aurora products can be returned within sixty days of delivery for a full refund.",
        252,
        17,
        "copied",
        "returns.md",
    ),
    Question(
        "q6",
        "Where are Aurora camera clips stored?",
        None,  # the LLM call fails (HTTP 500, no retry): an error trace. Last, because OpenLLMetry's LlamaIndex
        # instrumentation never ends the spans of a failed query and the next query would nest inside them
        238,
        0,
        "error",
        "privacy.md",
    ),
)


def question_by_id(question_id: str) -> Question:
    return next(q for q in QUESTIONS if q.id == question_id)


def document_text(doc_id: str) -> str:
    return dict(DOCUMENTS)[doc_id]


# --- the scripted LLM and embeddings --------------------------------------------------------------------------
_STOPWORDS = frozenset(
    re.findall(
        r"\w+",
        "a an and are can do does every for how i in is it of on one or the to until use which with within where what "
        "by be not",
    )
)


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOPWORDS]


def embed(text: str) -> list[float]:
    """A deterministic bag-of-words vector (signed feature hashing): texts sharing content words are close, so
    the vector stores retrieve the document that answers each question."""
    vector = [0.0] * EMBEDDING_DIMENSIONS
    for word in _words(text):
        digest = hashlib.sha256(word.encode()).digest()
        vector[digest[0] % EMBEDDING_DIMENSIONS] += 1.0 if digest[1] % 2 else -1.0
    vector[-1] += 0.01  # never the zero vector
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


def scripted_reply(request: Any) -> Reply:
    """The scripted server's reply to any request of the apps: embeddings by `embed`, chat completions by the
    question found in the messages. A request naming no known question raises (the server answers 500 and keeps
    the error in ``server.handler_errors``, which the tests check is empty)."""
    if not isinstance(request, dict):
        raise ValueError(f"not a JSON object: {request!r}")
    if "input" in request:
        raw = request["input"]
        inputs = [raw] if isinstance(raw, str) else list(raw)
        if not all(isinstance(x, str) for x in inputs):
            raise ValueError("embedding inputs must be strings (token ids mean a tokenizer ran: nothing may download)")
        return EmbeddingsReply(vectors=[embed(x) for x in inputs], prompt_tokens=sum(len(x.split()) for x in inputs))
    if "messages" in request:
        flat = json.dumps(request["messages"], ensure_ascii=False)
        matches = [q for q in QUESTIONS if q.text in flat]
        if len(matches) != 1:
            raise ValueError(f"expected one known question in the messages, found {len(matches)}: {flat[:300]}")
        return matches[0].reply()
    raise ValueError(f"unscripted request with keys {sorted(request)}")


def lexical_retrieve(question: str, k: int = RETRIEVE_TOP_K) -> list[tuple[str, str]]:
    """The openai-only app's own retrieval: documents ranked by shared content words (no embedding call)."""
    asked = set(_words(question))
    ranked = sorted(DOCUMENTS, key=lambda doc: (-len(asked & set(_words(doc[1]))), doc[0]))
    return list(ranked[:k])


def format_context(documents: Sequence[tuple[str, str]]) -> str:
    return "\n\n".join(f"[{doc_id}] {text}" for doc_id, text in documents)


# --- no network beyond loopback -------------------------------------------------------------------------------
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", ""})


def _is_loopback(host: Any) -> bool:
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if not isinstance(host, str) or host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def forbid_outside_network() -> None:
    """Fail any connection or name lookup beyond loopback: a library that downloads at run time (tiktoken
    encodings, NLTK data, a model from a hub, telemetry) makes the app fail loudly instead of hanging or passing
    on a developer's machine that happens to be online."""

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "socket.getaddrinfo" and not _is_loopback(args[0]):
            raise RuntimeError(f"network access outside loopback is forbidden in these apps: lookup of {args[0]!r}")
        if event == "socket.connect":
            address = args[1]
            if isinstance(address, tuple) and address and not _is_loopback(address[0]):
                raise RuntimeError(f"network access outside loopback is forbidden in these apps: {address!r}")

    sys.addaudithook(hook)


def offline_environment() -> None:
    """Variables that keep libraries from reaching out (set before they are imported)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("LANGCHAIN_TRACING_V2", "false")
    os.environ.setdefault("LANGSMITH_TRACING", "false")
    os.environ.setdefault("TRACELOOP_TELEMETRY", "false")
    os.environ.setdefault("OPENAI_API_KEY", API_KEY)
    # The OpenTelemetry SDK's own variables must not send anything elsewhere (metrics and logs are not set up).
    os.environ.setdefault("OTEL_METRICS_EXPORTER", "none")
    os.environ.setdefault("OTEL_LOGS_EXPORTER", "none")


# --- tracing ---------------------------------------------------------------------------------------------------
class SpanLog(SpanProcessor):
    """A span processor that only looks: the trace id of every span as it ends (and whether it was a root), so
    `run_questions` can say which traces a request made. It sees what the exporter is handed, nothing more: a
    span an instrumentation never ends is never exported, and is not counted here either."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ended: list[tuple[str, bool]] = []
        self.total = 0

    def on_end(self, span: Any) -> None:
        with self._lock:
            self._ended.append((format(span.context.trace_id, "032x"), span.parent is None))
            self.total += 1

    def take(self) -> list[tuple[str, bool]]:
        with self._lock:
            out, self._ended = self._ended, []
        return out


@dataclass
class Tracing:
    provider: Any  # opentelemetry.sdk.trace.TracerProvider
    log: SpanLog
    memory: Any = None  # InMemorySpanExporter in --dump mode

    def finish(self, dump: Path | None, meta: dict[str, Any]) -> None:
        """Flush and shut down (the batch processor sends what it holds); in dump mode write the spans."""
        self.provider.force_flush(30_000)
        if dump is not None and self.memory is not None:
            spans = [span_to_dict(s) for s in self.memory.get_finished_spans()]
            dump.parent.mkdir(parents=True, exist_ok=True)
            dump.write_text(json.dumps({**meta, "spans": spans}, indent=1, ensure_ascii=False, default=str) + "\n")
        self.provider.shutdown()


def setup_tracing(service_name: str, otlp_endpoint: str | None, dump: Path | None) -> Tracing:
    """The OTel SDK as an app sets it up: a global TracerProvider, a BatchSpanProcessor and the OTLP/HTTP
    (protobuf) exporter to the agent; or, with `dump`, an in-memory exporter."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    log = SpanLog()
    provider.add_span_processor(log)
    memory = None
    if dump is not None:
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        memory = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(memory))
    else:
        if not otlp_endpoint:
            raise SystemExit("--otlp (or RAGMON_TP_OTLP) or --dump is required")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=f"{otlp_endpoint.rstrip('/')}/v1/traces", timeout=10)
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))
    trace.set_tracer_provider(provider)
    return Tracing(provider, log, memory)


def uses_openai_instrumentor(vendor: str, choice: str) -> bool:
    """Whether a framework app also instruments the openai client. `auto` does what each vendor's documented
    set-up does: OpenLLMetry's ``Traceloop.init()`` instruments every library it finds, and its LlamaIndex
    instrumentation leaves OpenAI LLM calls to the openai instrumentor (it makes no LLM span of its own);
    OpenInference's LangChain and LlamaIndex guides instrument the framework only (its framework instrumentors
    make the LLM and embedding spans, and do not attach their context, so openai spans would start new traces)."""
    if choice == "auto":
        return vendor == "openllmetry"
    return choice == "on"


def instrument_openai(vendor: str, provider: Any) -> None:
    """The openai client's instrumentor of a vendor: openinference, openllmetry (Traceloop's) or genai (the
    official opentelemetry-instrumentation-openai-v2)."""
    if vendor == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)
    elif vendor == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as TraceloopOpenAIInstrumentor

        TraceloopOpenAIInstrumentor().instrument(tracer_provider=provider)
    elif vendor == "genai":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as GenAIOpenAIInstrumentor

        GenAIOpenAIInstrumentor().instrument(tracer_provider=provider)
    else:
        raise ValueError(f"unknown openai instrumentation {vendor!r}")


def span_to_dict(span: Any) -> dict[str, Any]:
    """Everything a finished span says, as plain JSON values."""
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": format(span.context.trace_id, "032x"),
        "span_id": format(span.context.span_id, "016x"),
        "parent_span_id": format(parent.span_id, "016x") if parent is not None else None,
        "kind": span.kind.name,
        "status": {"code": span.status.status_code.name, "description": span.status.description},
        "start_time_ns": span.start_time,
        "duration_ms": round((span.end_time - span.start_time) / 1e6, 3),
        "scope": span.instrumentation_scope.name if span.instrumentation_scope else None,
        "attributes": {k: _plain(v) for k, v in (span.attributes or {}).items()},
        "events": [
            {"name": e.name, "attributes": {k: _plain(v) for k, v in (e.attributes or {}).items()}} for e in span.events
        ],
        "links": len(span.links),
    }


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple | list) else value


# --- the app's run loop -----------------------------------------------------------------------------------------
def parse_args(app: str, instrumentations: Sequence[str], argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=app, description=f"the {app} RAG app, traced by a third-party library")
    parser.add_argument("instrumentation", choices=list(instrumentations))
    parser.add_argument("--base-url", default=os.environ.get("RAGMON_TP_BASE_URL"), help="the OpenAI-compatible API")
    parser.add_argument("--otlp", default=os.environ.get("RAGMON_TP_OTLP"), help="OTLP/HTTP base URL (the agent)")
    parser.add_argument("--dump", type=Path, help="write the spans as JSON here instead of exporting them")
    parser.add_argument("--results", type=Path, help="write what each question got and made here (JSON)")
    parser.add_argument("--questions", default="", help="comma-separated question ids (default: all)")
    if app != "openai_app":
        parser.add_argument(
            "--openai-instrumentor",
            choices=("auto", "on", "off"),
            default=os.environ.get("RAGMON_TP_OPENAI_INSTRUMENTOR", "auto"),
            help="also instrument the openai client with the same vendor's instrumentor (auto: on for OpenLLMetry)",
        )
    args = parser.parse_args(argv)
    if app != "openai_app":
        args.openai_instrumentor = uses_openai_instrumentor(args.instrumentation, args.openai_instrumentor)
    if not args.base_url:
        parser.error("--base-url (or RAGMON_TP_BASE_URL) is required")
    return args


def selected_questions(spec: str) -> list[Question]:
    if not spec:
        return list(QUESTIONS)
    return [question_by_id(q.strip()) for q in spec.split(",") if q.strip()]


def run_questions(
    answer: Callable[[str], str], questions: Sequence[Question], tracing: Tracing, results: Path | None
) -> int:
    """Answer each question as the service would (an exception is the request's failure, not the app's), note
    which traces it made, and write ``--results``: one JSON document with a record per question and the number
    of spans that ended in all (indexing included). Returns the number of failed requests."""
    failures = 0
    records = []
    tracing.log.take()  # indexing happened before: not a request's
    for question in questions:
        started = time.monotonic()
        error = None
        text = None
        try:
            text = answer(question.text)
        except Exception as exc:  # a failed request: the service answers 500 and goes on
            error = f"{type(exc).__name__}: {exc}"
            failures += 1
        ended = tracing.log.take()
        records.append(
            {
                "id": question.id,
                "question": question.text,
                "answer": text,
                "error": error,
                "trace_ids": sorted({trace_id for trace_id, _ in ended}),
                "spans": len(ended),
                "root_spans": sum(1 for _, root in ended if root),
                "duration_s": round(time.monotonic() - started, 3),
            }
        )
    if results is not None:
        results.parent.mkdir(parents=True, exist_ok=True)
        document = {"spans_ended": tracing.log.total, "questions": records}
        results.write_text(json.dumps(document, indent=1) + "\n")
    return failures
