"""A LangChain RAG service traced by OpenInference or by OpenLLMetry (Traceloop), not by ragmon's SDK.

An in-memory vector store over the shared documents (OpenAI embeddings from the scripted server), a k=2
retriever, and the usual LCEL chain::

    {"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | llm | StrOutputParser()

Instrumented as each vendor's documented set-up does it (`common.uses_openai_instrumentor`): OpenInference's
LangChain instrumentor alone; OpenLLMetry's LangChain instrumentor and its openai instrumentor, as
``Traceloop.init()`` does. ``--openai-instrumentor on|off`` overrides that.

    python -m tests.thirdparty.apps.langchain_app {openinference,openllmetry} --base-url URL --otlp URL
"""

from __future__ import annotations

import os
import sys
from typing import Any

from tests.thirdparty.apps import common

INSTRUMENTATIONS = ("openinference", "openllmetry")


def instrument(name: str, provider: Any, *, with_openai: bool) -> None:
    if name == "openinference":
        from openinference.instrumentation.langchain import LangChainInstrumentor

        LangChainInstrumentor().instrument(tracer_provider=provider)
    else:
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        LangchainInstrumentor().instrument(tracer_provider=provider)
    if with_openai:
        common.instrument_openai(name, provider)


def build_chain(base_url: str) -> Any:
    from langchain_core.documents import Document
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_openai import ChatOpenAI, OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(
        model=common.EMBEDDING_MODEL,
        base_url=base_url,
        api_key=common.API_KEY,
        check_embedding_ctx_length=False,  # else tiktoken tokenizes first (and downloads its encoding)
        max_retries=0,
    )
    store = InMemoryVectorStore(embeddings)
    store.add_documents(
        [Document(page_content=text, metadata={"source": doc_id}, id=doc_id) for doc_id, text in common.DOCUMENTS]
    )
    retriever = store.as_retriever(search_kwargs={"k": common.RETRIEVE_TOP_K})
    prompt = ChatPromptTemplate.from_messages(
        [
            (
                "system",
                "You are the Aurora support assistant. Answer only from the context below; say you do not know "
                "otherwise.\n\nContext:\n{context}",
            ),
            ("human", "{question}"),
        ]
    )
    llm = ChatOpenAI(
        model=common.CHAT_MODEL, base_url=base_url, api_key=common.API_KEY, temperature=0, max_retries=0, timeout=10
    )

    def format_docs(docs: list[Any]) -> str:
        return "\n\n".join(doc.page_content for doc in docs)

    return {"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | llm | StrOutputParser()


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args("langchain_app", INSTRUMENTATIONS, argv)
    if args.instrumentation == "openllmetry":
        os.environ.setdefault("TRACELOOP_TRACE_CONTENT", "true")
    common.offline_environment()
    common.forbid_outside_network()
    tracing = common.setup_tracing(f"langchain-{args.instrumentation}", args.otlp, args.dump)
    instrument(args.instrumentation, tracing.provider, with_openai=args.openai_instrumentor)
    chain = build_chain(args.base_url)
    common.run_questions(chain.invoke, common.selected_questions(args.questions), tracing, args.results)
    tracing.finish(args.dump, {"app": "langchain", "instrumentation": args.instrumentation})
    return 0


if __name__ == "__main__":
    sys.exit(main())
