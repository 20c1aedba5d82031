"""The request root and the stage spans: context managers, async context managers and decorators.

Each stage handle collects what the stage knows while it runs (`record(...)`) and writes it onto the span once,
at the end, in one `set_attributes` call: one lock per span instead of one per attribute. Everything derived
— cost from the price table, rank-1 score and similarity gap, embedding-norm deviation, time to first token —
is computed there too. Before `ragmon.configure` every handle is inert.

Nothing here raises into the host app: instrumentation errors are counted and logged (rate-limited); only the
app's own exceptions propagate, after marking the span ERROR.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import math
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _json_string  # what json.dumps uses: ASCII-only escapes
from types import TracebackType
from typing import Any, ClassVar, TypeVar

from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry.trace import SpanKind, Status, StatusCode

from ragmon import _state
from ragmon import attributes as attr
from ragmon.diagnostics import warn_limited

F = TypeVar("F", bound=Callable[..., Any])
H = TypeVar("H", bound="StageSpan")

# Attributes every span of a request inherits from its root (feature, user, session), so each span row in the
# store can be grouped per feature without joining on the trace.
_REQUEST_ATTRIBUTES: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "ragmon_request_attributes", default=None
)
# The handle of the innermost span opened by a decorator, for `ragmon.current()` inside decorated functions.
_DECORATED_HANDLE: contextvars.ContextVar[StageSpan | None] = contextvars.ContextVar(
    "ragmon_decorated_handle", default=None
)

# The vector whose norm the request's embed span recorded: a search passing the same object does not record it
# again. Reset by each request root, so a vector cached across requests is still checked once per request.
_EMBEDDED_VECTOR: contextvars.ContextVar[object] = contextvars.ContextVar("ragmon_embedded_vector", default=None)

_GAP_RANK = 10  # similarity gap: rank-1 score minus rank-10 score (or the last, with fewer results)


@dataclass(frozen=True, slots=True)
class Document:
    """One retrieved or reranked passage. `text` is recorded only when content capture is on. `source` is the
    paragraph or source document the chunk belongs to (a label that survives re-chunking, where chunk ids do not):
    recorded beside the id, it is what ragmon's document views count by."""

    id: str
    score: float
    text: str | None = None
    source: str | None = None


_INFINITY = float("inf")


def _json_non_finite(score: float) -> str:
    """NaN, Infinity or -Infinity as `json.dumps` writes them (it writes a finite float as its repr)."""
    return "NaN" if score != score else ("Infinity" if score > 0 else "-Infinity")


def _documents(items: Iterable[Any]) -> tuple[str, list[float], list[str | None]]:
    """From (id, score[, text[, source]]) tuples, {"id", "score", "text", "source"} mappings or objects with those
    attributes: the JSON recorded on the span (`[{"id": ..., "score": ...}, ...]` in rank order, with a
    `"source"` entry for a document that names its paragraph or source; the text `json.dumps` would write), the
    scores, the texts.

    Written piece by piece rather than by building dicts for `json.dumps`: a third of the cost, on every search
    and rerank span of every request.
    """
    records: list[str] = []
    scores: list[float] = []
    texts: list[str | None] = []
    for item in items:
        if type(item) is tuple or type(item) is list:  # the common case first: no isinstance chain
            n = len(item)
            doc_id, score = item[0], item[1]
            text = item[2] if n > 2 else None
            source = item[3] if n > 3 else None
        elif isinstance(item, Mapping):
            doc_id, score, text, source = item["id"], item["score"], item.get("text"), item.get("source")
        else:
            doc_id, score = item.id, item.score
            text, source = getattr(item, "text", None), getattr(item, "source", None)
        score = float(score)
        scores.append(score)
        texts.append(text)
        number = repr(score) if -_INFINITY < score < _INFINITY else _json_non_finite(score)
        if source is None:
            records.append(f'{{"id": {_json_string(str(doc_id))}, "score": {number}}}')
        else:
            records.append(
                f'{{"id": {_json_string(str(doc_id))}, "score": {number}, "source": {_json_string(str(source))}}}'
            )
    return "[" + ", ".join(records) + "]", scores, texts


# The last vector whose norm was computed: apps pass the same query vector to embed and to search, and the norm
# of a large embedding is not free (docs/results.md). An identity check, so a different vector is never served a
# stale norm.
_last_norm: tuple[Any, float] = (None, 0.0)


def _l2_norm(vector: Any) -> float:
    global _last_norm
    last_vector, last_norm = _last_norm
    if vector is last_vector:
        return last_norm
    dot = getattr(vector, "dot", None)  # numpy arrays: one C call
    norm = math.sqrt(float(dot(vector))) if dot is not None else math.hypot(*vector)
    _last_norm = (vector, norm)
    return norm


def _is_single_vector(vectors: Any) -> bool:
    ndim = getattr(vectors, "ndim", None)
    if ndim is not None:
        return bool(ndim == 1)
    first = next(iter(vectors), None)
    return first is None or isinstance(first, int | float)


def _max_norm_deviation(vectors: Any, limit: int) -> float | None:
    if vectors is None or limit <= 0 or len(vectors) == 0:
        return None
    if _is_single_vector(vectors):
        return abs(_l2_norm(vectors) - 1.0)
    worst = None
    for i, vector in enumerate(vectors):
        if i >= limit:
            break
        deviation = abs(_l2_norm(vector) - 1.0)
        worst = deviation if worst is None or deviation > worst else worst
    return worst


def _content(key: str, text: Any) -> str | None:
    """A captured string after truncation and the redaction hook; None when capture is off or redaction failed."""
    state = _state.current
    if state is None or not state.capture_content or text is None:
        return None
    value = text if isinstance(text, str) else json.dumps(text, default=str, ensure_ascii=False)
    if len(value) > state.max_attribute_chars:
        value = value[: state.max_attribute_chars]
    if state.redact is not None:
        try:
            value = state.redact(key, value)
        except Exception as exc:  # fail closed: unredacted text never leaves the process
            state.count("redaction_errors")
            warn_limited("redact", "redaction hook raised %r; content of %s dropped", exc, key)
            return None
    return value


class StageSpan:
    """Base handle: one span, opened on enter and closed on exit with the attributes recorded meanwhile."""

    __slots__ = ("_attributes", "_end", "_name", "_span", "_started_ns", "_token")
    stage: ClassVar[str] = "other"
    kind: ClassVar[SpanKind] = SpanKind.INTERNAL

    def __init__(self, name: str, attributes: dict[str, Any]) -> None:
        self._name = name
        self._attributes = attributes
        self._span: trace_api.Span | None = None
        self._token: object | None = None
        self._end: dict[str, Any] | None = None
        self._started_ns = 0

    # -- lifecycle ---------------------------------------------------------------------------------------
    def __enter__(self: H) -> H:
        state = _state.current
        if state is None:
            return self
        try:
            attributes = self._attributes
            inherited = _REQUEST_ATTRIBUTES.get()
            if inherited:
                attributes = {**inherited, **attributes}
            span = state.tracer.start_span(self._name, kind=self.kind, attributes=attributes)
            self._started_ns = time.monotonic_ns()
            self._token = context_api.attach(trace_api.set_span_in_context(span))
            self._span = span
            self._on_enter(attributes)
        except Exception as exc:
            self._span = None
            state.count("instrumentation_errors")
            warn_limited("enter", "ragmon could not start a %s span: %r", self.stage, exc)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        span = self._span
        if span is None:
            return
        self._span = None
        try:
            if span.is_recording():
                end = self._end if self._end is not None else {}
                if exc is not None:
                    end[attr.ERROR_TYPE] = type(exc).__qualname__
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__qualname__}: {exc}"[:512]))
                    span.record_exception(exc)
                self._finish(end)
                if end:
                    span.set_attributes(end)
            span.end()
        except Exception as exc2:
            state = _state.current
            if state is not None:
                state.count("instrumentation_errors")
            warn_limited("exit", "ragmon could not end a %s span: %r", self.stage, exc2)
        finally:
            self._on_exit()
            if self._token is not None:
                context_api.detach(self._token)  # type: ignore[arg-type]
                self._token = None

    async def __aenter__(self: H) -> H:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, fn: F) -> F:
        """Use as a decorator: every call of `fn` runs in a fresh span of this kind; `ragmon.current()` inside."""
        template = self

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                handle = template._fresh()
                with handle, _decorated(handle):
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            handle = template._fresh()
            with handle, _decorated(handle):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    def _fresh(self: H) -> H:
        clone = object.__new__(type(self))
        StageSpan.__init__(clone, self._name, dict(self._attributes))
        clone._copy_config_from(self)
        return clone

    # -- hooks for subclasses ----------------------------------------------------------------------------
    def _copy_config_from(self, other: StageSpan) -> None:
        return None

    def _on_enter(self, attributes: dict[str, Any]) -> None:
        return None

    def _on_exit(self) -> None:
        return None

    def _finish(self, end: dict[str, Any]) -> None:
        """Add derived attributes to `end` (cost, health figures) just before the span ends."""
        return None

    # -- helpers -----------------------------------------------------------------------------------------
    @property
    def recording(self) -> bool:
        span = self._span
        return span is not None and span.is_recording()

    @property
    def trace_id(self) -> str | None:
        """Hex trace id of the span while it is open, else None."""
        span = self._span
        return None if span is None else format(span.get_span_context().trace_id, "032x")

    def set(self, **attributes: Any) -> None:
        """Extra attributes for this span (any name; ragmon's are in `ragmon.attributes`)."""
        if self._span is not None:
            self._pending().update(attributes)

    def _pending(self) -> dict[str, Any]:
        end = self._end
        if end is None:
            end = self._end = {}
        return end

    def _guarded(self) -> bool:
        """True when recording is worth doing (configured, open, sampled)."""
        span = self._span
        return span is not None and span.is_recording()


class _decorated:
    """Makes `handle` what `ragmon.current()` returns for the duration of a decorated call."""

    __slots__ = ("_handle", "_token")

    def __init__(self, handle: StageSpan) -> None:
        self._handle = handle

    def __enter__(self) -> None:
        self._token = _DECORATED_HANDLE.set(self._handle)

    def __exit__(self, *exc_info: object) -> None:
        _DECORATED_HANDLE.reset(self._token)


def current() -> StageSpan | None:
    """Inside a function decorated with a ragmon stage: its handle (to call `record`). Else None."""
    return _DECORATED_HANDLE.get()


def _count_error(what: str, exc: Exception) -> None:
    state = _state.current
    if state is not None:
        state.count("instrumentation_errors")
    warn_limited(what, "ragmon could not record %s: %r", what, exc)


class _ModelStage(StageSpan):
    """A stage that calls a priced model: embed, rerank, generate."""

    __slots__ = ("_cached_tokens", "_input_tokens", "_model", "_output_tokens", "_search_units")

    def _copy_config_from(self, other: StageSpan) -> None:
        assert isinstance(other, _ModelStage)
        self._init_usage(other._model)

    def _init_usage(self, model: str | None) -> None:
        self._model = model
        self._input_tokens: int | None = None
        self._output_tokens: int | None = None
        self._cached_tokens: int | None = None
        self._search_units: int | None = None

    def _usage(
        self,
        end: dict[str, Any],
        input_tokens: int | None,
        output_tokens: int | None = None,
        cached_tokens: int | None = None,
    ) -> None:
        if input_tokens is not None:
            self._input_tokens = int(input_tokens)
            end[attr.GEN_AI_USAGE_INPUT_TOKENS] = self._input_tokens
        if output_tokens is not None:
            self._output_tokens = int(output_tokens)
            end[attr.GEN_AI_USAGE_OUTPUT_TOKENS] = self._output_tokens
        if cached_tokens is not None:
            self._cached_tokens = int(cached_tokens)
            end[attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = self._cached_tokens

    def _finish(self, end: dict[str, Any]) -> None:
        if self._input_tokens is None and self._output_tokens is None and self._search_units is None:
            return  # no usage: nothing to price, and not "unknown model" either
        state = _state.current
        if state is None:
            return
        cost = state.prices.cost_usd(
            self._model, self._input_tokens, self._output_tokens, self._cached_tokens, self._search_units
        )
        if cost is None:
            end[attr.RAGMON_COST_UNKNOWN_MODEL] = True
        else:
            end[attr.OI_COST_TOTAL] = cost


def _model_attributes(stage: str, model: str | None, provider: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {attr.GEN_AI_OPERATION_NAME: attr.OPERATION_BY_STAGE[stage]}
    if model:
        attributes[attr.GEN_AI_REQUEST_MODEL] = model
    if provider:
        attributes[attr.GEN_AI_PROVIDER_NAME] = provider
    return attributes


class RequestSpan(StageSpan):
    """The root of one RAG request. Its feature, user and session are copied onto every span inside it."""

    __slots__ = ("_inherited_token", "_question")
    stage = "request"

    def __init__(
        self,
        feature: str,
        *,
        user: str | None = None,
        session: str | None = None,
        question: str | None = None,
        request_id: str | None = None,
    ) -> None:
        attributes: dict[str, Any] = {attr.RAGMON_STAGE: "request", attr.RAGMON_FEATURE: feature}
        if request_id is not None:  # the app's own id of this request: `ragmon.feedback(request_id=...)` names it
            attributes[attr.RAGMON_REQUEST_ID] = str(request_id)
        if user is not None:
            attributes[attr.RAGMON_USER] = str(user)
        if session is not None:
            attributes[attr.RAGMON_SESSION] = str(session)
        super().__init__(f"request {feature}", attributes)
        self._question = question
        self._inherited_token: contextvars.Token[dict[str, Any] | None] | None = None

    def _copy_config_from(self, other: StageSpan) -> None:
        assert isinstance(other, RequestSpan)
        self._question = other._question
        self._inherited_token = None

    def _on_enter(self, attributes: dict[str, Any]) -> None:
        state = _state.current
        if state is not None and state.request_attributes:
            self._pending().update(state.request_attributes)
        inherited = {k: v for k, v in attributes.items() if k in _INHERITED_KEYS}
        self._inherited_token = _REQUEST_ATTRIBUTES.set(inherited)
        _EMBEDDED_VECTOR.set(None)
        if self._question is not None:
            question = _content(attr.RAGMON_QUESTION, self._question)
            if question is not None:
                self._pending()[attr.RAGMON_QUESTION] = question

    def _on_exit(self) -> None:
        if self._inherited_token is not None:
            _REQUEST_ATTRIBUTES.reset(self._inherited_token)
            self._inherited_token = None

    def record(self, answer: str | None = None, **attributes: Any) -> None:
        if not self._guarded():
            return
        try:
            end = self._pending()
            if answer is not None:
                text = _content(attr.RAGMON_ANSWER, answer)
                if text is not None:
                    end[attr.RAGMON_ANSWER] = text
            end.update(attributes)
        except Exception as exc:
            _count_error("request", exc)


# Only the feature rides on every span: per-minute rollups group spans by feature as they arrive, before the root.
# User and session are per-trace facts; the root carries them.
_INHERITED_KEYS = frozenset({attr.RAGMON_FEATURE})


class EmbedSpan(_ModelStage):
    __slots__ = ()
    stage = "embed"
    kind = SpanKind.CLIENT

    def __init__(self, model: str | None = None, *, provider: str | None = None) -> None:
        super().__init__(f"embeddings {model}" if model else "embeddings", _model_attributes("embed", model, provider))
        self._init_usage(model)

    def record(
        self, input_tokens: int | None = None, vectors: Any = None, count: int | None = None, **attributes: Any
    ) -> None:
        """`vectors`: the embedding(s) produced — one vector or a batch; the norm check looks at the first few."""
        if not self._guarded():
            return
        try:
            end = self._pending()
            self._usage(end, input_tokens)
            if vectors is not None:
                state = _state.current
                limit = state.index_vector_sample if state is not None else 0
                deviation = _max_norm_deviation(vectors, max(limit, 1))
                if deviation is not None:
                    end[attr.RAGMON_QUERY_NORM_DEVIATION] = deviation
                    _EMBEDDED_VECTOR.set(vectors)
                if count is None and not _is_single_vector(vectors):
                    count = len(vectors)
            if count is not None and count != 1:
                end[attr.RAGMON_EMBEDDING_COUNT] = int(count)
            end.update(attributes)
        except Exception as exc:
            _count_error("embed", exc)


def _retrieval_attributes(end: dict[str, Any], documents: Iterable[Any], text_key: str, *, health: bool = True) -> int:
    """Record documents in rank order (ids/scores, texts if captured) and, with `health`, the rank-1 score and the
    similarity gap; return how many. Rerank output skips health: a reranker's scores are on its own scale, and
    the agent derives both figures from the documents whenever it needs them."""
    end[attr.GEN_AI_RETRIEVAL_DOCUMENTS], scores, texts = _documents(documents)
    if scores:
        if health:
            top = scores[0]
            end[attr.RAGMON_TOP1_SCORE] = top
            end[attr.RAGMON_SIMILARITY_GAP] = top - scores[min(_GAP_RANK, len(scores)) - 1]
        state = _state.current
        if state is not None and state.capture_content and any(t is not None for t in texts):
            captured = [_content(text_key, t or "") for t in texts]
            if all(t is not None for t in captured):
                end[attr.RAGMON_DOCUMENT_TEXTS] = captured
    return len(scores)


class SearchSpan(StageSpan):
    __slots__ = ("_query",)
    stage = "search"
    kind = SpanKind.CLIENT

    def __init__(self, *, top_k: int | None = None, data_source: str | None = None, query: str | None = None) -> None:
        attributes: dict[str, Any] = {attr.GEN_AI_OPERATION_NAME: "retrieval"}
        if top_k is not None:
            attributes[attr.GEN_AI_REQUEST_TOP_K] = int(top_k)
        if data_source:
            attributes[attr.GEN_AI_DATA_SOURCE_ID] = data_source
        super().__init__(f"retrieval {data_source}" if data_source else "retrieval", attributes)
        self._query = query

    def _copy_config_from(self, other: StageSpan) -> None:
        assert isinstance(other, SearchSpan)
        self._query = other._query

    def _on_enter(self, attributes: dict[str, Any]) -> None:
        if self._query is not None:
            text = _content(attr.GEN_AI_RETRIEVAL_QUERY_TEXT, self._query)
            if text is not None:
                self._pending()[attr.GEN_AI_RETRIEVAL_QUERY_TEXT] = text

    def record(
        self,
        documents: Iterable[Any] = (),
        query_vector: Any = None,
        index_vectors: Any = None,
        **attributes: Any,
    ) -> None:
        """`documents` in rank order — (id, score[, text[, source]]) tuples, mappings or objects (`Document`);
        `query_vector` and a sample of `index_vectors` feed the norm check."""
        if not self._guarded():
            return
        try:
            end = self._pending()
            _retrieval_attributes(end, documents, attr.RAGMON_DOCUMENT_TEXTS)
            if query_vector is not None and query_vector is not _EMBEDDED_VECTOR.get():
                # The same vector the embed span just measured is not recorded twice (one attribute less).
                end[attr.RAGMON_QUERY_NORM_DEVIATION] = abs(_l2_norm(query_vector) - 1.0)
            if index_vectors is not None:
                state = _state.current
                deviation = _max_norm_deviation(index_vectors, state.index_vector_sample if state else 0)
                if deviation is not None:
                    end[attr.RAGMON_INDEX_NORM_DEVIATION] = deviation
            end.update(attributes)
        except Exception as exc:
            _count_error("search", exc)


class RerankSpan(_ModelStage):
    __slots__ = ("_rerank_query",)
    stage = "rerank"
    kind = SpanKind.CLIENT

    def __init__(
        self,
        model: str | None = None,
        *,
        provider: str | None = None,
        top_k: int | None = None,
        query: str | None = None,
    ) -> None:
        attributes = _model_attributes("rerank", model, provider)
        if top_k is not None:
            attributes[attr.GEN_AI_REQUEST_TOP_K] = int(top_k)
        super().__init__(f"rerank {model}" if model else "rerank", attributes)
        self._init_usage(model)
        self._rerank_query = query

    def _copy_config_from(self, other: StageSpan) -> None:
        assert isinstance(other, RerankSpan)
        super()._copy_config_from(other)
        self._rerank_query = other._rerank_query

    def _on_enter(self, attributes: dict[str, Any]) -> None:
        if self._rerank_query is not None:
            text = _content(attr.OI_RERANKER_QUERY, self._rerank_query)
            if text is not None:
                self._pending()[attr.OI_RERANKER_QUERY] = text

    def record(
        self,
        input_ids: Sequence[Any] | None = None,
        documents: Iterable[Any] = (),
        search_units: int | None = None,
        **attributes: Any,
    ) -> None:
        """`input_ids` in the order the reranker received them; `documents` in its output order, with scores.

        `search_units` defaults to 1 per call when the reranker returned documents (Cohere-style billing).
        """
        if not self._guarded():
            return
        try:
            end = self._pending()
            if input_ids is not None:
                end[attr.RAGMON_RERANK_INPUT_IDS] = [str(i) for i in input_ids]
            returned = _retrieval_attributes(end, documents, attr.RAGMON_DOCUMENT_TEXTS, health=False)
            if search_units is not None:
                end[attr.RAGMON_SEARCH_UNITS] = int(search_units)
            elif returned:
                search_units = 1  # priced, not recorded: one search unit per call is the common billing
            if search_units is not None:
                self._search_units = int(search_units)
            end.update(attributes)
        except Exception as exc:
            _count_error("rerank", exc)


class GenerateSpan(_ModelStage):
    __slots__ = ("_chunks", "_first_token_ns", "_last_chunk_ns", "_messages")
    stage = "generate"
    kind = SpanKind.CLIENT

    def __init__(
        self, model: str | None = None, *, provider: str | None = None, messages: Sequence[Any] | None = None
    ) -> None:
        super().__init__(f"chat {model}" if model else "chat", _model_attributes("generate", model, provider))
        self._init_usage(model)
        self._messages = messages
        self._reset_stream()

    def _reset_stream(self) -> None:
        self._first_token_ns = 0
        self._last_chunk_ns = 0
        self._chunks = 0

    def _copy_config_from(self, other: StageSpan) -> None:
        super()._copy_config_from(other)
        self._messages = getattr(other, "_messages", None)
        self._reset_stream()

    def _on_enter(self, attributes: dict[str, Any]) -> None:
        if self._messages is not None:
            text = _content(attr.GEN_AI_INPUT_MESSAGES, list(self._messages))
            if text is not None:
                self._pending()[attr.GEN_AI_INPUT_MESSAGES] = text

    def record(
        self,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cached_input_tokens: int | None = None,
        answer: str | None = None,
        finish_reason: str | None = None,
        response_model: str | None = None,
        **attributes: Any,
    ) -> None:
        if not self._guarded():
            return
        try:
            end = self._pending()
            self._usage(end, input_tokens, output_tokens, cached_input_tokens)
            if finish_reason is not None:
                end[attr.GEN_AI_RESPONSE_FINISH_REASONS] = [finish_reason]
            if response_model is not None:
                end[attr.GEN_AI_RESPONSE_MODEL] = response_model
                if self._model is None:
                    self._model = response_model
            if answer is not None:
                message = [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
                if finish_reason is not None:
                    message[0]["finish_reason"] = finish_reason
                text = _content(attr.GEN_AI_OUTPUT_MESSAGES, message)
                if text is not None:
                    end[attr.GEN_AI_OUTPUT_MESSAGES] = text
            end.update(attributes)
        except Exception as exc:
            _count_error("generate", exc)

    def first_token(self) -> None:
        """Call when the first token (or chunk) of a streamed answer arrives."""
        if self._first_token_ns == 0 and self._span is not None:
            self._first_token_ns = self._last_chunk_ns = time.monotonic_ns()
            self._chunks = 1

    def chunk(self) -> None:
        """Call for every streamed chunk; the first call also counts as the first token."""
        if self._span is None:
            return
        if self._first_token_ns == 0:
            self.first_token()
            return
        self._last_chunk_ns = time.monotonic_ns()
        self._chunks += 1

    def stream(self, chunks: Iterable[Any]) -> Iterator[Any]:
        """Yield `chunks` unchanged while timing them."""
        for item in chunks:
            self.chunk()
            yield item

    async def astream(self, chunks: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for item in chunks:
            self.chunk()
            yield item

    def _finish(self, end: dict[str, Any]) -> None:
        super()._finish(end)
        if self._first_token_ns:
            end[attr.RAGMON_TTFT_MS] = (self._first_token_ns - self._started_ns) / 1e6
            end[attr.RAGMON_STREAMED_CHUNKS] = self._chunks
            if self._chunks > 1:
                streamed_ms = (self._last_chunk_ns - self._first_token_ns) / 1e6
                end[attr.RAGMON_INTER_TOKEN_MS] = streamed_ms / (self._chunks - 1)


class ToolSpan(StageSpan):
    __slots__ = ("_arguments", "_failed")
    stage = "tool"
    kind = SpanKind.INTERNAL

    def __init__(self, name: str, *, arguments: Any = None) -> None:
        attributes = {
            attr.GEN_AI_OPERATION_NAME: "execute_tool",
            attr.GEN_AI_TOOL_NAME: name,
        }
        super().__init__(f"execute_tool {name}", attributes)
        self._arguments = arguments
        self._failed = False

    def _copy_config_from(self, other: StageSpan) -> None:
        self._arguments = getattr(other, "_arguments", None)
        self._failed = False

    def _on_enter(self, attributes: dict[str, Any]) -> None:
        if self._arguments is not None:
            text = _content(attr.GEN_AI_TOOL_CALL_ARGUMENTS, self._arguments)
            if text is not None:
                self._pending()[attr.GEN_AI_TOOL_CALL_ARGUMENTS] = text

    def record(self, result: Any = None, status: str = "ok", **attributes: Any) -> None:
        """`status` is "ok" or an error word; a non-ok status marks the span ERROR with error.type=tool_error."""
        if not self._guarded():
            return
        try:
            end = self._pending()
            end[attr.RAGMON_TOOL_STATUS] = status
            if result is not None:
                text = _content(attr.GEN_AI_TOOL_CALL_RESULT, result)
                if text is not None:
                    end[attr.GEN_AI_TOOL_CALL_RESULT] = text
            end.update(attributes)
            if status != "ok" and self._span is not None:
                end[attr.ERROR_TYPE] = "tool_error"
                self._span.set_status(Status(StatusCode.ERROR, f"tool returned {status}"))
        except Exception as exc:
            _count_error("tool", exc)


def bind_context(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` bound to the current context, so spans it opens on another thread join the current trace.

    Thread pools do not carry context variables; asyncio tasks do. Use as `pool.submit(ragmon.bind_context(f), x)`.
    """
    ctx = contextvars.copy_context()

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        return ctx.copy().run(fn, *args, **kwargs)

    return run
