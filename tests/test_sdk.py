"""The SDK's spans: parenting, every stage's attributes, cost, health figures, errors, no-op before configure."""

from __future__ import annotations

import asyncio
import json
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import ragmon
from ragmon import attributes as attr
from ragmon.pricing import default_price_table
from tests.conftest import stage_of

PRICES = json.loads((Path(ragmon.__file__).parent / "data" / "prices.json").read_text())["models"]


def _one_request(question: str = "how do I install ragmon?") -> None:
    with ragmon.request("docs-qa", user="u-1", session="s-9", question=question) as req:
        with ragmon.embed("text-embedding-3-small", provider="openai") as e:
            e.record(input_tokens=8, vectors=[0.6, 0.8])
        with ragmon.search(top_k=3, data_source="docs", query=question) as s:
            s.record(
                documents=[("d1", 0.9, "pip install ragmon"), {"id": "d2", "score": 0.7, "text": "t2"}, ("d3", 0.4)],
                query_vector=[0.6, 0.8],
                index_vectors=[[1.0, 0.0], [0.0, 2.0]],
            )
        with ragmon.rerank("rerank-v3.5", provider="cohere", top_k=2) as r:
            r.record(input_ids=["d1", "d2", "d3"], documents=[ragmon.Document("d2", 0.95), ragmon.Document("d1", 0.5)])
        with ragmon.generate("gpt-4o-mini", provider="openai") as g:
            g.record(
                input_tokens=1200, output_tokens=80, cached_input_tokens=200, answer="Run pip.", finish_reason="stop"
            )
        req.record(answer="Run pip.")


def test_every_api_is_a_noop_before_configure() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _one_request()
    with ragmon.tool("calc", arguments={"x": 1}) as t:
        t.record(result=2)
        assert not t.recording and t.trace_id is None
    assert exporter.get_finished_spans() == ()
    assert ragmon.stats()["configured"] is False
    assert ragmon.force_flush() is True


def test_one_trace_with_stage_spans_parented_to_the_request(captured) -> None:
    cap = captured()
    _one_request()
    spans = cap.spans()
    assert len(spans) == 5
    assert len({s.context.trace_id for s in spans}) == 1
    root = next(s for s in spans if s.parent is None)
    assert root.name == "request docs-qa"
    assert root.attributes[attr.RAGMON_STAGE] == "request"
    assert root.attributes[attr.RAGMON_USER] == "u-1" and root.attributes[attr.RAGMON_SESSION] == "s-9"
    for span in spans:
        if span is not root:
            assert span.parent.span_id == root.context.span_id
            # the request's feature rides on every span, so each row groups by feature as it arrives
            assert span.attributes[attr.RAGMON_FEATURE] == "docs-qa"
            assert attr.RAGMON_USER not in span.attributes  # per-trace facts stay on the root
    assert [stage_of(s) for s in sorted(spans, key=lambda s: s.start_time)] == [
        "request",
        "embed",
        "search",
        "rerank",
        "generate",
    ]


def test_stage_attributes_follow_otel_genai_names(captured) -> None:
    cap = captured()
    _one_request()
    stages = cap.by_stage()
    embed = stages["embed"]
    assert embed.name == "embeddings text-embedding-3-small"
    assert embed.kind is SpanKind.CLIENT
    assert embed.attributes[attr.GEN_AI_OPERATION_NAME] == "embeddings"
    assert embed.attributes[attr.GEN_AI_REQUEST_MODEL] == "text-embedding-3-small"
    assert embed.attributes[attr.GEN_AI_PROVIDER_NAME] == "openai"
    assert embed.attributes[attr.GEN_AI_USAGE_INPUT_TOKENS] == 8
    assert attr.RAGMON_EMBEDDING_COUNT not in embed.attributes  # one vector: nothing to say

    search = stages["search"]
    assert search.attributes[attr.GEN_AI_OPERATION_NAME] == "retrieval"
    assert search.attributes[attr.GEN_AI_REQUEST_TOP_K] == 3
    assert search.attributes[attr.GEN_AI_DATA_SOURCE_ID] == "docs"
    assert json.loads(search.attributes[attr.GEN_AI_RETRIEVAL_DOCUMENTS]) == [
        {"id": "d1", "score": 0.9},
        {"id": "d2", "score": 0.7},
        {"id": "d3", "score": 0.4},
    ]

    rerank = stages["rerank"]
    assert rerank.attributes[attr.GEN_AI_REQUEST_MODEL] == "rerank-v3.5"
    assert rerank.attributes[attr.GEN_AI_REQUEST_TOP_K] == 2
    assert rerank.attributes[attr.RAGMON_RERANK_INPUT_IDS] == ("d1", "d2", "d3")
    assert json.loads(rerank.attributes[attr.GEN_AI_RETRIEVAL_DOCUMENTS]) == [
        {"id": "d2", "score": 0.95},
        {"id": "d1", "score": 0.5},
    ]
    assert attr.RAGMON_SEARCH_UNITS not in rerank.attributes  # the default unit is priced, not recorded

    gen = stages["generate"]
    assert gen.name == "chat gpt-4o-mini"
    assert gen.attributes[attr.GEN_AI_USAGE_INPUT_TOKENS] == 1200
    assert gen.attributes[attr.GEN_AI_USAGE_OUTPUT_TOKENS] == 80
    assert gen.attributes[attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 200
    assert gen.attributes[attr.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    for span in stages.values():
        assert span.status.status_code is StatusCode.UNSET


def test_documents_json_is_exactly_what_json_dumps_writes(captured) -> None:
    # ragmon writes this JSON piece by piece (for speed); readers expect json.dumps' text, byte for byte.
    class Hit:
        def __init__(self, id: object, score: object) -> None:
            self.id, self.score = id, score

    documents = [
        ("plain", 0.5),
        ('quote " and \\ backslash', -0.0),
        ("ünïcode 漢字 🙂", 1e-300),
        ("control \n\t\x00", float("nan")),
        {"id": 42, "score": 3},  # a non-str id and an int score, coerced as before
        Hit("inf", float("inf")),
        ["-inf", float("-inf")],
        ("big", 1.7976931348623157e308),
    ]
    cap = captured()
    with ragmon.request("docs-qa"), ragmon.search() as s:
        s.record(documents=documents)
    expected = json.dumps(
        [
            {"id": str(d["id"] if isinstance(d, dict) else d.id if isinstance(d, Hit) else d[0]),
             "score": float(d["score"] if isinstance(d, dict) else d.score if isinstance(d, Hit) else d[1])}
            for d in documents
        ]
    )  # fmt: skip
    assert cap.by_stage()["search"].attributes[attr.GEN_AI_RETRIEVAL_DOCUMENTS] == expected


def test_documents_record_their_paragraph_or_source(captured) -> None:
    # A 4th tuple element, a mapping's "source", an object's `source` attribute: each becomes the entry's "source"
    # (json.dumps' text, byte for byte); a document without one has no "source" entry at all.
    class Hit:
        def __init__(self, id: str, score: float, source: str | None) -> None:
            self.id, self.score, self.source = id, score, source

    documents = [
        ("c1", 0.9, "text one", "refunds.md#p3"),
        ["c2", 0.8, None, "refunds.md#p4"],
        {"id": "c3", "score": 0.7, "source": "faq \"quoted\" ünï"},
        ragmon.Document("c4", 0.6, source="install.md#p1"),
        Hit("c5", 0.5, "pricing.md#p2"),
        ("c6", 0.4),
        Hit("c7", 0.3, None),
    ]
    cap = captured()
    with ragmon.request("docs-qa"), ragmon.search() as s:
        s.record(documents=documents)
    with ragmon.rerank("m") as r:
        r.record(documents=[("c1", 0.99, None, "refunds.md#p3")])
    sources = ["refunds.md#p3", "refunds.md#p4", 'faq "quoted" ünï', "install.md#p1", "pricing.md#p2", None, None]
    expected = json.dumps(
        [
            {"id": f"c{i + 1}", "score": score, **({"source": source} if source is not None else {})}
            for i, (score, source) in enumerate(zip((0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3), sources, strict=True))
        ]
    )
    assert cap.by_stage()["search"].attributes[attr.GEN_AI_RETRIEVAL_DOCUMENTS] == expected
    reranked = cap.by_stage()["rerank"].attributes[attr.GEN_AI_RETRIEVAL_DOCUMENTS]
    assert json.loads(reranked) == [{"id": "c1", "score": 0.99, "source": "refunds.md#p3"}]


def test_retrieval_health_rank1_score_gap_and_norms(captured) -> None:
    cap = captured()
    _one_request()
    search = cap.by_stage()["search"]
    assert search.attributes[attr.RAGMON_TOP1_SCORE] == 0.9
    # fewer than 10 results: the gap is rank-1 minus the last
    assert search.attributes[attr.RAGMON_SIMILARITY_GAP] == pytest.approx(0.9 - 0.4)
    assert search.attributes[attr.RAGMON_QUERY_NORM_DEVIATION] == pytest.approx(0.0, abs=1e-12)
    assert search.attributes[attr.RAGMON_INDEX_NORM_DEVIATION] == pytest.approx(1.0)  # the [0, 2] vector


def test_a_query_vector_measured_by_embed_is_not_recorded_again_by_search(captured) -> None:
    cap = captured()
    vector = [0.6, 0.8]
    for _ in range(2):  # the same (cached) vector object in two requests: measured in each
        with ragmon.request("qa"):
            with ragmon.embed("text-embedding-3-small") as e:
                e.record(input_tokens=2, vectors=vector)
            with ragmon.search() as s:
                s.record(documents=[("d", 0.5)], query_vector=vector)
    with ragmon.request("qa"), ragmon.search() as s:  # no embed span this time: search measures it
        s.record(documents=[("d", 0.5)], query_vector=vector)
    by_stage = [(stage_of(s), attr.RAGMON_QUERY_NORM_DEVIATION in s.attributes) for s in cap.spans()]
    assert by_stage.count(("embed", True)) == 2
    assert by_stage.count(("search", False)) == 2 and by_stage.count(("search", True)) == 1


def test_similarity_gap_uses_rank_ten(captured) -> None:
    cap = captured()
    scores = [1.0 - i * 0.05 for i in range(15)]
    with ragmon.search() as s:
        s.record(documents=[(f"d{i}", score) for i, score in enumerate(scores)])
    span = cap.spans()[0]
    assert span.attributes[attr.RAGMON_SIMILARITY_GAP] == pytest.approx(scores[0] - scores[9])


def test_unnormalised_query_vectors_show_as_norm_deviation(captured) -> None:
    np = pytest.importorskip("numpy")
    cap = captured()
    vector = np.full(384, 0.1)  # norm sqrt(3.84) ≈ 1.96: the forgotten-normalisation bug
    with ragmon.embed("all-MiniLM-L6-v2") as e:
        e.record(input_tokens=5, vectors=np.stack([vector, vector]))
    span = cap.spans()[0]
    assert span.attributes[attr.RAGMON_QUERY_NORM_DEVIATION] == pytest.approx(math.sqrt(3.84) - 1.0)
    assert span.attributes[attr.RAGMON_EMBEDDING_COUNT] == 2


def test_cost_is_exact_to_the_price_table(captured) -> None:
    cap = captured()
    _one_request()
    stages = cap.by_stage()
    mini = PRICES["gpt-4o-mini"]
    expected = (1000 * mini["input_per_1m"] + 200 * mini["cached_input_per_1m"] + 80 * mini["output_per_1m"]) / 1e6
    assert stages["generate"].attributes[attr.OI_COST_TOTAL] == pytest.approx(expected, rel=1e-12)
    assert stages["embed"].attributes[attr.OI_COST_TOTAL] == pytest.approx(
        8 * PRICES["text-embedding-3-small"]["input_per_1m"] / 1e6, rel=1e-12
    )
    assert stages["rerank"].attributes[attr.OI_COST_TOTAL] == pytest.approx(PRICES["rerank-v3.5"]["per_search_unit"])
    assert attr.RAGMON_COST_UNKNOWN_MODEL not in stages["generate"].attributes


def test_unknown_model_has_no_cost_and_a_flag(captured) -> None:
    cap = captured()
    with ragmon.generate("my-private-llm") as g:
        g.record(input_tokens=10, output_tokens=5)
    with ragmon.generate("gpt-4o-mini") as g:
        g.record(answer="no usage reported")
    unknown, no_usage = cap.spans()
    assert attr.OI_COST_TOTAL not in unknown.attributes
    assert unknown.attributes[attr.RAGMON_COST_UNKNOWN_MODEL] is True
    # no usage at all: nothing to price, and not an unknown model either
    assert attr.OI_COST_TOTAL not in no_usage.attributes
    assert attr.RAGMON_COST_UNKNOWN_MODEL not in no_usage.attributes


def test_dated_and_prefixed_model_names_find_their_price() -> None:
    table = default_price_table()
    assert table.cost_usd("gpt-4o-mini-2024-07-18", 1_000_000) == pytest.approx(PRICES["gpt-4o-mini"]["input_per_1m"])
    assert table.cost_usd("openai/gpt-4o", 0, 1_000_000) == pytest.approx(PRICES["gpt-4o"]["output_per_1m"])
    assert table.cost_usd("gpt-4o-mini-turbo-x", 10) is None


def test_price_file_overrides_and_extends(captured, tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    my_llm = {"input_per_1m": 1.0, "output_per_1m": 2.0}
    prices.write_text(json.dumps({"version": "mine", "models": {"my-llm": my_llm}}))
    cap = captured(price_file=prices)
    with ragmon.generate("my-llm") as g:
        g.record(input_tokens=1_000_000, output_tokens=500_000)
    assert cap.spans()[0].attributes[attr.OI_COST_TOTAL] == pytest.approx(2.0)


def test_broken_price_file_never_raises_into_the_app(captured, tmp_path: Path) -> None:
    broken = tmp_path / "prices.json"
    broken.write_text("{ not json")
    cap = captured(price_file=broken)
    with ragmon.generate("gpt-4o-mini") as g:
        g.record(input_tokens=1000)
    span = cap.spans()[0]
    assert span.attributes[attr.OI_COST_TOTAL] == pytest.approx(1000 * PRICES["gpt-4o-mini"]["input_per_1m"] / 1e6)
    assert "cannot read price file" in ragmon.stats()["price_file_error"]


def test_exception_marks_the_span_error_and_propagates(captured) -> None:
    cap = captured()
    with pytest.raises(TimeoutError, match="vector db"), ragmon.request("docs-qa"), ragmon.search():
        raise TimeoutError("vector db timed out")
    search, root = cap.spans()
    for span in (search, root):
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes[attr.ERROR_TYPE] == "TimeoutError"
    assert search.events[0].name == "exception"


def test_tool_span_records_name_arguments_and_status(captured) -> None:
    cap = captured(capture_content=True)
    with ragmon.tool("lookup_version", arguments={"package": "ragmon"}) as t:
        t.record(result={"version": "0.1.0"})
    with ragmon.tool("calculator", arguments="1/0") as t:
        t.record(status="division_by_zero")
    ok, failed = cap.spans()
    assert ok.name == "execute_tool lookup_version"
    assert ok.attributes[attr.GEN_AI_TOOL_NAME] == "lookup_version"
    assert json.loads(ok.attributes[attr.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"package": "ragmon"}
    assert json.loads(ok.attributes[attr.GEN_AI_TOOL_CALL_RESULT]) == {"version": "0.1.0"}
    assert ok.attributes[attr.RAGMON_TOOL_STATUS] == "ok"
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes[attr.ERROR_TYPE] == "tool_error"
    assert failed.attributes[attr.RAGMON_TOOL_STATUS] == "division_by_zero"


def test_streaming_records_time_to_first_token(captured) -> None:
    cap = captured()
    with ragmon.generate("gpt-4o-mini") as g:
        chunks = list(g.stream(iter(["Hel", "lo", "!"])))
        g.record(output_tokens=3)
    assert chunks == ["Hel", "lo", "!"]
    span = cap.spans()[0]
    duration_ms = (span.end_time - span.start_time) / 1e6
    assert 0 <= span.attributes[attr.RAGMON_TTFT_MS] <= duration_ms
    assert span.attributes[attr.RAGMON_STREAMED_CHUNKS] == 3
    assert span.attributes[attr.RAGMON_INTER_TOKEN_MS] >= 0


def test_content_is_not_captured_by_default(captured) -> None:
    cap = captured()
    _one_request("what is my password?")
    for span in cap.spans():
        for key in (
            attr.RAGMON_QUESTION,
            attr.RAGMON_ANSWER,
            attr.RAGMON_DOCUMENT_TEXTS,
            attr.GEN_AI_OUTPUT_MESSAGES,
            attr.GEN_AI_RETRIEVAL_QUERY_TEXT,
        ):
            assert key not in span.attributes


def test_content_capture_follows_the_otel_variable(captured, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    cap = captured()
    _one_request("where are the docs?")
    stages = cap.by_stage()
    assert stages["request"].attributes[attr.RAGMON_QUESTION] == "where are the docs?"
    assert stages["request"].attributes[attr.RAGMON_ANSWER] == "Run pip."
    assert stages["search"].attributes[attr.RAGMON_DOCUMENT_TEXTS] == ("pip install ragmon", "t2", "")
    assert stages["search"].attributes[attr.GEN_AI_RETRIEVAL_QUERY_TEXT] == "where are the docs?"
    output = json.loads(stages["generate"].attributes[attr.GEN_AI_OUTPUT_MESSAGES])
    assert output[0]["parts"][0]["content"] == "Run pip."


def test_redaction_hook_runs_before_anything_leaves_and_fails_closed(captured) -> None:
    def redact(key: str, text: str) -> str:
        if "boom" in text:
            raise RuntimeError("hook bug")
        return text.replace("alice@example.com", "[email]")

    cap = captured(capture_content=True, redact=redact)
    with ragmon.request("support", question="mail alice@example.com") as req:
        req.record(answer="boom")
    span = cap.spans()[0]
    assert span.attributes[attr.RAGMON_QUESTION] == "mail [email]"
    assert attr.RAGMON_ANSWER not in span.attributes  # the hook failed: the text is dropped, not sent raw
    assert ragmon.stats()["problems"]["redaction_errors"] == 1


def test_spans_parent_across_threads_and_asyncio_tasks(captured) -> None:
    cap = captured()

    def search_in_thread(i: int) -> None:
        with ragmon.search(data_source=f"shard-{i}") as s:
            s.record(documents=[(f"d{i}", 0.5)])

    async def embed_in_task(i: int) -> None:
        async with ragmon.embed("text-embedding-3-small") as e:
            await asyncio.sleep(0)
            e.record(input_tokens=i)

    async def fan_out() -> None:
        await asyncio.gather(*(embed_in_task(i) for i in range(3)))

    with ragmon.request("fan-out"), ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(ragmon.bind_context(search_in_thread), range(3)))
        asyncio.run(fan_out())
    spans = cap.spans()
    root = next(s for s in spans if s.parent is None)
    children = [s for s in spans if s is not root]
    assert len(children) == 6
    assert {s.parent.span_id for s in children} == {root.context.span_id}
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}


async def test_async_context_managers_and_decorators(captured) -> None:
    cap = captured()

    @ragmon.generate("gpt-4o-mini")
    async def answer(question: str) -> str:
        handle = ragmon.current()
        assert isinstance(handle, ragmon.GenerateSpan)
        handle.record(input_tokens=len(question), output_tokens=2)
        return "ok"

    @ragmon.request("decorated")
    def sync_request() -> str:
        return "done"

    async with ragmon.request("async-qa"):
        assert await answer("hello") == "ok"
        assert await answer("again") == "ok"
    assert sync_request() == "done"
    spans = cap.spans()
    gens = [s for s in spans if stage_of(s) == "generate"]
    assert [g.attributes[attr.GEN_AI_USAGE_INPUT_TOKENS] for g in gens] == [5, 5]
    assert len({g.context.span_id for g in gens}) == 2  # a fresh span per call
    roots = [s for s in spans if s.parent is None]
    assert sorted(r.name for r in roots) == ["request async-qa", "request decorated"]
    assert ragmon.current() is None


def test_failing_exporter_never_raises_and_counts_the_loss(captured) -> None:
    class Exploding(SpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            raise ConnectionError("collector down")

    class Failing(SpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            return SpanExportResult.FAILURE

    for exporter, reason in ((Exploding(), "exporter_error"), (Failing(), "exporter_failure")):
        ragmon.configure(tracer_provider=TracerProvider(), span_exporter=exporter)
        _one_request()
        assert ragmon.force_flush()
        stats = ragmon.stats()
        assert stats["dropped"] == {reason: 5}
        assert stats["exported"] == 0


def test_empty_vector_batch_is_recorded_as_zero(captured) -> None:
    cap = captured()
    with ragmon.embed("text-embedding-3-small") as e:
        e.record(input_tokens=3, vectors=[], count=0)
    assert cap.spans()[0].attributes[attr.RAGMON_EMBEDDING_COUNT] == 0
    assert ragmon.stats()["problems"] == {}


def test_bad_recorded_values_never_raise(captured) -> None:
    cap = captured()
    with ragmon.search() as s:
        s.record(documents=[("only-an-id",)])  # malformed: no score
    with ragmon.embed("m") as e:
        e.record(vectors=object())  # not a vector
    assert len(cap.spans()) == 2
    assert ragmon.stats()["problems"]["instrumentation_errors"] == 2


def test_joins_an_existing_global_provider_without_replacing_it(monkeypatch) -> None:
    # A fresh global provider slot, as in a new process where another library already installed its provider.
    monkeypatch.setattr(trace_api, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(trace_api, "_TRACER_PROVIDER_SET_ONCE", trace_api.Once())
    theirs = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(theirs))
    trace_api.set_tracer_provider(provider)
    ragmon.configure(span_exporter=InMemorySpanExporter())
    ours = InMemorySpanExporter()
    ragmon.configure(span_exporter=ours)  # configuring again swaps ragmon's exporter; it must not attach twice
    with trace_api.get_tracer("their-lib").start_as_current_span("their span"), ragmon.search():
        pass
    assert ragmon.force_flush()
    assert trace_api.get_tracer_provider() is provider
    assert sorted(s.name for s in theirs.get_finished_spans()) == ["retrieval", "their span"]
    assert sorted(s.name for s in ours.get_finished_spans()) == ["retrieval", "their span"]
    search = next(s for s in ours.get_finished_spans() if s.name == "retrieval")
    assert search.parent is not None  # nested under the other library's span: one trace


def test_shutdown_makes_the_sdk_a_noop_again(captured) -> None:
    cap = captured()
    ragmon.shutdown()
    _one_request()
    assert cap.exporter.get_finished_spans() == ()
