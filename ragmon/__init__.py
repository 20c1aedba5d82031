"""ragmon: per-stage OpenTelemetry spans for RAG apps — models, tokens, cost and retrieval health.

    import ragmon
    ragmon.configure(service_name="docs-bot")          # or nothing: every call below is a no-op until then
    with ragmon.request("docs-qa", user="u1", question=q) as req:
        with ragmon.embed("text-embedding-3-small", provider="openai") as e:
            e.record(input_tokens=12, vectors=query_vector)
        with ragmon.search(top_k=10, data_source="docs") as s:
            s.record(documents=[("doc-1", 0.82), ("doc-7", 0.61)], query_vector=query_vector)
        with ragmon.generate("gpt-4o-mini", provider="openai") as g:
            g.record(input_tokens=900, output_tokens=120, answer=text, finish_reason="stop")
    ragmon.feedback(trace_id=req.trace_id, thumbs="down", user="u1")   # the user's verdict, later (ragmon.feedback)

Stage calls also work as async context managers and as decorators (`ragmon.current()` gives the handle inside).
"""

from __future__ import annotations

from ragmon._configure import configure, force_flush, shutdown, stats
from ragmon._feedback import feedback
from ragmon._spans import (
    Document,
    EmbedSpan,
    GenerateSpan,
    RequestSpan,
    RerankSpan,
    SearchSpan,
    StageSpan,
    ToolSpan,
    bind_context,
    current,
)
from ragmon.version import __version__

# The stage constructors, under the names an app reads best.
request = RequestSpan
embed = EmbedSpan
search = SearchSpan
rerank = RerankSpan
generate = GenerateSpan
tool = ToolSpan

__all__ = [
    "Document",
    "EmbedSpan",
    "GenerateSpan",
    "RequestSpan",
    "RerankSpan",
    "SearchSpan",
    "StageSpan",
    "ToolSpan",
    "__version__",
    "bind_context",
    "configure",
    "current",
    "embed",
    "feedback",
    "force_flush",
    "generate",
    "request",
    "rerank",
    "search",
    "shutdown",
    "stats",
    "tool",
]
