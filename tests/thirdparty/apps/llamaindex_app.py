"""A LlamaIndex RAG service traced by OpenInference or by OpenLLMetry (Traceloop), not by ragmon's SDK.

A `VectorStoreIndex` over the shared documents (OpenAI embeddings from the scripted server) and
``index.as_query_engine(similarity_top_k=2).query(question)``. Offline: `Settings.tokenizer` is a local word
splitter (LlamaIndex's default is tiktoken, whose encodings ship in llama-index-core's `_static` cache but
would be downloaded if missing), and NLTK looks only in the data llama-index-core ships (`NLTK_DATA`).

Instrumented as each vendor's documented set-up does it (`common.uses_openai_instrumentor`): OpenInference's
LlamaIndex instrumentor alone; OpenLLMetry's LlamaIndex instrumentor and its openai instrumentor, as
``Traceloop.init()`` does (OpenLLMetry's LlamaIndex instrumentation makes no span for OpenAI LLM calls itself).
``--openai-instrumentor on|off`` overrides that.

    python -m tests.thirdparty.apps.llamaindex_app {openinference,openllmetry} --base-url URL --otlp URL
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from tests.thirdparty.apps import common

INSTRUMENTATIONS = ("openinference", "openllmetry")


def offline_llamaindex() -> None:
    """Point NLTK and tiktoken at the data llama-index-core ships, before llama_index is imported."""
    spec = importlib.util.find_spec("llama_index.core")
    if spec is None or not spec.submodule_search_locations:
        return
    static = Path(next(iter(spec.submodule_search_locations))) / "_static"
    os.environ.setdefault("NLTK_DATA", str(static / "nltk_cache"))
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(static / "tiktoken_cache"))


def instrument(name: str, provider: Any, *, with_openai: bool) -> None:
    if name == "openinference":
        from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

        LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    else:
        from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor

        LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    if with_openai:
        common.instrument_openai(name, provider)


def word_tokenizer(text: str) -> list[str]:
    return text.split()


def build_query_engine(base_url: str) -> Any:
    from llama_index.core import Document, Settings, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.embeddings.openai import OpenAIEmbedding
    from llama_index.llms.openai import OpenAI

    Settings.tokenizer = word_tokenizer
    Settings.llm = OpenAI(
        model=common.CHAT_MODEL, api_base=base_url, api_key=common.API_KEY, max_retries=0, timeout=10, temperature=0
    )
    Settings.embed_model = OpenAIEmbedding(
        model=common.EMBEDDING_MODEL, api_base=base_url, api_key=common.API_KEY, max_retries=0, timeout=10
    )
    # Deterministic node ids (the default is a random uuid per chunk): <document>#<chunk>.
    Settings.node_parser = SentenceSplitter(chunk_size=256, chunk_overlap=0, id_func=lambda i, doc: f"{doc.doc_id}#{i}")
    documents = [Document(text=text, id_=doc_id, metadata={"file_name": doc_id}) for doc_id, text in common.DOCUMENTS]
    index = VectorStoreIndex.from_documents(documents)
    return index.as_query_engine(similarity_top_k=common.RETRIEVE_TOP_K)


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args("llamaindex_app", INSTRUMENTATIONS, argv)
    if args.instrumentation == "openllmetry":
        os.environ.setdefault("TRACELOOP_TRACE_CONTENT", "true")
    common.offline_environment()
    offline_llamaindex()
    common.forbid_outside_network()
    tracing = common.setup_tracing(f"llamaindex-{args.instrumentation}", args.otlp, args.dump)
    instrument(args.instrumentation, tracing.provider, with_openai=args.openai_instrumentor)
    engine = build_query_engine(args.base_url)

    def answer(question: str) -> str:
        return str(engine.query(question))

    common.run_questions(answer, common.selected_questions(args.questions), tracing, args.results)
    tracing.finish(args.dump, {"app": "llamaindex", "instrumentation": args.instrumentation})
    return 0


if __name__ == "__main__":
    sys.exit(main())
