"""The OTLP path: envelopes normalised by views in the engine, deduplication, the sampler's queries, payload copy."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from ragmon.sinks import Store, otlp_views
from ragmon.sinks.envelope import seal
from ragmon.sinks.errors import PartlyStored
from ragmon.sinks.inserts import split_envelopes

from tests.sinks import otlp_fixture as fx

NOW_NS = (int(time.time()) // 60 * 60 - 600) * 10**9  # ten minutes ago: recent, inside recent_p95's window


def _install(store: Store, spans_select: Any = fx.spans_select) -> None:
    store.install_otlp_views(
        fx.PROTO_SCHEMA, fx.PROTO_MESSAGE, fx.INPUT_COLUMNS, fx.normalise_select, spans_select, fx.content_select
    )


def rag_trace(n: int, *, error: bool = False, slow_ms: float = 0.0, feature: str = "support") -> list[dict]:
    """Root + embed, search, rerank, generate, tool spans of one request with captured content."""
    trace_id = f"{n + 1:032x}"
    root = f"{n + 1:016x}"
    start = NOW_NS + n * 1_000_000
    spans = [
        {
            "trace_id": trace_id,
            "span_id": root,
            "name": "POST /ask",
            "start_ns": start,
            "duration_ms": 900.0 + slow_ms,
            "status_code": 2 if error else 1,
            "attributes": {
                "ragmon.stage": "request",
                "ragmon.feature": feature,
                "ragmon.user": f"u{n}",
                "ragmon.question": f"What is the refund window? #{n}",
            },
        }
    ]

    def child(i: int, stage_op: str, duration_ms: float, name: str = "", **attributes: Any) -> None:
        spans.append(
            {
                "trace_id": trace_id,
                "span_id": f"{(n + 1) * 100 + i:016x}",
                "parent_span_id": root,
                "name": name or f"{stage_op} span",
                "start_ns": start + i * 1_000_000,
                "duration_ms": duration_ms,
                "attributes": {"gen_ai.operation.name": stage_op, "ragmon.feature": feature, **attributes},
            }
        )

    child(1, "embeddings", 20.0, **{"ragmon.embedding.query_norm_deviation": 0.01 * (n + 1)})
    child(
        2,
        "retrieval",
        40.0,
        **{
            "ragmon.retrieval.document_ids": ["d1", "d2", "d3"],
            "ragmon.retrieval.document_scores": [0.9, 0.7, 0.5],
            "ragmon.retrieval.top1_score": 0.9,
            "ragmon.retrieval.similarity_gap": 0.4,
            "ragmon.retrieval.document_texts": json.dumps(["one", "two", "three"]),
        },
    )
    child(
        3,
        "rerank",
        60.0,
        **{
            "ragmon.retrieval.document_ids": ["d2", "d1"],
            "ragmon.retrieval.document_scores": [0.95, 0.6],
            "ragmon.retrieval.document_texts": json.dumps(["two", "one"]),
        },
    )
    output = [{"role": "assistant", "parts": [{"type": "text", "content": f"30 days. #{n}"}]}]
    child(
        4,
        "chat",
        700.0 + slow_ms,
        **{
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.input_tokens": 1000,
            "gen_ai.usage.output_tokens": 50,
            "gen_ai.input.messages": "[]",
            "gen_ai.output.messages": json.dumps(output),
        },
    )
    child(
        5,
        "execute_tool",
        5.0,
        "lookup",  # the span name stands in when the content carries no gen_ai.tool.name
        **{"gen_ai.tool.name": "lookup", "gen_ai.tool.call.arguments": '{"id": 1}', "gen_ai.tool.call.result": "ok"},
    )
    return spans


def envelopes(traces: list[list[dict]], seq0: int, tenant: str = "acme") -> list[bytes]:
    return [fx.seal(fx.encode_request(spans), tenant, seq0 + i) for i, spans in enumerate(traces)]


def _counts(store: Store) -> dict[str, int]:
    db = store.topology.database
    out = {}
    for table, expr in (("spans", "count()"), ("span_content", "count()"), ("spans_1m", "sum(spans)")):
        out[table] = int(store.query(f"SELECT {expr} AS n FROM {db}.{table}")[0]["n"])
    out["spans_1h"] = int(store.query(f"SELECT sum(spans) AS n FROM {db}.spans_1h")[0]["n"])
    return out


def test_envelopes_become_spans_content_and_rollups(store: Store) -> None:
    _install(store)
    store.insert_otlp(envelopes([rag_trace(0), rag_trace(1, error=True)], seq0=10), dedup_token="wal:10-11")
    assert _counts(store) == {"spans": 12, "span_content": 10, "spans_1m": 0, "spans_1h": 0}  # not rolled up yet
    store.roll_up(10, 11)  # what the agent does once the sampler has decided the range's traces
    assert _counts(store) == {"spans": 12, "span_content": 10, "spans_1m": 12, "spans_1h": 12}
    db = store.topology.database
    root = store.query(
        f"SELECT tenant, stage, feature, user, status, duration_ms, ingest_seq, attributes FROM {db}.spans"
        " WHERE parent_span_id = '' ORDER BY ingest_seq"
    )
    assert [(r["tenant"], r["stage"], r["feature"], r["status"], r["ingest_seq"]) for r in root] == [
        ("acme", "request", "support", "ok", 10),
        ("acme", "request", "support", "error", 11),
    ]
    assert "ragmon.question" not in root[0]["attributes"]  # text goes to span_content, never the slim row
    report = {(r["feature"], r["stage"]): r for r in store.report(3600)}
    assert report[("support", "generate")]["input_tokens"] == 2000
    assert report[("support", "request")]["errors"] == 1


def test_resent_batch_is_invisible_everywhere(store: Store) -> None:
    _install(store)
    batch = envelopes([rag_trace(i) for i in range(5)], seq0=100)
    store.insert_otlp(batch, dedup_token="wal:100-104")
    store.roll_up(100, 104, "rollup:100-104")
    before = (_counts(store), store.report(3600))
    assert before[0]["spans_1m"] == 30 and sum(r["requests"] for r in before[1] if r["stage"] == "request") == 5
    store.insert_otlp(batch, dedup_token="wal:100-104")
    store.insert_otlp(batch[:2], dedup_token="wal:100-104")  # the token wins, whatever the content
    store.roll_up(100, 104, "rollup:100-104")  # a range rolled up again after a crash: its token too
    assert (_counts(store), store.report(3600)) == before
    store.insert_otlp(envelopes([rag_trace(9)], seq0=105), dedup_token="wal:105")
    assert _counts(store)["spans"] == before[0]["spans"] + 6


def test_split_envelopes_cuts_consecutive_runs_of_about_equal_bytes() -> None:
    sizes = [5, 1, 1, 1, 1, 1, 5, 5]
    parts = split_envelopes([b"x" * n for n in sizes], 2, 1)
    assert [[len(e) for e in part] for part in parts] == [[5, 1, 1, 1, 1, 1], [5, 5]]  # 10 bytes each
    assert split_envelopes([b"x" * 10] * 4, 2, 30) == [[b"x" * 10] * 4]  # parts would be under the minimum
    assert split_envelopes([b"x" * 10], 2, 1) == [[b"x" * 10]]
    assert [len(p) for p in split_envelopes([b"x"] * 9, 3, 1)] == [3, 3, 3]


def test_a_batch_stored_in_parts_is_stored_once_and_a_resend_is_invisible(store: Store) -> None:
    _install(store)
    store.min_insert_part_bytes = 1  # split even this small batch into two INSERTs at once
    batch = envelopes([rag_trace(i) for i in range(6)], seq0=200)
    store.insert_otlp(batch, dedup_token="wal:200-205")
    store.roll_up(200, 205)
    counts = _counts(store)
    assert counts["spans"] == 36 and counts["spans_1m"] == 36
    store.insert_otlp(batch, dedup_token="wal:200-205")  # a retry re-sends the same parts
    assert _counts(store) == counts


def test_a_part_that_fails_says_which_envelopes_were_not_stored(store: Store) -> None:
    _install(store)
    store.min_insert_part_bytes = 1
    batch = envelopes([rag_trace(i) for i in range(4)], seq0=300)
    poisoned = [*batch[:3], b"\x0a\xff\xff\xff\xff\x0f"]  # the last: a field longer than the message
    with pytest.raises(PartlyStored) as caught:
        store.insert_otlp(poisoned, dedup_token="wal:300-303")
    assert not caught.value.retryable
    assert caught.value.unstored == [(2, 4)]  # the second part; the first is stored
    assert _counts(store)["spans"] == 12


def test_install_is_idempotent_and_replaces_changed_sql(store: Store) -> None:
    db = store.topology.database

    def views() -> dict[str, str]:
        rows = store.query("SELECT name, comment FROM system.tables WHERE database = {db:String}", {"db": db})
        return {r["name"]: r["comment"] for r in rows if r["name"].startswith("otlp_")}

    _install(store)
    first = views()
    assert set(first) == {"otlp_in", "otlp_norm", "otlp_norm_mv", "otlp_spans_mv", "otlp_content_mv"}
    _install(store)
    assert views() == first
    # A new release (say, a new price table) changes the SELECT: the views are replaced and data keeps flowing.
    _install(store, lambda table: fx.spans_select(table).replace("a['ragmon.user'] AS user", "'changed' AS user"))
    assert views() != first
    store.insert_otlp(envelopes([rag_trace(0)], seq0=1), dedup_token="t1")
    assert {r["user"] for r in store.query(f"SELECT DISTINCT user FROM {db}.spans")} == {"changed"}


def test_selects_written_against_plain_table_names_read_the_stores_tables(store: Store) -> None:
    store.install_otlp_views(
        fx.PROTO_SCHEMA,
        fx.PROTO_MESSAGE,
        fx.INPUT_COLUMNS,
        fx.normalise_select("otlp_in"),
        fx.spans_select("otlp_norm"),
        fx.content_select("otlp_norm"),
    )
    store.insert_otlp(envelopes([rag_trace(0)], seq0=1), dedup_token="plain")
    assert _counts(store)["spans"] == 6


def test_insert_before_install_is_a_permanent_error(store: Store) -> None:
    from ragmon.sinks import StoreError

    with pytest.raises(StoreError) as info:
        store.insert_otlp([b""], dedup_token="x")
    assert info.value.retryable is False


def test_trace_fragments(store: Store) -> None:
    _install(store)
    store.insert_otlp(envelopes([rag_trace(0), rag_trace(1, error=True)], seq0=20), dedup_token="a")
    # A trace whose root arrives later: only its children are in this range.
    orphan = [s for s in rag_trace(2) if s.get("parent_span_id")]
    store.insert_otlp(envelopes([orphan], seq0=22), dedup_token="b")
    store.insert_otlp(envelopes([rag_trace(3)], seq0=40), dedup_token="c")  # outside the range
    fragments = {f["trace_id"]: f for f in store.trace_fragments(20, 22)}
    assert set(fragments) == {f"{n + 1:032x}" for n in (0, 1, 2)}
    first = fragments[f"{1:032x}"]
    assert first["tenant"] == "acme" and first["feature"] == "support" and first["user"] == "u0"
    assert (first["span_count"], first["error_count"], first["root_seen"]) == (6, 0, True)
    assert first["root_duration_ms"] == pytest.approx(900.0)
    assert first["stage_max_ms"] == pytest.approx(
        {"request": 900.0, "embed": 20.0, "search": 40.0, "rerank": 60.0, "generate": 700.0, "tool": 5.0}
    )
    assert first["min_top1_score"] == pytest.approx(0.9)
    assert first["min_similarity_gap"] == pytest.approx(0.4)
    assert first["max_norm_deviation"] == pytest.approx(0.01)
    captured = [s for s in rag_trace(0)]
    texts = ("ragmon.question", "ragmon.retrieval.document_texts", "gen_ai.input.messages", "gen_ai.output.messages")
    texts += ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result")
    want_bytes = sum(len(str(s["attributes"][k]).encode()) for s in captured for k in texts if k in s["attributes"])
    assert first["content_bytes"] == want_bytes
    assert fragments[f"{2:032x}"]["error_count"] == 1
    late = fragments[f"{3:032x}"]
    assert (late["root_seen"], late["root_duration_ms"], late["span_count"]) == (False, None, 5)
    assert late["feature"] == "support"  # no root: any span's feature


def copied(store: Store, kept: list[dict[str, Any]]) -> int:
    """Copy `kept`, then count how many of them have a payload row."""
    store.copy_payloads(kept)
    return store.kept_payload_count([(row["tenant"], row["trace_id"]) for row in kept])


def test_copy_payloads_builds_rows_in_the_engine(store: Store) -> None:
    _install(store)
    store.insert_otlp(envelopes([rag_trace(0), rag_trace(1)], seq0=1), dedup_token="p")
    kept = [
        {"tenant": "acme", "trace_id": f"{1:032x}", "reasons": ["slow", "baseline"], "probability": 0.25},
        {"tenant": "acme", "trace_id": "f" * 32, "reasons": ["error"], "probability": 1.0},  # unknown trace
    ]
    assert copied(store, kept) == 1
    assert copied(store, kept) == 1  # idempotent
    db = store.topology.database
    rows = store.query(f"SELECT * FROM {db}.payloads FINAL")
    assert len(rows) == 1
    row = rows[0]
    assert row["feature"] == "support"
    assert row["question"] == "What is the refund window? #0"
    assert row["answer"] == "30 days. #0"
    assert [(p["id"], p["text"]) for p in row["passages"]] == [("d2", "two"), ("d1", "one")]  # the rerank's
    assert row["passages"][0]["score"] == pytest.approx(0.95)
    assert row["tool_calls"] == [{"name": "lookup", "arguments": '{"id": 1}', "result": "ok"}]
    assert (row["sampling_reason"], row["sampling_reasons"], row["inclusion_probability"]) == (
        "slow",
        ["slow", "baseline"],
        0.25,
    )
    rest = row["content"]
    assert any(k.endswith("/gen_ai.input.messages") for k in rest)  # what has no field of its own
    assert any(k.startswith("search/") and k.endswith("/ragmon.retrieval.document_texts") for k in rest)
    assert not any(
        k.endswith(("/ragmon.question", "/gen_ai.output.messages", "/gen_ai.tool.call.result")) for k in rest
    )


def test_copy_payloads_reads_from_the_first_ingest_sequence_on(store: Store) -> None:
    """The sampler says from which ingest sequence a kept trace's spans were stored; the copy reads only from there
    (so it does not scan everything stored). The bound is real: one past the trace's sequence finds nothing."""
    _install(store)
    store.insert_otlp(envelopes([rag_trace(0)], seq0=7), dedup_token="s7")
    store.insert_otlp(envelopes([rag_trace(1)], seq0=8), dedup_token="s8")
    trace_id = f"{2:032x}"  # rag_trace(1)'s
    kept = {"tenant": "acme", "trace_id": trace_id, "reasons": ["baseline"], "probability": 0.5}
    assert copied(store, [{**kept, "first_ingest_seq": 9}]) == 0  # its spans are at sequence 8
    assert copied(store, [{**kept, "first_ingest_seq": 8}]) == 1
    row = store.query(f"SELECT * FROM {store.topology.database}.payloads FINAL")[0]
    assert (row["trace_id"], row["question"], row["answer"]) == (
        trace_id,
        "What is the refund window? #1",
        "30 days. #1",
    )


def test_payloads_for_judging_reads_many_traces_in_one_query(store: Store) -> None:
    _install(store)
    store.insert_otlp(envelopes([rag_trace(0), rag_trace(1), rag_trace(2)], seq0=1), dedup_token="j")
    ids = [f"{n:032x}" for n in (1, 2, 3)]
    kept = [{"tenant": "acme", "trace_id": i, "reasons": ["baseline"], "probability": 0.5} for i in ids[:2]]
    store.copy_payloads(kept)
    store.copy_payloads(kept[:1])  # copied again
    found = store.payloads_for_judging("acme", [*ids, "f" * 32])
    assert sorted(found) == ids[:2]  # not copied, unknown: absent; copied twice: once
    assert found[ids[1]]["question"] == "What is the refund window? #1"
    assert found[ids[1]]["answer"] == "30 days. #1"
    assert found[ids[1]]["passage_texts"] == ["two", "one"]
    assert (found[ids[1]]["feature"], found[ids[1]]["sampling_reason"]) == ("support", "baseline")
    assert found[ids[1]]["inclusion_probability"] == pytest.approx(0.5)
    assert store.payloads_for_judging("other-tenant", ids) == {}
    assert store.payloads_for_judging("acme", []) == {}


def test_recent_p95(store: Store) -> None:
    _install(store)
    store.insert_otlp(envelopes([rag_trace(i, slow_ms=10.0 * i) for i in range(40)], seq0=1), dedup_token="r")
    store.roll_up(1, 40)
    p95 = store.recent_p95(3600)
    assert p95[("support", "embed")] == pytest.approx(20.0, rel=0.01)
    assert p95[("support", "request")] == pytest.approx(900 + 10 * 37.05, rel=0.01)
    assert store.recent_p95(1) == {}


def test_recent_p95_ignores_spans_stamped_in_the_future(store: Store) -> None:
    # An app with a clock a day ahead must not pin its spans into "recent" until that day comes.
    _install(store)
    ahead = [{**span, "start_ns": span["start_ns"] + 86_400 * 10**9} for span in rag_trace(0, feature="ahead")]
    store.insert_otlp(envelopes([rag_trace(1), ahead], seq0=1), dedup_token="f")
    store.roll_up(1, 2)
    p95 = store.recent_p95(3600)
    assert ("support", "request") in p95
    assert not [key for key in p95 if key[0] == "ahead"], p95


def test_real_collectors_sql_if_present(store: Store) -> None:
    otlp_views.install(store)
    body = fx.encode_request(rag_trace(0))
    store.insert_otlp([seal(body, "acme", 7)], dedup_token="real")
    store.insert_otlp([seal(body, "acme", 7)], dedup_token="real")
    db = store.topology.database
    rows = store.query(f"SELECT count() AS n, min(ingest_seq) AS s FROM {db}.spans")
    assert rows == [{"n": 6, "s": 7}]
    assert store.trace_fragments(7, 7)[0]["span_count"] == 6
