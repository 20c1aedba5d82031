"""ragmon spans for the official `openai` client, without hand instrumentation.

    import openai, ragmon
    from ragmon.integrations import openai as ragmon_openai

    ragmon.configure(service_name="docs-bot")
    client = ragmon_openai.instrument(openai.OpenAI())      # or openai.AsyncOpenAI(); returns the same client

Every ``client.chat.completions.create(...)`` then runs in a ``ragmon.generate`` span and every
``client.embeddings.create(...)`` in a ``ragmon.embed`` span, with what the response says: tokens (cached ones
too), cost from the price table, finish reason, response model, the answer (only with content capture on, like
the request's messages), and for embeddings the vector count and norm deviation (float vectors only).

Streams (``stream=True``) come back as a `openai.Stream` / `openai.AsyncStream` that records time to first token
and chunk count while the app iterates, and ends the span when the stream is exhausted, closed (``close()``,
``with``), left by ``break``, or garbage-collected. Tokens and cost for a stream need
``stream_options={"include_usage": True}``: the wrapper never adds it, because the extra usage chunk it causes
has no ``choices`` and would break app code that reads ``chunk.choices[0]``.

Decisions worth knowing:

- ``gen_ai.provider.name`` is ``"openai"`` for api.openai.com; other known OpenAI-compatible hosts get their
  OTel name (Azure OpenAI, Groq, DeepSeek, Mistral, xAI, Perplexity, Gemini, Bedrock); any other host (vLLM,
  Ollama, a LiteLLM proxy) is reported by its host name, so self-hosted traffic is never mistaken for OpenAI
  spend. ``instrument(client, provider="...")`` overrides this. Cost is looked up by model name either way.
- API errors mark the span ERROR with ``error.type`` (the exception class) and propagate unchanged; the client's
  own retries happen inside one span.
- Instrumenting twice is a no-op; `uninstrument` restores the client. Copies made with ``client.with_options()``
  or ``client.copy()`` are instrumented too. ``with_raw_response`` / ``with_streaming_response`` calls are passed
  through without a span (they return raw HTTP responses, not parsed results).
- Nothing here raises into the app: a failure of the instrumentation is counted in ``ragmon.stats()["problems"]``
  and the user's call goes ahead; only the API's own exceptions reach the caller.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlsplit
from weakref import WeakKeyDictionary

try:
    import openai
    from openai.types import CreateEmbeddingResponse
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("ragmon.integrations.openai needs the openai package: pip install 'ragmon[openai]'") from exc

from opentelemetry import context as context_api

from ragmon import EmbedSpan, GenerateSpan, StageSpan, _state
from ragmon import attributes as attr
from ragmon.diagnostics import warn_limited

__all__ = ["instrument", "is_instrumented", "provider_for", "uninstrument"]

Client = TypeVar("Client", bound=openai.OpenAI | openai.AsyncOpenAI)

# Hosts of OpenAI-compatible APIs and their `gen_ai.provider.name` (OTel GenAI well-known values).
_PROVIDER_BY_HOST: Mapping[str, str] = {
    "api.openai.com": "openai",
    "api.groq.com": "groq",
    "api.deepseek.com": "deepseek",
    "api.mistral.ai": "mistral_ai",
    "api.x.ai": "x_ai",
    "api.perplexity.ai": "perplexity",
    "generativelanguage.googleapis.com": "gcp.gemini",
}
_PROVIDER_BY_HOST_SUFFIX: tuple[tuple[str, str], ...] = (
    (".openai.azure.com", "azure.ai.openai"),
    (".cognitiveservices.azure.com", "azure.ai.openai"),
    (".amazonaws.com", "aws.bedrock"),
)
# The openai client marks `with_raw_response` / `with_streaming_response` calls with this header; those return
# HTTP response wrappers, which this module does not parse.
_RAW_RESPONSE_HEADER = "x-stainless-raw-response"

_lock = threading.Lock()
_instrumented: WeakKeyDictionary[Any, _Instrumentation] = WeakKeyDictionary()


# --- public API --------------------------------------------------------------------------------------------
def instrument(client: Client, *, provider: str | None = None) -> Client:
    """Record ragmon spans for `client`'s chat completions and embeddings; returns `client`.

    `provider` overrides the ``gen_ai.provider.name`` derived from the client's base URL (see `provider_for`).
    Calling it again on an instrumented client changes nothing. Raises TypeError for anything but an
    ``openai.OpenAI`` / ``openai.AsyncOpenAI`` (or subclass, such as the Azure clients): fail at start-up.
    """
    if not isinstance(client, openai.OpenAI | openai.AsyncOpenAI):
        raise TypeError(f"instrument() takes an openai.OpenAI or openai.AsyncOpenAI client, not {type(client)!r}")
    with _lock:
        if client in _instrumented:
            return client
        # By client type, not by inspecting `create`: the openai client's decorators hide that it is a coroutine.
        is_async = isinstance(client, openai.AsyncOpenAI)
        inst = _Instrumentation(provider or provider_for(client), provider)
        chat = functools.partial(_wrap, inst=inst, is_async=is_async, open_call=_open_chat, returned=_chat_returned)
        embeddings = functools.partial(
            _wrap, inst=inst, is_async=is_async, open_call=_open_embeddings, returned=_embeddings_returned
        )
        inst.patch(client.chat.completions, "create", chat)
        inst.patch(client.embeddings, "create", embeddings)
        # `with_options` is `copy` under another name at class level, so each needs its own patch.
        inst.patch(client, "copy", functools.partial(_wrap_copy, inst=inst))
        inst.patch(client, "with_options", functools.partial(_wrap_copy, inst=inst))
        _instrumented[client] = inst
    return client


def uninstrument(client: openai.OpenAI | openai.AsyncOpenAI) -> None:
    """Undo `instrument`: later calls make no spans. Streams already returned still finish their spans."""
    with _lock:
        inst = _instrumented.pop(client, None)
    if inst is not None:
        inst.restore()


def is_instrumented(client: openai.OpenAI | openai.AsyncOpenAI) -> bool:
    with _lock:
        return client in _instrumented


def provider_for(client: openai.OpenAI | openai.AsyncOpenAI) -> str:
    """The ``gen_ai.provider.name`` for `client`: a well-known name for known hosts, else the host itself."""
    host = (urlsplit(str(client.base_url)).hostname or "").lower()
    known = _PROVIDER_BY_HOST.get(host)
    if known is not None:
        return known
    for suffix, name in _PROVIDER_BY_HOST_SUFFIX:
        if host.endswith(suffix):
            return name
    return host or "openai"


# --- patching ----------------------------------------------------------------------------------------------
class _Instrumentation:
    """The patches made on one client, so `uninstrument` can undo exactly them."""

    def __init__(self, provider: str, explicit_provider: str | None) -> None:
        self.provider = provider
        self.explicit_provider = explicit_provider
        self.active = True  # read on every call: a wrapper someone else wrapped cannot be removed, only disabled
        self._patches: list[tuple[Any, str, Any, bool, Any]] = []  # (owner, name, wrapper, had_own, previous)

    def patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        had_own = name in vars(owner)  # an instance attribute (someone's patch) rather than the class method
        previous = vars(owner).get(name)
        wrapper = make(getattr(owner, name))
        setattr(owner, name, wrapper)
        self._patches.append((owner, name, wrapper, had_own, previous))

    def restore(self) -> None:
        self.active = False
        for owner, name, wrapper, had_own, previous in reversed(self._patches):
            if vars(owner).get(name) is not wrapper:
                continue  # someone wrapped our wrapper; it stays, inert because `active` is False
            if had_own:
                setattr(owner, name, previous)
            else:
                delattr(owner, name)
        self._patches.clear()

    def enabled(self, kwargs: Mapping[str, Any]) -> bool:
        if not self.active or _state.current is None:
            return False
        headers = kwargs.get("extra_headers")
        if headers:
            try:
                return not any(str(k).lower() == _RAW_RESPONSE_HEADER for k in headers)
            except Exception:
                return False
        return True


def _count_problem(what: str, exc: Exception) -> None:
    state = _state.current
    if state is not None:
        state.count("instrumentation_errors")
    warn_limited(f"openai_{what}", "ragmon openai integration could not record %s: %r", what, exc)


def _wrap_copy(original: Callable[..., Any], *, inst: _Instrumentation) -> Callable[..., Any]:
    @functools.wraps(original)
    def copy(*args: Any, **kwargs: Any) -> Any:
        new_client = original(*args, **kwargs)
        if inst.active:
            try:
                instrument(new_client, provider=inst.explicit_provider)
            except Exception as exc:
                _count_problem("copy", exc)
        return new_client

    return copy


# --- one API call: a span kept outside the caller's context ------------------------------------------------
class _Call:
    """A ragmon stage span for one API call, which may outlive the `create` frame (streams).

    A stage handle attaches its span to the current context on enter and detaches on exit, which is right for a
    `with` block but wrong for a stream that ends wherever the app finishes iterating: detaching there would
    corrupt the app's context. So the handle is entered and exited inside a private copy of the context, and
    the span is made current in the app's context only around the HTTP call (so HTTP-level spans nest under it).
    """

    __slots__ = ("_ctx", "_done", "_end_lock", "_otel_context", "handle")

    def __init__(self, handle: StageSpan) -> None:
        self.handle = handle
        self._ctx = contextvars.copy_context()
        self._ctx.run(handle.__enter__)
        self._otel_context = self._ctx.run(context_api.get_current)
        self._done = False
        self._end_lock = threading.Lock()

    def attach(self) -> object:
        return context_api.attach(self._otel_context)

    @staticmethod
    def detach(token: object) -> None:
        context_api.detach(token)  # type: ignore[arg-type]

    def end(self, exc: BaseException | None = None) -> None:
        """End the span once (later calls do nothing); `exc` marks it ERROR."""
        with self._end_lock:
            if self._done:
                return
            self._done = True
        try:
            tb: TracebackType | None = exc.__traceback__ if exc is not None else None
            self._ctx.run(self.handle.__exit__, type(exc) if exc is not None else None, exc, tb)
        except Exception as problem:
            _count_problem("span end", problem)


def _start(make: Callable[[], StageSpan]) -> _Call | None:
    try:
        return _Call(make())
    except Exception as exc:
        _count_problem("span start", exc)
        return None


def _messages(kwargs: Mapping[str, Any]) -> list[Any] | tuple[Any, ...] | None:
    # Only a list or tuple: any other iterable may be single-use, and the API call must still get all of it.
    messages = kwargs.get("messages")
    return messages if isinstance(messages, list | tuple) else None


def _capturing() -> bool:
    state = _state.current
    return state is not None and state.capture_content


# --- the wrapper around `create` --------------------------------------------------------------------------
def _wrap(
    original: Callable[..., Any],
    *,
    inst: _Instrumentation,
    is_async: bool,
    open_call: Callable[[_Instrumentation, Mapping[str, Any]], _Call | None],
    returned: Callable[[_Call, Any], Any],
) -> Callable[..., Any]:
    """`original` in a span: `open_call` starts it, `returned` records the result and returns what the app
    gets. The app's call itself is never inside a `try` of ours, except to end the span and re-raise."""
    if is_async:

        @functools.wraps(original)
        async def acreate(*args: Any, **kwargs: Any) -> Any:
            call = open_call(inst, kwargs) if inst.enabled(kwargs) else None
            if call is None:
                return await original(*args, **kwargs)
            token = call.attach()
            try:
                result = await original(*args, **kwargs)
            except BaseException as exc:
                call.detach(token)
                call.end(exc)
                raise
            call.detach(token)
            return returned(call, result)

        return acreate

    @functools.wraps(original)
    def create(*args: Any, **kwargs: Any) -> Any:
        call = open_call(inst, kwargs) if inst.enabled(kwargs) else None
        if call is None:
            return original(*args, **kwargs)
        token = call.attach()
        try:
            result = original(*args, **kwargs)
        except BaseException as exc:
            call.detach(token)
            call.end(exc)
            raise
        call.detach(token)
        return returned(call, result)

    return create


# --- chat completions --------------------------------------------------------------------------------------
def _open_chat(inst: _Instrumentation, kwargs: Mapping[str, Any]) -> _Call | None:
    model = kwargs.get("model")
    return _start(
        lambda: GenerateSpan(str(model) if model else None, provider=inst.provider, messages=_messages(kwargs))
    )


def _chat_returned(call: _Call, result: Any) -> Any:
    """Record a completion and end the span, or hand back an instrumented stream. Returns what the app gets."""
    try:
        if not call.handle.recording:
            call.end()  # not configured or not sampled: nothing to time
            return result
        if isinstance(result, openai.Stream):
            return _TracedStream(result, _StreamRecorder(call))
        if isinstance(result, openai.AsyncStream):
            return _TracedAsyncStream(result, _StreamRecorder(call))
        if isinstance(result, ChatCompletion):
            _record_completion(call.handle, result)
    except Exception as exc:
        _count_problem("chat completion", exc)
    call.end()
    return result


def _record_completion(handle: StageSpan, completion: ChatCompletion) -> None:
    assert isinstance(handle, GenerateSpan)
    usage = completion.usage
    details = usage.prompt_tokens_details if usage is not None else None
    choice = completion.choices[0] if completion.choices else None
    handle.record(
        input_tokens=usage.prompt_tokens if usage is not None else None,
        output_tokens=usage.completion_tokens if usage is not None else None,
        cached_input_tokens=details.cached_tokens if details is not None else None,
        answer=choice.message.content if choice is not None else None,
        finish_reason=choice.finish_reason if choice is not None else None,
        response_model=completion.model or None,
    )


class _StreamRecorder:
    """What a stream has shown so far; writes it onto the span once, when the stream ends."""

    __slots__ = ("_call", "_finish_reason", "_model", "_parts", "_usage")

    def __init__(self, call: _Call) -> None:
        self._call = call
        self._parts: list[str] | None = [] if _capturing() else None  # the answer, only when it may be sent
        self._finish_reason: str | None = None
        self._model: str | None = None
        self._usage: Any = None

    def observe(self, chunk: Any) -> None:
        """Note one chunk. May raise on an unexpected chunk shape: the caller guards it."""
        if self._model is None and getattr(chunk, "model", None):
            self._model = chunk.model
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self._usage = usage
        produced = False
        for choice in getattr(chunk, "choices", None) or ():
            delta = choice.delta
            # Time to first token means generated output: the leading role-only chunk and the trailing
            # finish/usage chunks carry none, so they are not counted as chunks.
            if delta is not None and (delta.content or delta.tool_calls or delta.refusal or delta.function_call):
                produced = True
            if choice.index == 0:
                if delta is not None and delta.content and self._parts is not None:
                    self._parts.append(delta.content)
                if choice.finish_reason:
                    self._finish_reason = choice.finish_reason
        if produced:
            handle = self._call.handle
            assert isinstance(handle, GenerateSpan)
            handle.chunk()

    def observe_safely(self, chunk: Any) -> None:
        try:
            self.observe(chunk)
        except Exception as exc:
            _count_problem("stream chunk", exc)

    def finish(self, exc: BaseException | None = None) -> None:
        try:
            handle = self._call.handle
            assert isinstance(handle, GenerateSpan)
            usage = self._usage
            details = getattr(usage, "prompt_tokens_details", None)
            handle.record(
                input_tokens=usage.prompt_tokens if usage is not None else None,
                output_tokens=usage.completion_tokens if usage is not None else None,
                cached_input_tokens=details.cached_tokens if details is not None else None,
                answer="".join(self._parts) or None if self._parts is not None else None,  # None: no text
                finish_reason=self._finish_reason,
                response_model=self._model,
            )
        except Exception as problem:
            _count_problem("stream end", problem)
        self._call.end(exc)

    @property
    def done(self) -> bool:
        return self._call._done


class _TracedStream(openai.Stream[ChatCompletionChunk]):
    """The app's `openai.Stream`, timed. Still an `openai.Stream`; everything else is delegated to it.

    ``for chunk in stream`` runs through a generator whose ``finally`` ends the span, so leaving the loop early
    (``break``, an exception in the loop body) ends it too, without closing the HTTP response the app may still
    want (the plain openai stream does not close it on ``break`` either).
    """

    def __init__(self, inner: openai.Stream[ChatCompletionChunk], recorder: _StreamRecorder) -> None:
        # Deliberately no super().__init__: the inner stream owns the response and the decoder.
        self._inner = inner
        self._recorder = recorder
        self.response = inner.response

    def __next__(self) -> ChatCompletionChunk:
        try:
            chunk = next(self._inner)
        except StopIteration:
            self._recorder.finish()
            raise
        except BaseException as exc:
            self._recorder.finish(exc)
            raise
        self._recorder.observe_safely(chunk)
        return chunk

    def __iter__(self) -> Iterator[ChatCompletionChunk]:
        try:
            while True:
                try:
                    chunk = self.__next__()
                except StopIteration:
                    return
                yield chunk
        finally:
            self._recorder.finish()  # no-op when already finished

    def __enter__(self) -> _TracedStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, exc_tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._recorder.finish()

    def __getattr__(self, name: str) -> Any:
        if name in ("_inner", "_recorder"):  # not set yet (failed __init__): no recursion through here
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __del__(self) -> None:
        # Abandoned without being exhausted or closed: the span still ends, when the stream is collected.
        recorder = self.__dict__.get("_recorder")
        if recorder is not None and not recorder.done:
            recorder.finish()


class _TracedAsyncStream(openai.AsyncStream[ChatCompletionChunk]):
    """The async twin of `_TracedStream`. After ``break`` in ``async for`` the span ends when the event loop
    finalizes the abandoned iterator (Python closes async generators asynchronously), or at ``close()``."""

    def __init__(self, inner: openai.AsyncStream[ChatCompletionChunk], recorder: _StreamRecorder) -> None:
        self._inner = inner
        self._recorder = recorder
        self.response = inner.response

    async def __anext__(self) -> ChatCompletionChunk:
        try:
            chunk = await self._inner.__anext__()
        except StopAsyncIteration:
            self._recorder.finish()
            raise
        except BaseException as exc:
            self._recorder.finish(exc)
            raise
        self._recorder.observe_safely(chunk)
        return chunk

    async def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        try:
            while True:
                try:
                    chunk = await self.__anext__()
                except StopAsyncIteration:
                    return
                yield chunk
        finally:
            self._recorder.finish()

    async def __aenter__(self) -> _TracedAsyncStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, exc_tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        try:
            await self._inner.close()
        finally:
            self._recorder.finish()

    def __getattr__(self, name: str) -> Any:
        if name in ("_inner", "_recorder"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __del__(self) -> None:
        recorder = self.__dict__.get("_recorder")
        if recorder is not None and not recorder.done:
            recorder.finish()


# --- embeddings --------------------------------------------------------------------------------------------
def _open_embeddings(inst: _Instrumentation, kwargs: Mapping[str, Any]) -> _Call | None:
    model = kwargs.get("model")
    return _start(lambda: EmbedSpan(str(model) if model else None, provider=inst.provider))


def _embeddings_returned(call: _Call, result: Any) -> Any:
    try:
        handle = call.handle
        if handle.recording and isinstance(result, CreateEmbeddingResponse) and isinstance(handle, EmbedSpan):
            data = result.data
            # Vectors the app asked for as base64 stay strings; the norm check needs floats.
            vectors = [d.embedding for d in data] if data and all(isinstance(d.embedding, list) for d in data) else None
            handle.record(
                input_tokens=result.usage.prompt_tokens if result.usage is not None else None,
                vectors=vectors,
                count=len(data),
            )
            if result.model:
                handle.set(**{attr.GEN_AI_RESPONSE_MODEL: result.model})
    except Exception as exc:
        _count_problem("embeddings", exc)
    call.end()
    return result
