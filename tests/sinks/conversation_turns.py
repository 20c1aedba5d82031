"""Turns of a chat, as the SDK sends them (a root with ragmon's session, question and answer, a retrieval span with
its passages), sealed as the agent's write-ahead log would for the store's OTLP path (`tests/sinks/otlp_fixture`)."""

from __future__ import annotations

import json
import time
from typing import Any

from ragmon.sinks import Store

from tests.sinks import otlp_fixture as fx

TENANT = "acme"
# Five minutes ago, in whole seconds: recent, and inside every window the reads use.
NOW_NS = (int(time.time()) - 300) * 10**9


def trace_id(n: int) -> str:
    return f"{0xC0FFEE00 + n:032x}"


def turn(
    n: int,
    question: str,
    answer: str,
    *,
    session: str | None,
    offset_s: float,
    passages: tuple[str, ...] = ("The monthly plan costs 10 dollars.", "The annual plan costs 99 dollars."),
    error: bool = False,
    duration_ms: float = 800.0,
) -> list[dict[str, Any]]:
    """Turn `n` of a conversation: it starts `offset_s` seconds after NOW_NS."""
    root = f"{0xA000 + n:016x}"
    start = NOW_NS + int(offset_s * 1e9)
    attributes: dict[str, Any] = {
        "ragmon.stage": "request",
        "ragmon.feature": "chat",
        "ragmon.question": question,
        "ragmon.answer": answer,
    }
    if session is not None:
        attributes["ragmon.session"] = session
    return [
        {
            "trace_id": trace_id(n),
            "span_id": root,
            "name": "POST /chat",
            "start_ns": start,
            "duration_ms": duration_ms,
            "status_code": 2 if error else 1,
            "attributes": attributes,
        },
        {
            "trace_id": trace_id(n),
            "span_id": f"{0xB000 + n:016x}",
            "parent_span_id": root,
            "name": "search",
            "start_ns": start + 1_000_000,
            "duration_ms": 30.0,
            "attributes": {
                "gen_ai.operation.name": "retrieval",
                "ragmon.feature": "chat",
                **({"ragmon.session": session} if session is not None else {}),
                "ragmon.retrieval.document_ids": [f"p{i}" for i in range(len(passages))],
                "ragmon.retrieval.document_scores": [0.9 - 0.1 * i for i in range(len(passages))],
                "ragmon.retrieval.document_texts": json.dumps(list(passages)),
            },
        },
    ]


def install(store: Store) -> None:
    store.install_otlp_views(
        fx.PROTO_SCHEMA, fx.PROTO_MESSAGE, fx.INPUT_COLUMNS, fx.normalise_select, fx.spans_select, fx.content_select
    )


def send(store: Store, turns: list[list[dict[str, Any]]], seq0: int, tenant: str = TENANT) -> None:
    envelopes = [fx.seal(fx.encode_request(spans), tenant, seq0 + i) for i, spans in enumerate(turns)]
    store.insert_otlp(envelopes, dedup_token=f"conversation-test:{seq0}")


def keep(store: Store, *numbers: int, reason: str = "baseline", tenant: str = TENANT) -> None:
    store.copy_payloads(
        [{"tenant": tenant, "trace_id": trace_id(n), "reasons": [reason], "probability": 0.5} for n in numbers]
    )


def score(store: Store, n: int, metric: str, value: float | None, *, flags: tuple[str, ...] = ()) -> None:
    store.insert_scores(
        [
            {
                "tenant": TENANT,
                "trace_id": trace_id(n),
                "feature": "chat",
                "metric": metric,
                "judge_version": "test",
                "value": value,
                "status": "ok" if value is not None else "unscorable",
                "flags": list(flags),
            }
        ]
    )
