"""The interfaces between metrics and judges.

- `StructuredLLM`: one prompt in, one pydantic-validated object out (or a non-ok status). The LLM judge
  implements it over HTTP; tests and other backends may implement it however they like.
- `Embedder`: texts in, vectors out (answer relevance).
- `Judge`: what the worker and `ragmon calibrate` use — score one metric on one sample. Backends are chosen by
  name (see judges/registry.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel
from ragmon.judges.prompts import Prompt
from ragmon.judges.types import MetricResult, RagSample, Status, Usage

T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True)
class Generation(Generic[T]):
    """One structured LLM step: `value` is set only when `status` is ok."""

    value: T | None
    status: Status
    usage: Usage
    error: str = ""


@dataclass(frozen=True)
class Embeddings:
    vectors: list[list[float]] | None
    status: Status
    usage: Usage
    error: str = ""


class StructuredLLM(Protocol):
    @property
    def model(self) -> str: ...

    async def generate(self, prompt: Prompt, inputs: Mapping[str, Any], output: type[T]) -> Generation[T]: ...


class Embedder(Protocol):
    @property
    def embedding_model(self) -> str: ...

    async def embed(self, texts: Sequence[str]) -> Embeddings: ...


class Judge(Protocol):
    """A judge backend. `version` pins what re-scales a metric: backend, model, embedding model, config."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def faithfulness_threshold(self) -> float: ...

    async def score(self, metric: str, sample: RagSample) -> MetricResult: ...

    async def aclose(self) -> None: ...
