"""The interfaces between metrics and judges.

- `StructuredLLM`: one prompt in, one pydantic-validated object out (or a non-ok status). The LLM judge
  implements it over HTTP; tests and other backends may implement it however they like.
- `Embedder`: texts in, vectors out (answer relevance); `JudgeLLM` is both, what the LLM judge hands a metric.
- `LocalScoring`: what a metric's offline scoring uses of the local judge (its support model, its embedder).
- `Metric`: one metric stated once — its name, what it needs, its review labels, how the LLM judge scores it and
  which calls that makes (`PlannedCalls`, read by back-evaluation's cost estimate), how the local judge scores it.
  The registry of them is `ragmon.judges.metrics.REGISTRY`.
- `Judge`: what the worker and `ragmon calibrate` use — score one metric on one sample. Backends are chosen by
  name (see judges/registry.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pydantic import BaseModel
from ragmon.judges.prompts import Prompt
from ragmon.judges.types import ClaimVerdict, MetricResult, RagSample, SampleField, Status, Usage

if TYPE_CHECKING:  # the local judge's own modules; a metric only reads the support model's version
    from ragmon.judges.local_model import SupportModel
    from ragmon.judges.support_features import SentenceEmbedder

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


class JudgeLLM(StructuredLLM, Embedder, Protocol):
    """What the LLM judge hands a metric: structured generations, and embeddings for the metrics that need them."""


class LocalScoring(Protocol):
    """What a metric's offline scoring uses of the local judge (judges/local_judge.py)."""

    @property
    def model(self) -> str: ...

    @property
    def support_model(self) -> SupportModel: ...

    @property
    def sentence_embedder(self) -> tuple[SentenceEmbedder, str] | None:
        """(embed, model name) when sentence embeddings are loaded; None when only lexical scoring is."""
        ...

    def claims_of(self, sample: RagSample) -> list[str] | None: ...

    def judge_claims(
        self, claims: Sequence[str], passages: Sequence[str], answer: str | None = None, question: str = ""
    ) -> tuple[list[ClaimVerdict], float]:
        """Each claim's verdict against the passages, and the probability that the claims together are faithful."""
        ...


@dataclass(frozen=True)
class PlannedCalls:
    """The calls the LLM judge makes for one metric on one sample, as back-evaluation's cost estimate counts them
    before anything is sent: each chat call's messages, rendered from the metric's own prompts with the sample's
    text, and the bytes sent to the embedding model."""

    chats: tuple[list[dict[str, str]], ...] = ()
    embedded_bytes: int = 0


class Metric(Protocol):
    """One judge metric, stated once (see the module docstring). Implementations are stateless."""

    @property
    def name(self) -> str: ...

    @property
    def needs(self) -> frozenset[SampleField]:
        """What the metric is undefined without: a sample lacking one is not scored (unscorable or skipped), and
        no LLM call is made for it."""
        ...

    @property
    def review_labels(self) -> tuple[str, str] | None:
        """The words a reviewer picks between on the dashboard's review page (yes, no); None when a person cannot
        judge the metric from one trace's page."""
        ...

    async def score(self, sample: RagSample, llm: JudgeLLM) -> MetricResult: ...

    def planned_calls(self, sample: RagSample) -> PlannedCalls: ...

    def score_locally(self, sample: RagSample, judge: LocalScoring) -> MetricResult: ...


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
