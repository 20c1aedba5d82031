"""The LLM judge: metrics scored by any OpenAI-compatible chat-completions endpoint, over httpx (async).

Every call goes through the same gate, in this order: the requests-per-minute bucket, the concurrency limit,
the budget (the worst-case cost is reserved first; a call that could exceed the budget is not made:
budget_exhausted), then HTTP with a bounded timeout. Errors are classified once, here:

    httpx.ConnectError             → retry (not sent, not billed)
    httpx.TimeoutException, other  → retry (maybe billed: the worst case stays charged)
    transport errors (truncated body, reset)
    429                            → retry after Retry-After (seconds, fractions allowed, or retry-after-ms)
    500–599                        → retry with jittered backoff (OpenAI documents them as transient)
    other 4xx                      → llm_error at once
    200 with a body that is not JSON → parse_error (worst case charged: usage unknown)

Retries follow ragmon.retry.RetryPolicy (bounded attempts and a total deadline); giving up is llm_error. A reply
whose content is not the JSON object asked for gets one repair request; if that fails too, parse_error.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from ragmon.judges.budget import Budget
from ragmon.judges.conversation import in_context, with_turns
from ragmon.judges.metrics import METRICS
from ragmon.judges.parsing import ReplyParseError, parse_reply
from ragmon.judges.prompts import Prompt
from ragmon.judges.protocol import Embeddings, Generation
from ragmon.judges.ratelimit import TokenBucket
from ragmon.judges.types import MetricResult, RagSample, Status, Turn, Usage

from ragmon.pricing import ModelPrice, PriceTable, load_price_table
from ragmon.retry import RetryPolicy, parse_retry_after

T = TypeVar("T", bound=BaseModel)

# The feature whose budget a call is charged to; the worker sets it per trace.
current_feature: contextvars.ContextVar[str] = contextvars.ContextVar("ragmon_judge_feature", default="")
# The earlier turns of the follow-up being scored, which every prompt of its metric carries (`score`).
_earlier_turns: contextvars.ContextVar[Sequence[Turn]] = contextvars.ContextVar("ragmon_judge_turns", default=())

_MESSAGE_OVERHEAD_TOKENS = 8  # role and separators per chat message, generously
_REQUEST_OVERHEAD_TOKENS = 16


def llm_version(model: str) -> str:
    """An LLM judge's version: its model (prompts are versioned with the package)."""
    return f"llm:{model}"


class LLMJudgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str
    api_key: SecretStr | None = None
    model: str = "gpt-4o-mini"
    embedding_model: str = "text-embedding-3-small"
    requests_per_minute: int = Field(default=600, ge=1)
    max_concurrency: int = Field(default=8, ge=1)
    budget_usd: float = Field(default=5.0, ge=0)  # per UTC day
    per_feature_budget_usd: dict[str, float] = Field(default_factory=dict)
    max_tokens: int = Field(default=1024, ge=16)
    timeout_s: float = Field(default=30.0, gt=0)
    max_attempts: int = Field(default=4, ge=1)
    initial_backoff_s: float = Field(default=0.5, ge=0)
    max_backoff_s: float = Field(default=10.0, ge=0)
    retry_deadline_s: float = Field(default=120.0, gt=0)
    faithfulness_threshold: float = Field(default=0.5, ge=0, le=1)
    price_file: Path | None = None


@dataclass(frozen=True)
class _Call:
    status: Status
    payload: dict[str, Any] | None
    usage: Usage
    error: str = ""


def estimate_prompt_tokens(messages: Sequence[Mapping[str, str]]) -> int:
    """An upper bound on prompt tokens: BPE tokens cover at least one byte each, so UTF-8 bytes bound them."""
    content = sum(len(m.get("content", "").encode()) for m in messages)
    return content + _MESSAGE_OVERHEAD_TOKENS * len(messages) + _REQUEST_OVERHEAD_TOKENS


class LLMJudge:
    """Implements `StructuredLLM`, `Embedder` and `Judge`. Use as ``async with LLMJudge(config) as judge``."""

    name = "llm"

    def __init__(
        self,
        config: LLMJudgeConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        budget: Budget | None = None,
        prices: PriceTable | None = None,
    ) -> None:
        self.config = config
        self._prices = prices or load_price_table(config.price_file)
        price = self._prices.lookup(config.model)
        if price is None or price.input_per_1m is None or price.output_per_1m is None:
            # Fail fast: without a price the budget cannot be enforced, and spend would be invisible.
            raise ValueError(f"no input/output price for judge model {config.model!r}; add it with a price file")
        self._price: ModelPrice = price
        self.budget = budget or Budget(config.budget_usd, per_feature_usd=config.per_feature_budget_usd)
        self._bucket = TokenBucket(config.requests_per_minute)
        self._slots = asyncio.Semaphore(config.max_concurrency)
        self._policy = RetryPolicy(
            max_attempts=config.max_attempts,
            initial_backoff_s=config.initial_backoff_s,
            max_backoff_s=config.max_backoff_s,
            deadline_s=config.retry_deadline_s,
        )
        headers = {"authorization": f"Bearer {config.api_key.get_secret_value()}"} if config.api_key else {}
        self._client = httpx.AsyncClient(
            base_url=config.base_url.rstrip("/"),
            headers=headers,
            transport=transport,
            timeout=httpx.Timeout(config.timeout_s),
            limits=httpx.Limits(max_connections=config.max_concurrency),
        )
        self.calls = 0  # HTTP requests made (attempts, repairs included)

    # -- Judge ---------------------------------------------------------------------------------------------
    @property
    def model(self) -> str:
        return self.config.model

    @property
    def embedding_model(self) -> str:
        return self.config.embedding_model

    @property
    def version(self) -> str:
        return llm_version(self.config.model)

    @property
    def faithfulness_threshold(self) -> float:
        return self.config.faithfulness_threshold

    async def score(self, metric: str, sample: RagSample) -> MetricResult:
        definition = METRICS.get(metric)
        if definition is None:
            raise KeyError(f"unknown metric {metric!r}; known: {sorted(METRICS)}")
        judged, turns = in_context(sample)
        if not turns:
            return await definition.score(sample, self)
        token = _earlier_turns.set(turns)  # a context variable: each concurrent score() has its own
        try:
            result = await definition.score(judged, self)
        finally:
            _earlier_turns.reset(token)
        return result.model_copy(update={"prompt_version": with_turns(result.prompt_version)})

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> LLMJudge:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- StructuredLLM ---------------------------------------------------------------------------------------
    async def generate(self, prompt: Prompt, inputs: Mapping[str, Any], output: type[T]) -> Generation[T]:
        messages = prompt.render(inputs, _earlier_turns.get())
        first = await self._chat(messages)
        if first.payload is None:
            return Generation(None, first.status, first.usage, first.error)
        content, finish = _content(first.payload)
        try:
            return Generation(parse_reply(content, output), Status.OK, first.usage)
        except ReplyParseError as exc:
            error = str(exc)
        if finish == "length":
            # Cut off at max_tokens: asking again would be cut off again.
            return Generation(None, Status.PARSE_ERROR, first.usage, f"reply truncated at max_tokens: {error}")
        repair = [
            *messages,
            {"role": "assistant", "content": content},
            {"role": "user", "content": f"That reply was not valid: {error}. Reply with only the JSON object."},
        ]
        second = await self._chat(repair)
        usage = first.usage + second.usage
        if second.payload is None:
            return Generation(None, second.status, usage, second.error)
        try:
            return Generation(parse_reply(_content(second.payload)[0], output), Status.OK, usage)
        except ReplyParseError as exc:
            return Generation(None, Status.PARSE_ERROR, usage, f"after one repair: {exc}")

    # -- Embedder --------------------------------------------------------------------------------------------
    async def embed(self, texts: Sequence[str]) -> Embeddings:
        body = {"model": self.config.embedding_model, "input": list(texts), "encoding_format": "float"}
        tokens_bound = sum(len(t.encode()) for t in texts) + _REQUEST_OVERHEAD_TOKENS
        price = self._prices.lookup(self.config.embedding_model)
        if price is None or price.input_per_1m is None:
            return Embeddings(None, Status.LLM_ERROR, Usage(), f"no price for {self.config.embedding_model!r}")
        call = await self._post(
            "/embeddings", body, tokens_bound * price.input_per_1m / 1e6, self.config.embedding_model
        )
        if call.payload is None:
            return Embeddings(None, call.status, call.usage, call.error)
        try:
            data = sorted(call.payload["data"], key=lambda d: int(d["index"]))
            vectors = [[float(x) for x in d["embedding"]] for d in data]
        except (KeyError, TypeError, ValueError) as exc:
            return Embeddings(None, Status.PARSE_ERROR, call.usage, f"bad embeddings body: {exc!r}")
        return Embeddings(vectors, Status.OK, call.usage)

    # -- HTTP ------------------------------------------------------------------------------------------------
    async def _chat(self, messages: list[dict[str, str]]) -> _Call:
        body = {
            "model": self.config.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": self.config.max_tokens,
            "response_format": {"type": "json_object"},
        }
        worst = (
            estimate_prompt_tokens(messages) * (self._price.input_per_1m or 0.0) / 1e6
            + self.config.max_tokens * (self._price.output_per_1m or 0.0) / 1e6
        )
        return await self._post("/chat/completions", body, worst, self.config.model)

    async def _post(self, path: str, body: dict[str, Any], worst_usd: float, model: str) -> _Call:
        started = time.monotonic()
        charged = Usage()  # what failed attempts cost (worst case when unknown)
        attempt = 0
        while True:
            attempt += 1
            await self._bucket.acquire()
            reservation = self.budget.reserve(worst_usd, current_feature.get())
            if reservation is None:
                return _Call(
                    Status.BUDGET_EXHAUSTED, None, charged, f"worst-case cost ${worst_usd:.6f} would exceed the budget"
                )
            retry_after: float | None = None
            async with self._slots:
                self.calls += 1
                try:
                    response = await self._client.post(path, json=body)
                except httpx.ConnectError as exc:
                    self.budget.release(reservation)
                    error = f"connect error: {exc!r}"
                except httpx.TransportError as exc:  # timeouts, truncated bodies, resets: maybe billed
                    self.budget.settle(reservation, None)
                    charged = charged + Usage(cost_usd=reservation.amount_nano / 1e9, calls=1)
                    kind = "timeout" if isinstance(exc, httpx.TimeoutException) else "transport error"
                    error = f"{kind}: {exc!r}"
                else:
                    status = response.status_code
                    if status == 200:
                        try:
                            payload = response.json()
                            if not isinstance(payload, dict):
                                raise ValueError("not an object")
                        except ValueError as exc:
                            self.budget.settle(reservation, None)
                            charged = charged + Usage(cost_usd=reservation.amount_nano / 1e9, calls=1)
                            return _Call(Status.PARSE_ERROR, None, charged, f"response body is not JSON: {exc}")
                        usage = self._usage(payload, model)
                        self.budget.settle(reservation, usage.cost_usd)
                        return _Call(Status.OK, payload, charged + usage)
                    self.budget.release(reservation)  # errors are not billed
                    error = f"HTTP {status}: {response.text[:200]}"
                    if status == 429:
                        retry_after = _retry_after_s(response.headers)
                    elif not 500 <= status <= 599:
                        return _Call(Status.LLM_ERROR, None, charged, error)
            delay = self._policy.next_delay_s(attempt, time.monotonic() - started, retry_after)
            if delay is None:
                return _Call(Status.LLM_ERROR, None, charged, f"gave up after {attempt} attempts: {error}")
            await asyncio.sleep(delay)

    def _usage(self, payload: Mapping[str, Any], model: str) -> Usage:
        raw = payload.get("usage") or {}
        prompt_tokens = int(raw.get("prompt_tokens") or 0)
        completion_tokens = int(raw.get("completion_tokens") or 0)
        cached = int(((raw.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0)
        # The request's model is what the price was reserved for; the reply's may carry a date suffix.
        cost = self._prices.cost_usd(model, prompt_tokens, completion_tokens, cached)
        return Usage(input_tokens=prompt_tokens, output_tokens=completion_tokens, cost_usd=cost, calls=1)


def _content(payload: Mapping[str, Any]) -> tuple[str, str]:
    try:
        choice = payload["choices"][0]
        return str(choice["message"]["content"] or ""), str(choice.get("finish_reason") or "")
    except (KeyError, IndexError, TypeError):
        return "", ""


def _retry_after_s(headers: httpx.Headers) -> float | None:
    """OpenAI's `retry-after-ms` first, then the standard `Retry-After` (seconds, fractions allowed, or a date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        with contextlib.suppress(ValueError):
            return max(0.0, float(ms) / 1000.0)
    return parse_retry_after(headers.get("retry-after"))
