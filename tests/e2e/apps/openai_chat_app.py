"""Chat app 2 of the end-to-end test: the same help chat built on the plain `openai` client, traced by
OpenInference's openai instrumentation only (ragmon's SDK is not imported). The conversation's session is set the
way OpenInference documents it, `using_session` (the span attribute `session.id`), the user with `using_user`.
Each turn sends the conversation so far: a system message with the retrieved pages, the earlier questions and
answers, the new question.

    python -m tests.e2e.apps.openai_chat_app --base-url URL --otlp URL --results FILE

The OTLP exporter's key comes from the standard variable (OTEL_EXPORTER_OTLP_HEADERS=x-api-key=…), the release
from OTEL_RESOURCE_ATTRIBUTES. FILE gets each turn's question, answer and trace ids (a span processor that only
looks, `common.SpanLog`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tests.e2e.apps import chat_script as script
from tests.thirdparty.apps import common

SYSTEM_PROMPT = "You are the Lumen Notes help assistant. Answer only from these pages:\n\n{context}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="openai_chat_app")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--otlp", required=True)
    parser.add_argument("--results", type=Path, required=True)
    args = parser.parse_args(argv)
    common.offline_environment()
    common.forbid_outside_network()
    tracing = common.setup_tracing("notes-help-chat-openai", args.otlp, None)
    common.instrument_openai("openinference", tracing.provider)

    import openai
    from openinference.instrumentation import using_session, using_user

    client = openai.OpenAI(base_url=args.base_url, api_key=common.API_KEY, max_retries=0, timeout=10)
    conversation = script.TP_CONVERSATION
    history: list[dict[str, Any]] = []
    records = []
    tracing.log.take()
    for index, turn in enumerate(conversation.turns):
        passages = script.retrieve(script.search_query(conversation.turns, index))
        if turn.source not in [doc_id for doc_id, _, _ in passages]:
            raise SystemExit(f"retrieval missed {turn.source} for {turn.question!r}: {passages}")
        context = common.format_context([(doc_id, text) for doc_id, _, text in passages])
        messages: Any = [  # the client's typed message params, as plain dicts
            {"role": "system", "content": SYSTEM_PROMPT.format(context=context)},
            *history,
            {"role": "user", "content": turn.question},
        ]
        with using_session(conversation.session), using_user(conversation.user):
            completion = client.chat.completions.create(model=script.CHAT_MODEL, temperature=0, messages=messages)
        text = completion.choices[0].message.content or ""
        history += [{"role": "user", "content": turn.question}, {"role": "assistant", "content": text}]
        ended = tracing.log.take()
        records.append(
            {"question": turn.question, "answer": text, "trace_ids": sorted({trace_id for trace_id, _ in ended})}
        )
    tracing.finish(None, {})
    args.results.write_text(json.dumps({"turns": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
