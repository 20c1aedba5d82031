"""The sample RAG app behind `ragmon demo` and the tests: ragmon's own docs as corpus, every stage instrumented.

    from ragmon.demo import Faults, RagApp
    app = RagApp(faults=Faults(unfaithful_rate=0.2, slow_ms={"generate": 30}), seed=1)
    answer = app.answer("Which ports does the agent listen on?")

Offline by default (hashing embedder, lexical reranker, extractive generator); MiniLM and any
OpenAI-compatible endpoint plug in. `python -m ragmon.demo` (or `ragmon demo`) runs
`ragmon.demo.run.run_demo`. Needs numpy (the `agent` extra), so the SDK never imports this package.
"""

from __future__ import annotations

from ragmon.demo.app import INJECTED_FAULTS_ATTRIBUTE, Answer, RagApp
from ragmon.demo.embedder import Embedder, EmbedderUnavailableError, HashingEmbedder, MiniLMEmbedder, make_embedder
from ragmon.demo.errors import DemoError, GeneratorError, RateLimitError, ToolError
from ragmon.demo.faults import FABRICATED_CLAIMS, Faults
from ragmon.demo.generator import ExtractiveGenerator, Generation, Generator, OpenAICompatibleGenerator
from ragmon.demo.passages import Passage, Question, load_corpus, load_questions
from ragmon.demo.reranker import OverlapReranker
from ragmon.demo.retriever import Hit, Retriever

__all__ = [
    "FABRICATED_CLAIMS",
    "INJECTED_FAULTS_ATTRIBUTE",
    "Answer",
    "DemoError",
    "Embedder",
    "EmbedderUnavailableError",
    "ExtractiveGenerator",
    "Faults",
    "Generation",
    "Generator",
    "GeneratorError",
    "HashingEmbedder",
    "Hit",
    "MiniLMEmbedder",
    "OpenAICompatibleGenerator",
    "OverlapReranker",
    "Passage",
    "Question",
    "RagApp",
    "RateLimitError",
    "Retriever",
    "ToolError",
    "load_corpus",
    "load_questions",
    "make_embedder",
]
