"""A span's session, whichever name its instrumentation gives it: ragmon's `ragmon.session`, then `session.id`
(OpenInference, general OpenTelemetry), then OpenTelemetry GenAI's `gen_ai.conversation.id` — spans made by the real
OpenTelemetry SDK, normalised by the store's SQL."""

from __future__ import annotations

from typing import Any

import pytest

from tests.collectors.collector_fakes import sdk_request
from tests.collectors.sql_store import SqlStore
from tests.collectors.test_normalise import normalise


@pytest.mark.parametrize(
    ("attributes", "session"),
    [
        ({"ragmon.session": "r", "session.id": "oi", "gen_ai.conversation.id": "genai"}, "r"),
        ({"session.id": "oi", "gen_ai.conversation.id": "genai"}, "oi"),
        ({"openinference.span.kind": "CHAIN", "session.id": "oi"}, "oi"),
        ({"gen_ai.operation.name": "chat", "gen_ai.conversation.id": "genai"}, "genai"),
        ({"gen_ai.operation.name": "chat"}, ""),
    ],
)
def test_the_session_is_read_from_each_dialects_name_in_precedence(
    store: SqlStore, attributes: dict[str, Any], session: str
) -> None:
    def emit(tracer: Any) -> None:
        with tracer.start_as_current_span("turn") as span:
            span.set_attributes(attributes)

    assert normalise(store, sdk_request(emit))["turn"]["session"] == session
