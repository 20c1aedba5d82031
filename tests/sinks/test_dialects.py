"""A dialect is changed in its module alone (`ragmon.sinks.dialects`): what its content roles read is kept as
captured text, what its fields read is consumed, and its flattened documents' ids and scores are fields — each key
classified by the engine, through the routing the normalising SQL runs (`dialects_sql.key_class`)."""

from __future__ import annotations

from ragmon.sinks import Store
from ragmon.sinks.backend import quote_string
from ragmon.sinks.dialects import openinference, openllmetry, otel_genai, ragmon_names
from ragmon.sinks.dialects_sql import (
    DIALECTS,
    KEY_ATTRIBUTE,
    KEY_CONSUMED,
    KEY_CONTENT,
    KEY_RERANKED_DOCUMENT,
    KEY_RETRIEVED_DOCUMENT,
    key_class,
)

# The keys each dialect's content roles read (a flattened list by its first element's key). gen_ai.tool.name is
# a name, not text: an attribute, so a payload's tool call is named by its span (tests/sinks/test_store_otlp.py).
ROLE_KEYS = {
    "ragmon_names": (ragmon_names.QUESTION, ragmon_names.ANSWER, *ragmon_names.DOCUMENT_KEYS),
    "otel_genai": (
        *otel_genai.PROMPT_KEYS,
        *otel_genai.OUTPUT_KEYS,
        *otel_genai.QUERY_KEYS,
        otel_genai.TOOL_ARGUMENTS,
        otel_genai.TOOL_RESULT,
    ),
    "openinference": (
        *openinference.INPUT_KEYS,
        *openinference.OUTPUT_VALUE_KEYS,
        *openinference.QUERY_KEYS,
        openinference.OUTPUT_DOCUMENTS,
        openinference.TOOL_ARGUMENTS,
        openinference.TOOL_RESULT,
        *(prefix + "0.message.content" for prefix in openinference.PROMPT_PREFIXES + openinference.OUTPUT_PREFIXES),
        *(prefix + "0.document.content" for prefix in openinference.DOCUMENT_TEXT_PREFIXES),
    ),
    "openllmetry": (
        *openllmetry.INPUT_KEYS,
        *openllmetry.OUTPUT_VALUE_KEYS,
        *openllmetry.DOCUMENT_KEYS,
        openllmetry.OUTPUT_DOCUMENTS,
        openllmetry.TOOL_ARGUMENTS,
        openllmetry.TOOL_RESULT,
        *(prefix + "0.content" for prefix in openllmetry.PROMPT_PREFIXES + openllmetry.OUTPUT_PREFIXES),
    ),
}


def classes(store: Store, keys: list[str]) -> dict[str, int]:
    """Each key's class as the engine computes it."""
    listed = ", ".join(map(quote_string, keys))
    rows = store.backend.select(f"SELECT k, {key_class('k')} AS c FROM (SELECT arrayJoin([{listed}]) AS k)")
    return {row["k"]: row["c"] for row in rows.to_pylist()}


def test_what_a_dialects_content_roles_read_is_kept_as_captured_text(chdb_store: Store) -> None:
    for dialect, keys in ROLE_KEYS.items():
        assert classes(chdb_store, list(keys)) == dict.fromkeys(keys, KEY_CONTENT), dialect


def test_what_a_dialects_fields_read_is_consumed(chdb_store: Store) -> None:
    for make in DIALECTS:
        keys = sorted(make().keys)
        assert classes(chdb_store, keys) == dict.fromkeys(keys, KEY_CONSUMED), make.__module__


def test_flattened_documents_ids_and_scores_are_fields_their_text_is_captured(chdb_store: Store) -> None:
    retrieved, reranker_input, reranked = openinference.DOCUMENT_PREFIXES
    keys = {
        retrieved + "3.document.id": KEY_RETRIEVED_DOCUMENT,
        retrieved + "3.document.score": KEY_RETRIEVED_DOCUMENT,
        reranked + "0.document.id": KEY_RERANKED_DOCUMENT,
        reranked + "0.document.content": KEY_CONTENT,
        retrieved + "0.document.metadata": KEY_CONTENT,
        reranker_input + "1.document.id": KEY_ATTRIBUTE,  # a reranker's inputs stay attributes
    }
    assert classes(chdb_store, list(keys)) == keys
