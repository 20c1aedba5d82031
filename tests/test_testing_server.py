"""The scripted OpenAI-compatible server in `ragmon.testing`, driven by the real `openai` client and httpx."""

from __future__ import annotations

import base64
import json
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from ragmon.testing import (
    Completion,
    EmbeddingsReply,
    ErrorReply,
    RawReply,
    Reply,
    ScriptedOpenAIServer,
    TruncatedReply,
    malformed_json,
)

MESSAGES: list[Any] = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as s:
        yield s


@pytest.fixture
def client(server: ScriptedOpenAIServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0) as c:
        yield c


def test_completion_is_served_and_the_request_recorded(server: ScriptedOpenAIServer, client: openai.OpenAI) -> None:
    server.script(Completion("Paris.", prompt_tokens=12, completion_tokens=2, cached_tokens=8, model="gpt-x-1"))

    completion = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, temperature=0)

    assert completion.choices[0].message.content == "Paris."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == "gpt-x-1"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (12, 2)
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 8
    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.json == {"model": "gpt-4o-mini", "messages": MESSAGES, "temperature": 0}
    assert json.loads(request.body) == request.json
    assert server.pending == 0


def test_empty_script_answers_with_defaults(server: ScriptedOpenAIServer, client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="m-1", messages=MESSAGES)
    embeddings = client.embeddings.create(model="e-1", input=["a", "b c"], encoding_format="float")

    assert completion.choices[0].message.content == "ok"
    assert completion.model == "m-1"  # the request's model is echoed
    assert [d.index for d in embeddings.data] == [0, 1]
    assert all(len(d.embedding) == 8 for d in embeddings.data)
    assert embeddings.usage.prompt_tokens == 3  # words of the inputs


def test_default_reply_and_callable_replies(server: ScriptedOpenAIServer, client: openai.OpenAI) -> None:
    def echo(request: Any) -> Reply:
        return Completion(f"you said: {request['messages'][-1]['content']}")

    server.default = echo
    server.script(Completion("scripted first"))

    first = client.chat.completions.create(model="m", messages=MESSAGES)
    second = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])

    assert first.choices[0].message.content == "scripted first"
    assert second.choices[0].message.content == "you said: hi"


def test_a_raising_callable_answers_500_and_is_reported(client: openai.OpenAI, server: ScriptedOpenAIServer) -> None:
    def broken(request: Any) -> Reply:
        raise KeyError("oops")

    server.script(broken)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=MESSAGES)
    [error] = server.handler_errors
    assert isinstance(error, KeyError)


def test_stream_sends_chunks_usage_and_done_with_delays(server: ScriptedOpenAIServer, client: openai.OpenAI) -> None:
    server.script(Completion(["Pa", "ris", "."], chunk_delay_s=[0.15, 0.0, 0.05], prompt_tokens=9, model="gpt-x-1"))

    started = time.monotonic()
    arrivals: list[float] = []
    chunks = []
    for chunk in client.chat.completions.create(
        model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    ):
        arrivals.append(time.monotonic() - started)
        chunks.append(chunk)

    # role chunk, three content chunks, the finish chunk, the usage chunk
    assert len(chunks) == 6
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Paris."
    assert chunks[4].choices[0].finish_reason == "stop"
    assert chunks[5].choices == []
    assert chunks[5].usage is not None
    assert (chunks[5].usage.prompt_tokens, chunks[5].usage.completion_tokens) == (9, 3)
    assert all(c.usage is None for c in chunks[:5])
    assert {c.model for c in chunks} == {"gpt-x-1"}
    assert arrivals[1] >= 0.15  # the first token waited for its delay
    assert arrivals[3] - arrivals[2] >= 0.04  # 0.05 s on the server; the earlier chunk may arrive a little late
    assert server.requests[0].json["stream"] is True


def test_stream_without_include_usage_sends_no_usage(server: ScriptedOpenAIServer, client: openai.OpenAI) -> None:
    server.script(Completion("a b"))
    chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert len(chunks) == 4  # role, "a", " b", finish
    assert all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)


def test_streamed_reply_to_a_non_streaming_request_is_joined(
    server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(Completion(["Hel", "lo"], chunk_delay_s=0.05))
    completion = client.chat.completions.create(model="m", messages=MESSAGES)
    assert completion.choices[0].message.content == "Hello"
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 2


def test_error_reply_sends_status_retry_after_and_body(server: ScriptedOpenAIServer, client: openai.OpenAI) -> None:
    server.script(ErrorReply(429, retry_after_s=7, headers={"retry-after-ms": "7000"}))

    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="m", messages=MESSAGES)

    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.response.headers["retry-after-ms"] == "7000"
    assert caught.value.code == "rate_limit_exceeded"


def test_fractional_retry_after_is_honoured_by_the_openai_client(server: ScriptedOpenAIServer) -> None:
    server.script(ErrorReply(503, retry_after_s=0.2), Completion("after retry"))
    with openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=1) as client:
        completion = client.chat.completions.create(model="m", messages=MESSAGES)

    assert completion.choices[0].message.content == "after retry"
    first, second = server.requests
    assert second.received_at_s - first.received_at_s >= 0.2
    assert second.headers["x-stainless-retry-count"] == "1"


def test_custom_error_body(server: ScriptedOpenAIServer, client: openai.OpenAI) -> None:
    server.script(ErrorReply(400, body={"error": {"message": "context too long", "type": "invalid_request_error"}}))
    with pytest.raises(openai.BadRequestError, match="context too long"):
        client.chat.completions.create(model="m", messages=MESSAGES)


def test_malformed_json_makes_the_openai_client_raise(server: ScriptedOpenAIServer, client: openai.OpenAI) -> None:
    server.script(malformed_json())
    with pytest.raises(json.JSONDecodeError):  # what openai 3.x lets through for a 200 it cannot parse
        client.chat.completions.create(model="m", messages=MESSAGES)


def test_raw_reply_is_sent_verbatim(server: ScriptedOpenAIServer) -> None:
    server.script(RawReply(b"<html>bad gateway</html>", status=502, content_type="text/html", headers={"X-A": "1"}))
    response = httpx.post(f"{server.base_url}/chat/completions", json={"model": "m"})
    assert response.status_code == 502
    assert response.text == "<html>bad gateway</html>"
    assert response.headers["content-type"] == "text/html"
    assert response.headers["x-a"] == "1"


def test_truncated_body_is_a_connection_error(server: ScriptedOpenAIServer, client: openai.OpenAI) -> None:
    server.script(TruncatedReply())
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=MESSAGES)
    with pytest.raises(httpx.RemoteProtocolError):  # the same reply to plain httpx: an incomplete body
        server.script(TruncatedReply())
        httpx.post(f"{server.base_url}/chat/completions", json={})


def test_truncated_stream_raises_while_iterating(server: ScriptedOpenAIServer, client: openai.OpenAI) -> None:
    server.script(Completion(["a", "b", "c"], truncate_after_chunks=1))
    received = []
    # openai 3 wraps the cut stream in APIConnectionError; openai 2 (the test extra's) lets httpx's error through
    with pytest.raises((openai.APIConnectionError, httpx.RemoteProtocolError)):
        for chunk in client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
            received.append(chunk)
    assert [c.choices[0].delta.content for c in received] == ["", "a"]


def test_delay_makes_the_client_time_out(server: ScriptedOpenAIServer) -> None:
    server.script(Completion("too late", delay_s=0.3))
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, timeout=0.05)
    with client, pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="m", messages=MESSAGES)
    assert len(server.requests) == 1  # it arrived; the reply was what came too late


def test_embeddings_base64_is_what_the_openai_client_asks_for(
    server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    server.script(EmbeddingsReply(vectors=[[0.6, 0.8], [1.0, 0.0]], prompt_tokens=5, model="emb-1"))

    response = client.embeddings.create(model="text-embedding-3-small", input=["q1", "q2"])

    assert server.requests[0].json["encoding_format"] == "base64"  # the client's default
    assert response.data[0].embedding == pytest.approx([0.6, 0.8], abs=1e-7)  # float32 precision
    assert response.data[1].embedding == [1.0, 0.0]
    assert response.usage.prompt_tokens == 5
    assert response.model == "emb-1"


def test_embeddings_base64_round_trips_float32(server: ScriptedOpenAIServer) -> None:
    server.script(EmbeddingsReply(vectors=[[0.25, -0.5, 1.0]]))
    body = httpx.post(
        f"{server.base_url}/embeddings", json={"model": "e", "input": "x", "encoding_format": "base64"}
    ).json()
    raw = base64.b64decode(body["data"][0]["embedding"])
    assert struct.unpack("<3f", raw) == (0.25, -0.5, 1.0)


def test_generated_embeddings_are_unit_vectors_of_the_requested_dimensions(
    server: ScriptedOpenAIServer, client: openai.OpenAI
) -> None:
    first = client.embeddings.create(model="e", input="same text", dimensions=16)
    second = client.embeddings.create(model="e", input="same text", dimensions=16)
    other = client.embeddings.create(model="e", input="other text", dimensions=16)

    vector = first.data[0].embedding
    assert len(vector) == 16
    assert sum(x * x for x in vector) == pytest.approx(1.0, abs=1e-6)
    assert second.data[0].embedding == vector  # deterministic
    assert other.data[0].embedding != vector


def test_unknown_path_is_404(server: ScriptedOpenAIServer) -> None:
    response = httpx.get(f"{server.base_url}/models")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_concurrent_requests_are_served_in_parallel(server: ScriptedOpenAIServer) -> None:
    # Every reply waits until all 8 requests are in: a server that answered one at a time would break the barrier.
    barrier = threading.Barrier(8, timeout=5)

    def together(request: Any) -> Reply:
        barrier.wait()
        return Completion(f"r{request['n']}")

    server.script(*([together] * 8))
    answers: list[str] = []
    lock = threading.Lock()

    def call(n: int) -> None:
        body = httpx.post(f"{server.base_url}/chat/completions", json={"model": "m", "n": n}).json()
        with lock:
            answers.append(body["choices"][0]["message"]["content"])

    threads = [threading.Thread(target=call, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(answers) == sorted(f"r{n}" for n in range(8))
    assert len(server.requests) == 8
    assert server.handler_errors == []


def test_stop_wakes_delayed_replies_and_ends_threads() -> None:
    arrived = threading.Event()

    def slow(request: Any) -> Reply:
        arrived.set()  # runs on the handler thread, just before it waits out the delay
        return Completion("never", delay_s=30)

    server = ScriptedOpenAIServer([slow]).start()
    errors: list[BaseException] = []

    def call() -> None:
        try:
            httpx.post(f"{server.base_url}/chat/completions", json={"model": "m"}, timeout=10)
        except httpx.HTTPError as exc:
            errors.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    assert arrived.wait(5)
    started = time.monotonic()
    server.stop()
    caller.join(5)

    assert time.monotonic() - started < 1.0
    assert not caller.is_alive()
    assert len(errors) == 1  # the client saw the connection close without a reply
    assert not [t for t in threading.enumerate() if t.name.startswith("scripted-openai")]
    with pytest.raises(RuntimeError):
        _ = server.base_url


def test_clear_forgets_requests_and_script(server: ScriptedOpenAIServer, client: openai.OpenAI) -> None:
    server.script(Completion("a"), Completion("b"))
    client.chat.completions.create(model="m", messages=MESSAGES)
    server.clear()
    assert server.requests == []
    assert server.pending == 0
