"""`RagApp`: the demo RAG app — retrieve, rerank, maybe call a tool, generate — inside one `ragmon.request`.

    app = RagApp(faults=Faults(unfaithful_rate=0.2), seed=1)
    answer = app.answer("Which ports does the agent listen on?")
    answer.text, [p.id for p in answer.passages], answer.trace_id

Exceptions from a stage (real or injected) propagate to the caller after the SDK has marked the stage span
and the request span ERROR, as they would in a real app.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import ragmon
from ragmon.demo.embedder import Embedder, make_embedder
from ragmon.demo.faults import FaultInjector, Faults
from ragmon.demo.generator import ExtractiveGenerator, Generator
from ragmon.demo.passages import Passage, load_corpus
from ragmon.demo.reranker import OverlapReranker
from ragmon.demo.retriever import Retriever
from ragmon.demo.tools import SettingsLookupTool

DEFAULT_FEATURE = "docs-qa"
# Ground truth for evaluating the sampler and the judges: which faults this request got (absent when none).
INJECTED_FAULTS_ATTRIBUTE = "ragmon.demo.injected_faults"


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    passages: tuple[Passage, ...]  # what the generator saw, best first
    trace_id: str | None  # None when ragmon is not configured
    scores: tuple[float, ...] = ()  # reranker scores of `passages`
    tool_result: str | None = None
    injected: tuple[str, ...] = ()  # faults injected into this request ("slow:search", "unfaithful", ...)


class RagApp:
    def __init__(
        self,
        *,
        corpus: Sequence[Passage] | None = None,
        embedder: Embedder | None = None,
        generator: Generator | None = None,
        faults: Faults | None = None,
        seed: int = 0,
        search_top_k: int = 10,
        rerank_top_k: int = 4,
    ) -> None:
        passages = tuple(corpus) if corpus is not None else load_corpus()
        self.retriever = Retriever(passages, embedder or make_embedder("hashing"))
        self.reranker = OverlapReranker(passages)
        self.generator: Generator = generator or ExtractiveGenerator(passages)
        self.tool = SettingsLookupTool()
        self.faults = faults or Faults()
        self.injector = FaultInjector(self.faults, seed)
        self.search_top_k = search_top_k
        self.rerank_top_k = rerank_top_k

    @property
    def last_injected(self) -> tuple[str, ...]:
        """Faults injected into the latest request, also when it raised."""
        return tuple(self.injector.injected)

    def answer(
        self, question: str, feature: str = DEFAULT_FEATURE, user: str | None = None, session: str | None = None
    ) -> Answer:
        inject = self.injector
        inject.start_request()
        with ragmon.request(feature, user=user, session=session, question=question) as request:
            try:
                return self._answer(question, request)
            finally:
                if inject.injected:  # set before the span ends, also when a stage raised
                    request.set(**{INJECTED_FAULTS_ATTRIBUTE: list(inject.injected)})

    def _answer(self, question: str, request: ragmon.RequestSpan) -> Answer:
        inject = self.injector
        hits = self.retriever.retrieve(question, self.search_top_k, normalisation_bug=inject.norm_bug(), hook=inject)
        ranked = self.reranker.rerank(question, hits, self.rerank_top_k, hook=inject)
        tool_result = None
        keys = self.tool.wanted(question) if self.faults.tool_calls else ()
        if keys:
            tool_result = self.tool.call(keys, hook=inject)
        passages = tuple(h.passage for h in ranked)
        generation = self.generator.generate(
            question, passages, tool_result=tool_result, fabricated_claim=inject.fabricated_claim(), hook=inject
        )
        request.record(answer=generation.text)
        return Answer(
            text=generation.text,
            passages=passages,
            trace_id=request.trace_id,
            scores=tuple(h.score for h in ranked),
            tool_result=tool_result,
            injected=tuple(inject.injected),
        )
