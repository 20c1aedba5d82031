"""Answer generators for the demo app, instrumented with ragmon's generate stage.

- `ExtractiveGenerator`: offline and deterministic. Picks the passage sentences that best match the question
  (IDF-weighted term overlap, earlier passages preferred) and "streams" them one sentence per chunk, so the
  span gets a real time to first token. Token counts are estimates.
- `OpenAICompatibleGenerator`: POSTs to ``{base_url}/chat/completions`` (OpenAI, vLLM, Ollama, LiteLLM...),
  optionally streaming server-sent events, with usage read from the reply. httpx errors are mapped to
  `GeneratorError`/`RateLimitError` at this boundary.

Both accept `fabricated_claim`: the unfaithful-answer fault appends it to the answer inside the span, so the
recorded answer contains a claim no passage supports.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

import ragmon
from ragmon.demo.errors import GeneratorError, RateLimitError
from ragmon.demo.passages import Passage
from ragmon.demo.reranker import TermStats
from ragmon.demo.retriever import StageHook, _no_hook
from ragmon.demo.text import estimate_tokens, sentences, terms

SYSTEM_PROMPT = (
    "You answer questions about ragmon using only the numbered passages. "
    "If the passages do not contain the answer, say so. Be brief."
)
NO_ANSWER = "The documentation I found does not answer this question."
_SHORT_SENTENCE_WORDS = 8


@dataclass(frozen=True, slots=True)
class Generation:
    text: str
    input_tokens: int
    output_tokens: int
    finish_reason: str
    model: str
    chunks: int = 1


class Generator(Protocol):
    model: str
    provider: str

    def generate(
        self,
        question: str,
        passages: Sequence[Passage],
        *,
        tool_result: str | None = None,
        fabricated_claim: str | None = None,
        hook: StageHook = _no_hook,
    ) -> Generation: ...


def build_messages(question: str, passages: Sequence[Passage], tool_result: str | None = None) -> list[dict[str, str]]:
    """Chat messages in the OpenAI shape: system rules, then the passages and the question."""
    context = "\n\n".join(f"[{i + 1}] ({p.id}) {p.text}" for i, p in enumerate(passages))
    user = f"Passages:\n{context}\n\n"
    if tool_result:
        user += f"Tool result: {tool_result}\n\n"
    user += f"Question: {question}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def _message_tokens(messages: Sequence[dict[str, str]]) -> int:
    # ~4 tokens of chat framing per message, as OpenAI's counting guide describes.
    return sum(4 + estimate_tokens(m["content"]) for m in messages)


class ExtractiveGenerator:
    model = "ragmon-extractive"
    provider = "ragmon"

    def __init__(self, corpus: Sequence[Passage], *, max_sentences: int = 2, min_relative_score: float = 0.35) -> None:
        self.stats = TermStats.from_texts(p.text for p in corpus)
        self.max_sentences = max_sentences
        self.min_relative_score = min_relative_score

    def select(self, question: str, passages: Sequence[Passage]) -> list[str]:
        """The answer sentences, in passage order. Empty when no sentence shares a content word."""
        query = set(terms(question))
        scored: list[tuple[float, int, int, str]] = []
        for rank, passage in enumerate(passages):
            for position, sentence in enumerate(sentences(passage.text)):
                overlap = query.intersection(terms(sentence))
                if not overlap:
                    continue
                # Earlier (better-ranked) passages win ties; the reranker already judged them.
                score = sum(self.stats.idf(t) for t in overlap) / (1.0 + 0.3 * rank)
                scored.append((score, rank, position, sentence))
        if not scored:
            return []
        best = max(s[0] for s in scored)
        chosen = sorted(scored, key=lambda s: (-s[0], s[1], s[2]))[: self.max_sentences]
        chosen = [s for s in chosen if s[0] >= self.min_relative_score * best]
        out: list[str] = []
        for _, rank, position, sentence in sorted(chosen, key=lambda s: (s[1], s[2])):
            if sentence in out:
                continue
            out.append(sentence)
            following = sentences(passages[rank].text)[position + 1 : position + 2]
            # A short lead-in ("ragmon has two halves.") says nothing alone; the next sentence carries it.
            if len(sentence.split()) < _SHORT_SENTENCE_WORDS and following and following[0] not in out:
                out.append(following[0])
        return out

    def stream(
        self,
        question: str,
        passages: Sequence[Passage],
        tool_result: str | None = None,
        fabricated_claim: str | None = None,
    ) -> Iterator[str]:
        """The answer one sentence at a time (the chunks a streaming LLM would send)."""
        chosen = self.select(question, passages) or [NO_ANSWER]
        if tool_result:
            chosen = [*chosen, f"Current defaults: {tool_result}."]
        if fabricated_claim:
            chosen = [*chosen, fabricated_claim]
        for i, sentence in enumerate(chosen):
            yield sentence if i == 0 else " " + sentence

    def generate(
        self,
        question: str,
        passages: Sequence[Passage],
        *,
        tool_result: str | None = None,
        fabricated_claim: str | None = None,
        hook: StageHook = _no_hook,
    ) -> Generation:
        messages = build_messages(question, passages, tool_result)
        with ragmon.generate(self.model, provider=self.provider, messages=messages) as span:
            hook("generate")
            parts: list[str] = []
            for chunk in self.stream(question, passages, tool_result, fabricated_claim):
                span.chunk()  # the first call is the first token
                parts.append(chunk)
            text = "".join(parts)
            result = Generation(text, _message_tokens(messages), estimate_tokens(text), "stop", self.model, len(parts))
            span.record(
                input_tokens=result.input_tokens,
                output_tokens=result.output_tokens,
                answer=text,
                finish_reason=result.finish_reason,
                response_model=self.model,
            )
        return result


class OpenAICompatibleGenerator:
    """Chat completions over HTTP. Pass `client` (e.g. with `httpx.MockTransport`) to test without a network."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        provider: str = "openai",
        stream: bool = False,
        timeout_s: float = 30.0,
        max_output_tokens: int = 400,
        client: httpx.Client | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.provider = provider
        self.stream = stream
        self.max_output_tokens = max_output_tokens
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(timeout=timeout_s)
        self._headers = headers

    def close(self) -> None:
        self._client.close()

    def _body(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": self.max_output_tokens,
        }
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}  # usage arrives in the last chunk
        return body

    def generate(
        self,
        question: str,
        passages: Sequence[Passage],
        *,
        tool_result: str | None = None,
        fabricated_claim: str | None = None,
        hook: StageHook = _no_hook,
    ) -> Generation:
        messages = build_messages(question, passages, tool_result)
        with ragmon.generate(self.model, provider=self.provider, messages=messages) as span:
            hook("generate")
            try:
                result = self._streamed(messages, span) if self.stream else self._single(messages)
            except httpx.TimeoutException as exc:
                raise GeneratorError(f"LLM call timed out: {exc}") from exc
            except httpx.TransportError as exc:
                raise GeneratorError(f"LLM endpoint unreachable: {exc}") from exc
            if fabricated_claim:
                result = Generation(
                    f"{result.text} {fabricated_claim}",
                    result.input_tokens,
                    result.output_tokens + estimate_tokens(fabricated_claim),
                    result.finish_reason,
                    result.model,
                    result.chunks,
                )
            span.record(
                input_tokens=result.input_tokens,
                output_tokens=result.output_tokens,
                answer=result.text,
                finish_reason=result.finish_reason,
                response_model=result.model,
            )
        return result

    def _check(self, response: httpx.Response) -> None:
        if response.status_code == 429:
            raise RateLimitError(f"LLM endpoint rate-limited the call (429): {response.text[:200]}")
        if response.status_code >= 400:
            raise GeneratorError(f"LLM endpoint answered {response.status_code}: {response.text[:200]}")

    def _single(self, messages: list[dict[str, str]]) -> Generation:
        response = self._client.post(self.url, json=self._body(messages), headers=self._headers)
        self._check(response)
        try:
            data = response.json()
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            usage = data.get("usage") or {}
            return Generation(
                text=text,
                input_tokens=int(usage.get("prompt_tokens", _message_tokens(messages))),
                output_tokens=int(usage.get("completion_tokens", estimate_tokens(text))),
                finish_reason=str(choice.get("finish_reason") or "stop"),
                model=str(data.get("model") or self.model),
            )
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise GeneratorError(f"malformed chat completion: {exc!r}") from exc

    def _streamed(self, messages: list[dict[str, str]], span: ragmon.GenerateSpan) -> Generation:
        parts: list[str] = []
        usage: dict[str, Any] = {}
        finish_reason = "stop"
        model = self.model
        chunks = 0
        with self._client.stream("POST", self.url, json=self._body(messages), headers=self._headers) as response:
            if response.status_code >= 400:
                response.read()
                self._check(response)
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue  # SSE comments and keep-alives
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                try:
                    event = json.loads(payload)
                except ValueError as exc:
                    raise GeneratorError(f"malformed stream event: {payload[:100]!r}") from exc
                model = str(event.get("model") or model)
                if event.get("usage"):
                    usage = event["usage"]
                for choice in event.get("choices") or []:
                    delta = (choice.get("delta") or {}).get("content")
                    if delta:
                        span.chunk()
                        chunks += 1
                        parts.append(delta)
                    if choice.get("finish_reason"):
                        finish_reason = str(choice["finish_reason"])
        text = "".join(parts)
        return Generation(
            text=text,
            input_tokens=int(usage.get("prompt_tokens", _message_tokens(messages))),
            output_tokens=int(usage.get("completion_tokens", estimate_tokens(text))),
            finish_reason=finish_reason,
            model=model,
            chunks=chunks,
        )
