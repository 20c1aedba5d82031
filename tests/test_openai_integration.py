"""`ragmon.integrations.openai` against the real `openai` client and the scripted server in `ragmon.testing`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from importlib import resources
from typing import Any

import httpx
import openai
import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import ragmon
from ragmon import attributes as attr
from ragmon.integrations import openai as ragmon_openai
from ragmon.testing import Completion, EmbeddingsReply, ErrorReply, ScriptedOpenAIServer

MESSAGES: list[Any] = [{"role": "user", "content": "What is the capital of France?"}]
PRICES: dict[str, Any] = json.loads(resources.files("ragmon").joinpath("data/prices.json").read_text())["models"]

Configure = Callable[..., InMemorySpanExporter]


# --- fixtures ----------------------------------------------------------------------------------------------
@pytest.fixture
def configure() -> Iterator[Configure]:
    """`configure(capture_content=...)` makes ragmon live with an in-memory exporter; shut down after the test."""

    def make(*, capture_content: bool = False) -> InMemorySpanExporter:
        exporter = InMemorySpanExporter()
        ragmon.configure(tracer_provider=TracerProvider(), span_exporter=exporter, capture_content=capture_content)
        return exporter

    yield make
    ragmon.shutdown()


@pytest.fixture
def exporter(configure: Configure) -> InMemorySpanExporter:
    return configure()


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as s:
        yield s


@pytest.fixture
def client(server: ScriptedOpenAIServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0) as c:
        yield ragmon_openai.instrument(c)


@pytest.fixture
async def aclient(server: ScriptedOpenAIServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0) as c:
        yield ragmon_openai.instrument(c)


def finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    assert ragmon.force_flush()
    return list(exporter.get_finished_spans())


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    [span] = finished(exporter)
    return span


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def chat_cost(model: str, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
    price = PRICES[model]
    return float(
        (input_tokens - cached_tokens) * price["input_per_1m"] / 1e6
        + cached_tokens * price["cached_input_per_1m"] / 1e6
        + output_tokens * price["output_per_1m"] / 1e6
    )


# --- chat, non-streaming -----------------------------------------------------------------------------------
def test_chat_records_tokens_cached_tokens_and_exact_cost(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(
        Completion(
            "Paris.", prompt_tokens=1200, completion_tokens=80, cached_tokens=1024, model="gpt-4o-mini-2024-07-18"
        )
    )

    completion = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)

    assert isinstance(completion, openai.types.chat.ChatCompletion)
    assert completion.choices[0].message.content == "Paris."
    span = only_span(exporter)
    a = attrs(span)
    assert span.name == "chat gpt-4o-mini"
    assert span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.UNSET
    assert attr.stage_of(a) == "generate"
    assert a[attr.GEN_AI_OPERATION_NAME] == "chat"
    assert a[attr.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
    assert a[attr.GEN_AI_RESPONSE_MODEL] == "gpt-4o-mini-2024-07-18"
    assert a[attr.GEN_AI_PROVIDER_NAME] == "127.0.0.1"  # not api.openai.com: reported by host
    assert a[attr.GEN_AI_USAGE_INPUT_TOKENS] == 1200
    assert a[attr.GEN_AI_USAGE_OUTPUT_TOKENS] == 80
    assert a[attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 1024
    assert a[attr.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert a[attr.OI_COST_TOTAL] == pytest.approx(chat_cost("gpt-4o-mini", 1200, 80, 1024), rel=1e-12)
    assert a[attr.OI_COST_TOTAL] == pytest.approx(176 * 0.15e-6 + 1024 * 0.075e-6 + 80 * 0.60e-6, rel=1e-12)
    assert attr.RAGMON_COST_UNKNOWN_MODEL not in a
    assert attr.GEN_AI_INPUT_MESSAGES not in a  # capture is off by default
    assert attr.GEN_AI_OUTPUT_MESSAGES not in a
    assert attr.RAGMON_TTFT_MS not in a  # not a stream


@pytest.mark.parametrize("capture", [True, False])
def test_chat_messages_and_answer_only_with_capture_on(
    configure: Configure, server: ScriptedOpenAIServer, client: openai.OpenAI, capture: bool
) -> None:
    exporter = configure(capture_content=capture)
    server.script(Completion("Paris is the capital."))

    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)

    a = attrs(only_span(exporter))
    if capture:
        assert json.loads(a[attr.GEN_AI_INPUT_MESSAGES]) == MESSAGES
        [message] = json.loads(a[attr.GEN_AI_OUTPUT_MESSAGES])
        assert message["parts"] == [{"type": "text", "content": "Paris is the capital."}]
        assert message["finish_reason"] == "stop"
    else:
        assert attr.GEN_AI_INPUT_MESSAGES not in a
        assert attr.GEN_AI_OUTPUT_MESSAGES not in a


def test_messages_given_as_an_iterator_are_not_consumed(
    configure: Configure, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    exporter = configure(capture_content=True)
    client.chat.completions.create(model="gpt-4o-mini", messages=iter(MESSAGES))

    assert server.requests[0].json["messages"] == MESSAGES  # the API still got every message
    assert attr.GEN_AI_INPUT_MESSAGES not in attrs(only_span(exporter))


def test_unknown_model_has_no_cost_and_is_flagged(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(Completion("hi", prompt_tokens=30, completion_tokens=5))

    client.chat.completions.create(model="acme-llm-7b", messages=MESSAGES)

    a = attrs(only_span(exporter))
    assert a[attr.GEN_AI_USAGE_INPUT_TOKENS] == 30
    assert a[attr.RAGMON_COST_UNKNOWN_MODEL] is True
    assert attr.OI_COST_TOTAL not in a


# --- chat, streaming ---------------------------------------------------------------------------------------
def test_stream_records_ttft_chunks_usage_and_answer(
    configure: Configure, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    exporter = configure(capture_content=True)
    server.script(
        Completion(
            ["Par", "is", "."],
            chunk_delay_s=[0.15, 0.02, 0.02],
            prompt_tokens=50,
            completion_tokens=3,
            cached_tokens=0,
            model="gpt-4o-mini-2024-07-18",
        )
    )

    stream = client.chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    assert isinstance(stream, openai.Stream)  # apps that check the type still see an openai.Stream
    assert finished(exporter) == []  # the span stays open while the app reads the stream
    chunks = list(stream)

    assert len(chunks) == 6  # role, three content chunks, finish, usage: all handed to the app unchanged
    span = only_span(exporter)
    a = attrs(span)
    assert a[attr.RAGMON_STREAMED_CHUNKS] == 3  # chunks with generated output only
    assert a[attr.RAGMON_TTFT_MS] >= 150
    assert span.end_time is not None and span.start_time is not None
    assert a[attr.RAGMON_TTFT_MS] < (span.end_time - span.start_time) / 1e6
    assert a[attr.RAGMON_INTER_TOKEN_MS] >= 15
    assert a[attr.GEN_AI_USAGE_INPUT_TOKENS] == 50
    assert a[attr.GEN_AI_USAGE_OUTPUT_TOKENS] == 3
    assert a[attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 0
    assert a[attr.OI_COST_TOTAL] == pytest.approx(chat_cost("gpt-4o-mini", 50, 3), rel=1e-12)
    assert a[attr.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert a[attr.GEN_AI_RESPONSE_MODEL] == "gpt-4o-mini-2024-07-18"
    [message] = json.loads(a[attr.GEN_AI_OUTPUT_MESSAGES])
    assert message["parts"][0]["content"] == "Paris."
    assert span.status.status_code is StatusCode.UNSET


def test_stream_without_usage_or_capture_records_timing_only(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(Completion("a b c"))

    for _ in client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True):
        pass

    a = attrs(only_span(exporter))
    assert a[attr.RAGMON_STREAMED_CHUNKS] == 3
    assert attr.RAGMON_TTFT_MS in a
    assert attr.GEN_AI_USAGE_INPUT_TOKENS not in a  # no include_usage: the API sent none, and none is invented
    assert attr.OI_COST_TOTAL not in a
    assert attr.RAGMON_COST_UNKNOWN_MODEL not in a  # no usage is not an unknown model
    assert attr.GEN_AI_OUTPUT_MESSAGES not in a  # capture off
    assert "stream_options" not in server.requests[0].json  # the wrapper does not change the request


def test_breaking_out_of_a_stream_ends_the_span(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(Completion(["one", "two", "three"]))
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)

    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break

    a = attrs(only_span(exporter))  # ended by the break, before the app closes anything
    assert a[attr.RAGMON_STREAMED_CHUNKS] == 1
    stream.close()
    assert len(finished(exporter)) == 1  # closing later does not end it twice


def test_stream_used_as_a_context_manager(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(Completion(["one", "two", "three"]))

    with client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True) as stream:
        next(stream)  # the role chunk
        next(stream)  # "one"

    assert stream.response.is_closed
    a = attrs(only_span(exporter))
    assert a[attr.RAGMON_STREAMED_CHUNKS] == 1


def test_stream_read_with_next_ends_at_stop_iteration(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(Completion("x y"))
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
    received = []
    while True:
        try:
            received.append(next(stream))
        except StopIteration:
            break
    assert len(received) == 4
    assert attrs(only_span(exporter))[attr.RAGMON_STREAMED_CHUNKS] == 2


def test_stream_failing_midway_marks_the_span_error(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(Completion(["a", "b", "c"], truncate_after_chunks=1))

    # openai 3 wraps the broken stream in APIConnectionError, openai 2 lets httpx's error through: either way the
    # app sees the client's own exception, unchanged, and the span names it
    with pytest.raises((openai.APIConnectionError, httpx.RemoteProtocolError)) as raised:
        for _ in client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True):
            pass

    span = only_span(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[attr.ERROR_TYPE] == type(raised.value).__name__
    assert attrs(span)[attr.RAGMON_STREAMED_CHUNKS] == 1


def test_stream_helper_of_the_openai_client_is_traced(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(Completion("fine thanks"))
    with client.chat.completions.stream(model="gpt-4o-mini", messages=MESSAGES) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "fine thanks"
    assert attrs(only_span(exporter))[attr.RAGMON_STREAMED_CHUNKS] == 2


# --- async client ------------------------------------------------------------------------------------------
async def test_async_chat(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, aclient: openai.AsyncOpenAI
) -> None:
    server.script(Completion("Paris.", prompt_tokens=100, completion_tokens=4, cached_tokens=64))

    completion = await aclient.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)

    assert completion.choices[0].message.content == "Paris."
    a = attrs(only_span(exporter))
    assert a[attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 64
    assert a[attr.OI_COST_TOTAL] == pytest.approx(chat_cost("gpt-4o-mini", 100, 4, 64), rel=1e-12)


async def test_async_stream(configure: Configure, server: ScriptedOpenAIServer, aclient: openai.AsyncOpenAI) -> None:
    exporter = configure(capture_content=True)
    server.script(Completion(["Hel", "lo"], chunk_delay_s=[0.1, 0.0], prompt_tokens=7, completion_tokens=2))

    stream = await aclient.chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    assert isinstance(stream, openai.AsyncStream)
    chunks = [chunk async for chunk in stream]

    assert len(chunks) == 5
    a = attrs(only_span(exporter))
    assert a[attr.RAGMON_STREAMED_CHUNKS] == 2
    assert a[attr.RAGMON_TTFT_MS] >= 100
    assert a[attr.GEN_AI_USAGE_OUTPUT_TOKENS] == 2
    assert json.loads(a[attr.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]["content"] == "Hello"


async def test_async_stream_left_early_inside_async_with(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, aclient: openai.AsyncOpenAI
) -> None:
    server.script(Completion(["one", "two", "three"]))

    async with await aclient.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True) as s:
        async for chunk in s:
            if chunk.choices and chunk.choices[0].delta.content:
                break

    assert s.response.is_closed
    assert attrs(only_span(exporter))[attr.RAGMON_STREAMED_CHUNKS] == 1


async def test_async_error_marks_span_and_propagates(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, aclient: openai.AsyncOpenAI
) -> None:
    server.script(ErrorReply(500))
    with pytest.raises(openai.InternalServerError):
        await aclient.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    span = only_span(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[attr.ERROR_TYPE] == "InternalServerError"


async def test_async_embeddings(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, aclient: openai.AsyncOpenAI
) -> None:
    server.script(EmbeddingsReply(vectors=[[0.6, 0.8]], prompt_tokens=3))
    await aclient.embeddings.create(model="text-embedding-3-small", input="q")
    a = attrs(only_span(exporter))
    assert attr.RAGMON_EMBEDDING_COUNT not in a  # one vector: nothing to say
    assert a[attr.GEN_AI_USAGE_INPUT_TOKENS] == 3


# --- embeddings --------------------------------------------------------------------------------------------
def test_embeddings_record_tokens_norm_deviation_count_and_cost(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(EmbeddingsReply(vectors=[[0.6, 0.8], [0.3, 0.4]], prompt_tokens=7, model="text-embedding-3-small"))

    response = client.embeddings.create(model="text-embedding-3-small", input=["q one", "q two"])

    assert len(response.data) == 2
    assert server.requests[0].json["encoding_format"] == "base64"  # decoded to floats by the client
    span = only_span(exporter)
    a = attrs(span)
    assert span.name == "embeddings text-embedding-3-small"
    assert attr.stage_of(a) == "embed"
    assert a[attr.GEN_AI_OPERATION_NAME] == "embeddings"
    assert a[attr.GEN_AI_USAGE_INPUT_TOKENS] == 7
    assert a[attr.RAGMON_EMBEDDING_COUNT] == 2
    assert a[attr.RAGMON_QUERY_NORM_DEVIATION] == pytest.approx(0.5, abs=1e-6)  # | ||(0.3, 0.4)|| - 1 |
    assert a[attr.GEN_AI_RESPONSE_MODEL] == "text-embedding-3-small"
    assert a[attr.OI_COST_TOTAL] == pytest.approx(7 * PRICES["text-embedding-3-small"]["input_per_1m"] / 1e6)


def test_embeddings_asked_for_as_base64_skip_the_norm_check(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(EmbeddingsReply(vectors=[[0.6, 0.8]], prompt_tokens=2))
    response = client.embeddings.create(model="text-embedding-3-small", input="q", encoding_format="base64")
    assert isinstance(response.data[0].embedding, str)  # the app asked for base64 and gets it
    a = attrs(only_span(exporter))
    assert attr.RAGMON_EMBEDDING_COUNT not in a  # one vector: nothing to say
    assert attr.RAGMON_QUERY_NORM_DEVIATION not in a  # base64 vectors are not decoded for the norm check


# --- errors ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("status", "error"), [(500, openai.InternalServerError), (429, openai.RateLimitError)])
def test_api_error_marks_the_span_error_and_propagates_unchanged(
    exporter: InMemorySpanExporter,
    server: ScriptedOpenAIServer,
    client: openai.OpenAI,
    status: int,
    error: type[openai.APIStatusError],
) -> None:
    server.script(ErrorReply(status, retry_after_s=0.01))

    with pytest.raises(error) as caught:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)

    assert type(caught.value) is error
    assert caught.value.status_code == status
    span = only_span(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[attr.ERROR_TYPE] == error.__qualname__
    assert [e.name for e in span.events] == ["exception"]


def test_embeddings_error_marks_the_span_error(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(ErrorReply(503))
    with pytest.raises(openai.InternalServerError):
        client.embeddings.create(model="text-embedding-3-small", input="q")
    assert attrs(only_span(exporter))[attr.ERROR_TYPE] == "InternalServerError"


def test_client_retries_happen_inside_one_span(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(ErrorReply(429, retry_after_s=0.01), Completion("ok", prompt_tokens=5, completion_tokens=1))

    client.with_options(max_retries=1).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)

    assert len(server.requests) == 2
    span = only_span(exporter)
    assert span.status.status_code is StatusCode.UNSET
    assert attrs(span)[attr.GEN_AI_USAGE_INPUT_TOKENS] == 5


def test_timeout_marks_the_span_error(exporter: InMemorySpanExporter, server: ScriptedOpenAIServer) -> None:
    server.script(Completion("late", delay_s=0.2))
    with openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, timeout=0.05) as c:
        ragmon_openai.instrument(c)
        with pytest.raises(openai.APITimeoutError):
            c.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert attrs(only_span(exporter))[attr.ERROR_TYPE] == "APITimeoutError"


# --- lifecycle ---------------------------------------------------------------------------------------------
def test_instrumenting_twice_gives_one_span_per_call(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    assert ragmon_openai.instrument(client) is client
    assert ragmon_openai.is_instrumented(client)

    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    client.embeddings.create(model="text-embedding-3-small", input="q")

    assert [s.name for s in finished(exporter)] == ["chat gpt-4o-mini", "embeddings text-embedding-3-small"]


def test_uninstrument_restores_the_client(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    ragmon_openai.uninstrument(client)

    assert not ragmon_openai.is_instrumented(client)
    assert "create" not in vars(client.chat.completions)  # the class method again
    assert "create" not in vars(client.embeddings)
    assert "with_options" not in vars(client)
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    client.embeddings.create(model="text-embedding-3-small", input="q")
    assert finished(exporter) == []

    ragmon_openai.instrument(client)  # and it can be instrumented again
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert len(finished(exporter)) == 1


def test_copies_of_an_instrumented_client_are_instrumented(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    copy = client.with_options(timeout=5)
    assert ragmon_openai.is_instrumented(copy)
    copy.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert len(finished(exporter)) == 1


def test_raw_response_calls_pass_through_without_a_span(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=MESSAGES)
    assert raw.parse().choices[0].message.content == "ok"
    assert finished(exporter) == []


def test_without_configure_calls_pass_through(server: ScriptedOpenAIServer, client: openai.OpenAI) -> None:
    ragmon.shutdown()
    completion = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
    assert completion.choices[0].message.content == "ok"
    assert len(list(stream)) == 3


def test_spans_nest_under_the_request_and_leave_the_app_context_alone(
    exporter: InMemorySpanExporter, server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    with ragmon.request("docs-qa", user="u1"):
        outer = trace_api.get_current_span()
        stream = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
        assert trace_api.get_current_span() is outer  # the open stream span is not left attached
        list(stream)
        assert trace_api.get_current_span() is outer

    generate, request = finished(exporter)
    assert generate.parent is not None
    assert generate.parent.span_id == request.context.span_id
    assert attrs(generate)[attr.RAGMON_FEATURE] == "docs-qa"


def test_a_failure_in_the_instrumentation_does_not_break_the_call(
    exporter: InMemorySpanExporter,
    server: ScriptedOpenAIServer,
    client: openai.OpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("bug in the wrapper")

    monkeypatch.setattr(ragmon_openai, "_record_completion", broken)
    monkeypatch.setattr(ragmon_openai._StreamRecorder, "observe", broken)

    completion = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    chunks = list(client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True))

    assert completion.choices[0].message.content == "ok"
    assert len(chunks) == 3
    assert len(finished(exporter)) == 2  # both spans still ended
    assert ragmon.stats()["problems"]["instrumentation_errors"] >= 1


def test_instrument_rejects_what_is_not_an_openai_client() -> None:
    with pytest.raises(TypeError, match=r"openai\.OpenAI"):
        ragmon_openai.instrument(object())  # type: ignore[type-var]


@pytest.mark.parametrize(
    ("base_url", "provider"),
    [
        ("https://api.openai.com/v1", "openai"),
        ("https://my-resource.openai.azure.com/openai", "azure.ai.openai"),
        ("https://api.groq.com/openai/v1", "groq"),
        ("http://vllm.internal:8000/v1", "vllm.internal"),
    ],
)
def test_provider_comes_from_the_base_url(base_url: str, provider: str) -> None:
    with openai.OpenAI(base_url=base_url, api_key="k") as c:
        assert ragmon_openai.provider_for(c) == provider


def test_explicit_provider_wins(exporter: InMemorySpanExporter, server: ScriptedOpenAIServer) -> None:
    with openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as c:
        ragmon_openai.instrument(c, provider="openai")
        c.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
        c.with_options(timeout=3).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert [attrs(s)[attr.GEN_AI_PROVIDER_NAME] for s in finished(exporter)] == ["openai", "openai"]
