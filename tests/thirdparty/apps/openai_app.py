"""A RAG service that retrieves by itself and only instruments its LLM client: the plain `openai` client under
the official OpenTelemetry GenAI instrumentation (opentelemetry-instrumentation-openai-v2, ``genai``) or under
OpenInference's openai instrumentation (``openinference``).

Retrieval is the app's own code (shared words, `common.lexical_retrieve`) and makes no span; the passages reach
the trace only inside the prompt: a system message holding the context, then the user's question.

Content capture, as opentelemetry-instrumentation-openai-v2 2.4b0 with opentelemetry-util-genai 0.4b0 reads it:
without ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` it follows the v1.30 conventions
(``gen_ai.system``) and ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` sends the messages as log
events through the Logs API, never on the span; with the opt-in (set here) the variable names a mode, and
``span_only`` (set here) puts ``gen_ai.input.messages`` / ``gen_ai.output.messages`` on the span (``true`` is then
no mode: a warning, and nothing captured). OpenInference captures content by default.

    python -m tests.thirdparty.apps.openai_app {genai,openinference} --base-url URL --otlp URL
"""

from __future__ import annotations

import os
import sys

from tests.thirdparty.apps import common

INSTRUMENTATIONS = ("genai", "openinference")

SYSTEM_PROMPT = (
    "You are the Aurora support assistant. Answer only from the context below; say you do not know otherwise."
    "\n\nContext:\n{context}"
)


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args("openai_app", INSTRUMENTATIONS, argv)
    if args.instrumentation == "genai":
        os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    common.offline_environment()
    common.forbid_outside_network()
    tracing = common.setup_tracing(f"openai-{args.instrumentation}", args.otlp, args.dump)
    common.instrument_openai(args.instrumentation, tracing.provider)

    import openai

    client = openai.OpenAI(base_url=args.base_url, api_key=common.API_KEY, max_retries=0, timeout=10)

    def answer(question: str) -> str:
        passages = common.lexical_retrieve(question)
        completion = client.chat.completions.create(
            model=common.CHAT_MODEL,
            temperature=0,
            messages=[
                {"role": "system", "content": SYSTEM_PROMPT.format(context=common.format_context(passages))},
                {"role": "user", "content": question},
            ],
        )
        return completion.choices[0].message.content or ""

    common.run_questions(answer, common.selected_questions(args.questions), tracing, args.results)
    tracing.finish(args.dump, {"app": "openai", "instrumentation": args.instrumentation})
    return 0


if __name__ == "__main__":
    sys.exit(main())
