"""PII redaction before storage, verified by querying the store.

Spans come from ragmon's SDK (and a plain OpenTelemetry span) on the OpenTelemetry SDK, are encoded by
OpenTelemetry's own OTLP encoder, sealed and stored through `Store.insert_otlp` — the agent's ingest path — into
the embedded engine (one database per test); kept traces are copied to `payloads` by `Store.copy_payloads`. Then
every row of `spans`, `span_content` and `payloads` is read back whole and searched.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.trace import format_trace_id
from ragmon.sinks import Store, envelope, open_store, otlp_views
from ragmon.sinks.arrow import to_rows
from ragmon.sinks.backend import quote_string as quote
from ragmon.sinks.redaction import DISABLED, Redaction, RedactionConfigError

import ragmon
from ragmon.settings import load_settings

REPO = Path(__file__).resolve().parents[2]
EMPLOYEE = ("employee_id", r"EMP-\d{6}")

# Every piece of PII the trace carries, by where it is put. Card numbers pass Luhn.
PII = {
    "question email": "alice@example.com",
    "question card": "4111 1111 1111 1111",
    "user id": "bob.smith@example.org",
    "passage phone": "+1 (555) 123-4567",
    "passage employee": "EMP-123456",
    "message phone": "555-123-4567",
    "message email": "carol@example.net",
    "answer email": "dave@example.com",
    "answer card": "5105-1051-0510-5100",
    "tool email": "erin@example.com",
    "tool phone": "+44 20 7946 0958",
    "attribute phone": "020 7946 0958",
    "attribute card": "378282246310005",
    "exception card": "4012888888881881",
    "exception email": "grace@example.com",
    "span name email": "henry@example.com",
    "error type phone": "+1 415 555 2671",
}
# Text and ids that must come back byte for byte.
TRACE_REF = "4bf92f3577b34da6a3ce929d0e0e4736"
UUID_TEXT = "550e8400-e29b-41d4-a716-446655440000"
KEPT = {
    "app.order_ref": "doc-1234567890123",
    "app.luhn_doc": "doc-4111111111111111",  # Luhn-valid digits, but an id
    "app.trace_ref": TRACE_REF,
    "app.uuid": UUID_TEXT,
    "app.epoch_ns": "1733022000123456789",
    "app.epoch_ms": "1733022000123",
    "app.iso_time": "2026-12-01T03:40:00.123456789Z",
    "app.version": "1.24.3",
    "app.ratio": "0.4111111111111111",
}
PLAIN_TEXT = ("Refunds take 5 days", "The refund window is 30 days", "Employee EMP-12345 is not an id match")


class _Captured:
    def __init__(self) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.provider = TracerProvider()
        self.exporter = InMemorySpanExporter()
        self.last_spans: list[Any] = []
        ragmon.configure(tracer_provider=self.provider, span_exporter=self.exporter, capture_content=True)


def _trace(cap: _Captured) -> tuple[bytes, str]:
    """One RAG request carrying every value of PII and KEPT; returns (OTLP request body, trace id)."""
    question = f"My email is {PII['question email']} and my card {PII['question card']}. {PLAIN_TEXT[1]}?"
    with ragmon.request("support", user=PII["user id"], session="s-42", question=question) as req:
        with ragmon.search(top_k=3, data_source="kb") as search:
            search.record(
                documents=[
                    ("doc-1234567890123", 0.91, f"Call {PII['passage phone']} for help."),
                    (UUID_TEXT, 0.82, f"Refunds are handled by {PII['passage employee']}. {PLAIN_TEXT[2]}."),
                    ("doc-2", 0.7, PLAIN_TEXT[0]),
                ]
            )
        messages = [{"role": "user", "content": f"reach me at {PII['message phone']}\nor {PII['message email']}"}]
        with ragmon.generate("gpt-4o-mini", provider="openai", messages=messages) as gen:
            gen.record(
                input_tokens=120,
                output_tokens=30,
                answer=f"{PLAIN_TEXT[0]}. We emailed {PII['answer email']} about card {PII['answer card']}.",
            )
        with ragmon.tool("lookup_customer", arguments={"email": PII["tool email"]}) as tool:
            tool.record(result=f"phone: {PII['tool phone']}")
        with pytest.raises(ValueError), ragmon.tool("charge"):
            raise ValueError(f"could not charge {PII['exception card']} for {PII['exception email']}")
        tracer = cap.provider.get_tracer("app")
        with tracer.start_as_current_span(f"notify {PII['span name email']}") as span:
            span.set_attribute("app.epoch_int", 1733022000123456789)
            span.set_attribute("error.type", f"callback to {PII['error type phone']} failed")
        req.record(
            answer=f"{PLAIN_TEXT[0]}. We emailed {PII['answer email']} about card {PII['answer card']}.",
            **{"app.note": f"call {PII['attribute phone']}", "app.card": PII["attribute card"], **KEPT},
        )
    assert ragmon.force_flush(5.0)
    spans = cap.exporter.get_finished_spans()
    cap.exporter.clear()
    cap.last_spans = list(spans)
    trace_id = format_trace_id(spans[0].context.trace_id)
    return encode_spans(spans).SerializeToString(), trace_id


@pytest.fixture
def make_store(chdb_engine_dir: Path) -> Iterator[Callable[..., Store]]:
    opened: list[Store] = []

    def make(redaction: Redaction) -> Store:
        store = open_store(str(chdb_engine_dir), database=f"t_{uuid.uuid4().hex[:12]}")
        opened.append(store)
        install(store, redaction)
        return store

    yield make
    for store in opened:
        store.close()


def install(store: Store, redaction: Redaction) -> None:
    redaction.check(store.query)
    otlp_views.install(store, redaction=redaction)


def store_trace(store: Store, body: bytes, trace_id: str, seq: int = 1) -> None:
    store.insert_otlp([envelope.seal(body, "acme", seq)], dedup_token=f"t{seq}")
    store.copy_payloads([{"tenant": "acme", "trace_id": trace_id, "reasons": ["error"], "probability": 1}])
    assert store.kept_payload_count([("acme", trace_id)]) == 1


def rows(store: Store, table: str) -> list[dict[str, Any]]:
    db = store.topology.database
    return to_rows(store.backend.select(f"SELECT * FROM `{db}`.`{table}` ORDER BY ALL"))


def dump(store: Store) -> str:
    """Every column of every stored row, as JSON text."""
    tables = ("spans", "span_content", "payloads")
    return json.dumps({t: rows(store, t) for t in tables}, default=str, ensure_ascii=False)


@pytest.fixture
def trace() -> tuple[bytes, str]:
    return _trace(_Captured())


def test_no_pii_remains_in_any_stored_column(make_store: Callable[..., Store], trace: tuple[bytes, str]) -> None:
    body, trace_id = trace
    store = make_store(Redaction(patterns=(EMPLOYEE,)))
    store_trace(store, body, trace_id)
    text = dump(store)
    without_ids = text
    for value in KEPT.values():  # an id or fraction holding Luhn-valid digits is kept by design
        without_ids = without_ids.replace(value, "")
    for where, value in PII.items():
        assert value not in text, where
        digits = re.sub(r"\D", "", value)
        if len(digits) >= 10:  # a number must not survive in another spelling either
            assert digits not in re.sub(r"[ ()-]", "", without_ids), where
    # independent of the patterns under test: nothing shaped like an email is left
    assert re.findall(r"[\w.+-]+@[\w-]+\.[A-Za-z]{2,}", text) == []
    for name in ("email", "phone", "card", "employee_id"):
        assert f"[REDACTED:{name}]" in text

    payload = rows(store, "payloads")[0]
    assert payload["question"] == (f"My email is [REDACTED:email] and my card [REDACTED:card]. {PLAIN_TEXT[1]}?")
    assert payload["answer"] == f"{PLAIN_TEXT[0]}. We emailed [REDACTED:email] about card [REDACTED:card]."
    assert [p["text"] for p in payload["passages"]] == [
        "Call [REDACTED:phone] for help.",
        f"Refunds are handled by [REDACTED:employee_id]. {PLAIN_TEXT[2]}.",
        PLAIN_TEXT[0],
    ]
    (tool,) = [t for t in payload["tool_calls"] if t["name"] == "execute_tool lookup_customer"]
    assert json.loads(tool["arguments"]) == {"email": "[REDACTED:email]"}  # still valid JSON
    assert tool["result"] == "phone: [REDACTED:phone]"
    (messages,) = [v for k, v in payload["content"].items() if k.endswith("/gen_ai.input.messages")]
    assert json.loads(messages)[0]["content"] == "reach me at [REDACTED:phone]\nor [REDACTED:email]"

    spans = {row["name"]: row for row in rows(store, "spans")}
    assert spans["request support"]["user"] == "[REDACTED:email]"
    assert spans["request support"]["attributes"]["app.note"] == "call [REDACTED:phone]"
    assert spans["request support"]["attributes"]["app.card"] == "[REDACTED:card]"
    assert spans["notify [REDACTED:email]"]["error_type"] == "callback to [REDACTED:phone] failed"
    charge = spans["execute_tool charge"]
    assert charge["attributes"]["exception.message"] == "could not charge [REDACTED:card] for [REDACTED:email]"
    assert "[REDACTED:card]" in charge["attributes"]["otel.status_description"]
    (stacktrace,) = [v for k, v in payload["content"].items() if k.endswith("/exception.stacktrace")]
    assert stacktrace.endswith("ValueError: could not charge [REDACTED:card] for [REDACTED:email]\n")


def test_ids_numbers_and_plain_text_survive_unchanged(
    make_store: Callable[..., Store], trace: tuple[bytes, str]
) -> None:
    body, trace_id = trace
    redacted, plain = make_store(Redaction(patterns=(EMPLOYEE,))), make_store(DISABLED)
    for store in (redacted, plain):
        store_trace(store, body, trace_id)
    text = dump(redacted)
    for phrase in PLAIN_TEXT:
        assert phrase in text
    on, off = rows(redacted, "spans"), rows(plain, "spans")
    root = next(r for r in on if r["parent_span_id"] == "")
    assert {k: root["attributes"][k] for k in KEPT} == KEPT
    assert next(r for r in on if r["name"].startswith("notify"))["attributes"]["app.epoch_int"] == "1733022000123456789"
    assert root["trace_id"] == trace_id
    assert root["session"] == "s-42"
    assert [r["retrieved_ids"] for r in on if r["stage"] == "search"] == [["doc-1234567890123", UUID_TEXT, "doc-2"]]
    # every column that is not free text is identical with and without redaction, span by span
    text_columns = {"name", "user", "error_type", "attributes"}
    key = lambda r: r["span_id"]  # noqa: E731
    assert len(on) == len(off) == 6  # request, search, generate, two tools, notify
    for a, b in zip(sorted(on, key=key), sorted(off, key=key), strict=True):
        assert {k: v for k, v in a.items() if k not in text_columns} == {
            k: v for k, v in b.items() if k not in text_columns
        }
    generate = next(r for r in on if r["stage"] == "generate")
    assert (generate["input_tokens"], generate["output_tokens"], generate["model"]) == (120, 30, "gpt-4o-mini")
    assert generate["cost_usd"] is not None and generate["cost_usd"] > 0


def test_redaction_disabled_stores_text_as_is(make_store: Callable[..., Store], trace: tuple[bytes, str]) -> None:
    body, trace_id = trace
    store = make_store(DISABLED)
    store_trace(store, body, trace_id)
    text = dump(store)
    assert "[REDACTED:" not in text
    for where, value in PII.items():
        if where.startswith("message") or where == "tool email":
            continue  # inside JSON text: json.dumps of the dump escapes it again; checked below
        assert value in text, where
    payload = rows(store, "payloads")[0]
    assert PII["question email"] in payload["question"]
    (messages,) = [v for k, v in payload["content"].items() if k.endswith("/gen_ai.input.messages")]
    assert PII["message email"] in json.loads(messages)[0]["content"]


def test_changed_patterns_recreate_the_views(make_store: Callable[..., Store], trace: tuple[bytes, str]) -> None:
    body, trace_id = trace
    store = make_store(Redaction(builtins=("email",)))
    db = store.topology.database

    def comments() -> dict[str, str]:
        found = store.backend.select(f"SELECT name, comment FROM system.tables WHERE database = {quote(db)}")
        return {r["name"]: r["comment"] for r in to_rows(found) if r["name"].startswith("otlp_")}

    first = comments()
    install(store, Redaction(builtins=("email",)))
    assert comments() == first  # same configuration: nothing re-created
    install(store, Redaction(builtins=("email",), patterns=(EMPLOYEE,)))
    assert comments() != first
    store_trace(store, body, trace_id)
    text = dump(store)
    assert "[REDACTED:employee_id]" in text and "EMP-123456" not in text
    assert PII["passage phone"] in text  # the phone built-in is not configured here


# --- the patterns, one text at a time, in the engine ------------------------------------------------------

REDACTED = [
    ("mail john.doe@example.com now", "mail [REDACTED:email] now"),
    ("a.b+tag@mail.co.uk,x@y.io", "[REDACTED:email],[REDACTED:email]"),
    ("card 4111111111111111.", "card [REDACTED:card]."),
    ("4111-1111-1111-1111 and 4111 1111 1111 1111", "[REDACTED:card] and [REDACTED:card]"),
    ("amex 3782 822463 10005", "amex [REDACTED:card]"),
    ("4111111111111111 555-123-4567", "[REDACTED:card] [REDACTED:phone]"),  # a card then a phone: two matches
    ("19 digits 6011000990139424", "19 digits [REDACTED:card]"),
    ("(555) 123-4567 / 555.123.4567 / 1-555-123-4567", "[REDACTED:phone] / [REDACTED:phone] / [REDACTED:phone]"),
    ("+33 1 23 45 67 89;+14155552671", "[REDACTED:phone];[REDACTED:phone]"),
    ('{"t": "x\\n+1 555 123 4567\\tz@z.org"}', '{"t": "x\\n[REDACTED:phone]\\t[REDACTED:email]"}'),
    ("id EMP-654321.", "id [REDACTED:employee_id]."),
]
KEPT_TEXTS = [
    "4111111111111112",  # fails Luhn
    "41111111111111111111111",  # 23 digits
    "1733022000123456789 1733022000123 1733022000",  # epoch ns, ms, s
    "doc-1234567890123 doc-4111111111111111 order-555-123-4567",
    TRACE_REF,
    UUID_TEXT,
    "2026-12-01T03:40:00.123456789Z 2026-12-01 03:40:00",
    "0.4111111111111111 3.14159265358979 -1234567 +1.5 12345",
    "5551234567",  # contiguous digits without + are not a phone
    "user@localhost EMP-12345 v1.24.3 10.0.0.1",
]


@pytest.fixture
def engine_store(make_store: Callable[..., Store]) -> Store:
    return make_store(DISABLED)


def _apply(store: Store, redaction: Redaction, texts: list[str]) -> list[str]:
    sql = "SELECT [" + ", ".join(redaction.sql(quote(t)) for t in texts) + "] AS out"
    return list(to_rows(store.backend.select(sql))[0]["out"])


def test_each_pattern_redacts(engine_store: Store) -> None:
    texts = [t for t, _ in REDACTED]
    assert _apply(engine_store, Redaction(patterns=(EMPLOYEE,)), texts) == [want for _, want in REDACTED]


def test_no_false_positives(engine_store: Store) -> None:
    assert _apply(engine_store, Redaction(patterns=(EMPLOYEE,)), KEPT_TEXTS) == KEPT_TEXTS


def test_only_the_configured_builtins_apply(engine_store: Store) -> None:
    text = "x@y.io 4111111111111111 555-123-4567"
    assert _apply(engine_store, Redaction(builtins=("card",)), [text]) == ["x@y.io [REDACTED:card] 555-123-4567"]
    assert _apply(engine_store, DISABLED, [text]) == [text]


# --- configuration ----------------------------------------------------------------------------------------


def test_invalid_patterns_are_refused_naming_them(engine_store: Store) -> None:
    for name, pattern, reason in (
        ("lookbehind", r"(?<=EMP-)\d{6}", "not a valid RE2"),
        ("unclosed", "[0-9", "not a valid RE2"),
        ("everything", r"\d*", "matches the empty string"),
    ):
        with pytest.raises(RedactionConfigError, match=rf"agent\.redaction\.patterns\.{name}: {reason}"):
            Redaction(patterns=((name, pattern),)).check(engine_store.query)
    Redaction(patterns=(("quoted", "it's \\d+"),)).check(engine_store.query)  # quotes are escaped, not SQL


def test_settings_tree_and_bad_names() -> None:
    settings = load_settings(
        env={"RAGMON_AGENT__REDACTION": json.dumps({"builtins": ["email"], "patterns": {"employee_id": "EMP-\\d{6}"}})}
    )
    redaction = Redaction.from_settings(settings.agent.redaction)
    assert (redaction.builtins, redaction.patterns, redaction.enabled) == (("email",), (EMPLOYEE,), True)
    default = Redaction.from_settings(load_settings(env={}).agent.redaction)
    assert default.active and set(default.builtins) == {"email", "phone", "card"}
    off = load_settings(env={"RAGMON_AGENT__REDACTION__ENABLED": "false"}).agent.redaction
    assert Redaction.from_settings(off).fingerprint == "off"
    assert redaction.fingerprint != default.fingerprint
    with pytest.raises(RedactionConfigError, match=r"agent\.redaction\.patterns\.bad name"):
        Redaction(patterns=(("bad name", "x"),))
    with pytest.raises(RedactionConfigError, match=r"agent\.redaction\.patterns\.email: the name is already used"):
        Redaction(patterns=(("email", "x"),))
    with pytest.raises(ValueError, match="builtins"):
        load_settings(env={"RAGMON_AGENT__REDACTION": json.dumps({"builtins": ["ssn"]})})


def test_the_agent_redacts_what_the_real_exporter_sends(tmp_path: Path) -> None:
    """`ragmon serve` (defaults + one configured pattern), spans sent by OpenTelemetry's OTLP/HTTP exporter."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    from tests.agent.harness import AgentProcess

    cap = _Captured()
    _trace(cap)  # what _trace returns is the encoding; the exporter below encodes the same spans itself
    env = {"RAGMON_AGENT__REDACTION": json.dumps({"patterns": {"employee_id": EMPLOYEE[1]}})}
    agent = AgentProcess(tmp_path / "data", extra_env=env, grpc=False)
    try:
        agent.start(timeout_s=180)  # the shared machine can be slow to import the engine
        spans = cap.last_spans
        exporter = OTLPSpanExporter(endpoint=f"{agent.otlp_http}/v1/traces")
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        exporter.shutdown()  # type: ignore[no-untyped-call]
        assert agent.wait_for("SELECT count() AS n FROM payloads", 1, timeout_s=60) == 1  # an error trace: kept
        stored = {t: agent.query(f"SELECT * FROM {t}") for t in ("spans", "span_content", "payloads")}
        text = json.dumps(stored, ensure_ascii=False)
        assert len(stored["spans"]) == 6
        for where, value in PII.items():
            assert value not in text, where
        assert "[REDACTED:employee_id]" in text and "[REDACTED:card]" in text
        root = next(r for r in stored["spans"] if r["parent_span_id"] == "")
        assert {k: root["attributes"][k] for k in KEPT} == KEPT
        # documented: the write-ahead log holds the request as received until its segment is trimmed
        wal = b"".join(p.read_bytes() for p in (tmp_path / "data" / "wal").glob("wal-*.log"))
        assert PII["question email"].encode() in wal
    finally:
        if agent.process is not None and agent.process.poll() is None:
            agent.stop()


def test_serve_refuses_to_start_with_an_invalid_pattern(tmp_path: Path) -> None:
    env = {"RAGMON_AGENT__REDACTION": json.dumps({"patterns": {"employee_id": r"(?<=EMP-)\d{6}"}})}
    command = [sys.executable, "-m", "ragmon.cli", "serve", "--data-dir", str(tmp_path / "data")]
    command += ["--otlp-http", "127.0.0.1:0", "--otlp-grpc", "", "--api", "127.0.0.1:0"]
    done = subprocess.run(
        command, cwd=REPO, env={**_base_env(), **env}, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "agent.redaction.patterns.employee_id: not a valid RE2 regular expression" in done.stderr
    assert "listening" not in done.stdout


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
