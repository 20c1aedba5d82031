"""Receive-path and store-side throughput of OTLP ingestion on pre-encoded, realistic 512-span requests.

Python side, per request (what a receiver pays): raw protobuf `ParseFromString` (the floor), parse + validate,
`seal`, OTLP/JSON parse + convert + validate. Store side: chDB parses sealed envelopes with the Protobuf format
into a Null table whose materialized view runs `normalise_select` into a second Null table, whose views run
`spans_select` and `content_select` — spans/s for batches of
N requests, wall clock and process CPU (all threads). Requests mimic RAG traffic: traces of a request root plus
embed, search, rerank and generate spans with 5–12 attributes each (ragmon SDK names, one trace in four in the
OpenInference dialect, so both routing paths are measured).

    /work/venv/bin/python benchmarks/collectors_decode.py [--seconds 3] [--spans 512] [--batch 50] [--http SENDERS]

With ``--http N`` it also measures the OTLP/HTTP receiver end to end: N sender processes post the pre-encoded
protobuf request over keep-alive connections to an `HttpReceiver` whose consumer drops bodies.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from ragmon.collectors.decode import parse_json, parse_protobuf
from ragmon.collectors.otlp_json import request_from_json
from ragmon.collectors.validate import validate
from ragmon.sinks.envelope import INPUT_COLUMNS, PROTO_MESSAGE, PROTO_SCHEMA, frame, seal
from ragmon.sinks.normalise_sql import content_select, normalise_select, spans_select

from ragmon.model import CONTENT_COLUMNS, SPAN_COLUMNS


def _kv(key: str, value: Any) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    if isinstance(value, list):
        items = [_kv("", v).value for v in value]
        return KeyValue(key=key, value=AnyValue(array_value={"values": items}))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def _trace_spans(rng: random.Random, openinference: bool) -> list[tuple[str, dict[str, Any]]]:
    ids = [f"doc-{rng.randrange(100_000)}" for _ in range(10)]
    scores = sorted((round(rng.random(), 4) for _ in range(10)), reverse=True)
    feature = rng.choice(["qa", "search", "support"])
    if openinference:
        docs: dict[str, Any] = {}
        for i in range(5):
            docs[f"retrieval.documents.{i}.document.id"] = ids[i]
            docs[f"retrieval.documents.{i}.document.score"] = scores[i]
        return [
            ("rag.query", {"openinference.span.kind": "CHAIN", "user.id": "u-17", "session.id": "s-9"}),
            ("embed", {"openinference.span.kind": "EMBEDDING", "embedding.model_name": "text-embedding-3-small"}),
            ("retrieve", {"openinference.span.kind": "RETRIEVER", **docs}),
            (
                "llm",
                {
                    "openinference.span.kind": "LLM",
                    "llm.model_name": "gpt-4o-mini",
                    "llm.provider": "openai",
                    "llm.token_count.prompt": rng.randrange(200, 3000),
                    "llm.token_count.completion": rng.randrange(20, 400),
                    "llm.token_count.total": 1000,
                },
            ),
        ]
    common = {"ragmon.feature": feature, "ragmon.user": "u-17", "ragmon.session": "s-9"}
    return [
        ("rag.request", {**common, "ragmon.stage": "request", "gen_ai.operation.name": "invoke_workflow"}),
        (
            "embed",
            {
                **common,
                "ragmon.stage": "embed",
                "gen_ai.operation.name": "embeddings",
                "gen_ai.request.model": "text-embedding-3-small",
                "gen_ai.usage.input_tokens": rng.randrange(5, 40),
                "ragmon.embedding.query_norm_deviation": 0.0001,
                "ragmon.embedding.dimensions": 1536,
            },
        ),
        (
            "search",
            {
                **common,
                "ragmon.stage": "search",
                "gen_ai.operation.name": "retrieval",
                "gen_ai.data_source.id": "kb-main",
                "ragmon.retrieval.document_ids": ids,
                "ragmon.retrieval.document_scores": scores,
                "ragmon.retrieval.top1_score": scores[0],
                "ragmon.retrieval.similarity_gap": scores[0] - scores[-1],
            },
        ),
        (
            "rerank",
            {
                **common,
                "ragmon.stage": "rerank",
                "gen_ai.operation.name": "rerank",
                "gen_ai.request.model": "rerank-v3.5",
                "ragmon.rerank.output_ids": ids[:5],
                "ragmon.rerank.output_scores": scores[:5],
                "ragmon.rerank.search_units": 1,
            },
        ),
        (
            "chat gpt-4o-mini",
            {
                **common,
                "ragmon.stage": "generate",
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
                "gen_ai.usage.input_tokens": rng.randrange(200, 3000),
                "gen_ai.usage.output_tokens": rng.randrange(20, 400),
                "gen_ai.response.finish_reasons": ["stop"],
                "ragmon.generate.time_to_first_token_ms": round(rng.uniform(80, 900), 1),
            },
        ),
    ]


def build_request(spans: int, seed: int = 7) -> ExportTraceServiceRequest:
    rng = random.Random(seed)
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.extend(
        [_kv("service.name", "rag-api"), _kv("service.version", "1.4.2"), _kv("telemetry.sdk.language", "python")]
    )
    scope = resource_spans.scope_spans.add()
    scope.scope.name = "ragmon"
    now_ns = time.time_ns()
    made = 0
    while made < spans:
        trace_id = os.urandom(16)
        root_id = os.urandom(8)
        for index, (name, attrs) in enumerate(_trace_spans(rng, openinference=rng.random() < 0.25)):
            if made == spans:
                break
            span = scope.spans.add()
            span.trace_id = trace_id
            span.span_id = root_id if index == 0 else os.urandom(8)
            if index:
                span.parent_span_id = root_id
            span.name = name
            span.kind = Span.SPAN_KIND_INTERNAL if index else Span.SPAN_KIND_SERVER
            span.start_time_unix_nano = now_ns + index * 1_000_000
            span.end_time_unix_nano = span.start_time_unix_nano + rng.randrange(1_000_000, 900_000_000)
            span.attributes.extend(_kv(k, v) for k, v in attrs.items())
            made += 1
    return request


def to_otlp_json(request: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON by hand: protobuf's own JSON mapping would base64 the ids, which OTLP forbids."""

    def value(v: AnyValue) -> dict[str, Any]:
        kind = v.WhichOneof("value")
        if kind == "string_value":
            return {"stringValue": v.string_value}
        if kind == "int_value":
            return {"intValue": str(v.int_value)}
        if kind == "double_value":
            return {"doubleValue": v.double_value}
        if kind == "bool_value":
            return {"boolValue": v.bool_value}
        return {"arrayValue": {"values": [value(x) for x in v.array_value.values]}}

    def attrs(kvs: Any) -> list[dict[str, Any]]:
        return [{"key": kv.key, "value": value(kv.value)} for kv in kvs]

    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": attrs(rs.resource.attributes)},
                "scopeSpans": [
                    {
                        "scope": {"name": ss.scope.name},
                        "spans": [
                            {
                                "traceId": sp.trace_id.hex(),
                                "spanId": sp.span_id.hex(),
                                "parentSpanId": sp.parent_span_id.hex(),
                                "name": sp.name,
                                "kind": sp.kind,
                                "startTimeUnixNano": str(sp.start_time_unix_nano),
                                "endTimeUnixNano": str(sp.end_time_unix_nano),
                                "attributes": attrs(sp.attributes),
                                "status": {},
                            }
                            for sp in ss.spans
                        ],
                    }
                    for ss in rs.scope_spans
                ],
            }
            for rs in request.resource_spans
        ]
    }
    return json.dumps(doc).encode()


def _rate(label: str, spans: int, work: Callable[[], object], seconds: float) -> float:
    work()  # warm caches (price lookups, interned names)
    runs = 0
    began = time.perf_counter()
    elapsed = 0.0
    while elapsed < seconds:
        work()
        runs += 1
        elapsed = time.perf_counter() - began
    rate = runs * spans / elapsed
    print(f"{label:<40} {rate:>12,.0f} spans/s   ({elapsed / runs * 1e3:.2f} ms per {spans}-span request)")
    return rate


class _DropConsumer:
    def consume(self, tenant: str, body: bytes, spans: int) -> None:
        pass


def _plan_times(session: Any) -> None:
    """Planning time of each SELECT (best of 3 on an empty Memory table): a materialized view plans its SELECT
    on every INSERT, so this is paid per insert whatever the batch size (spans_select ~0.1 s on an idle core)."""
    columns = ", ".join(f"`{n}` {t}" for n, t in INPUT_COLUMNS)
    session.query(f"CREATE TABLE plan_in ({columns}) ENGINE = Memory")
    session.query(f"CREATE TABLE plan_norm ENGINE = Memory EMPTY AS {normalise_select('plan_in')}")
    for label, select in (
        ("normalise_select", normalise_select("plan_in")),
        ("spans_select", spans_select("plan_norm")),
        ("content_select", content_select("plan_norm")),
    ):
        best = float("inf")
        for _ in range(3):
            began = time.perf_counter()
            session.query(select)
            best = min(best, time.perf_counter() - began)
        print(f"{'chDB plan ' + label:<40} {best * 1e3:>12.0f} ms      ({len(select):,} chars of SQL, empty table)")
    session.query("DROP TABLE plan_norm")
    session.query("DROP TABLE plan_in")


def _store_rates(body: bytes, spans: int, batch: int, repeats: int) -> None:
    """chDB insert + normalise of `batch` sealed requests per INSERT, through more and more of the views."""
    from chdb import session as chdb_session

    workdir = Path(tempfile.mkdtemp(prefix="ragmon-bench-"))
    schema = workdir / "otlp.proto"
    schema.write_text(PROTO_SCHEMA, encoding="utf-8")
    session = chdb_session.Session(str(workdir / "db"))
    _plan_times(session)
    columns = {"spans": SPAN_COLUMNS, "content": CONTENT_COLUMNS}
    selects = {"spans": spans_select("b.norm"), "content": content_select("b.norm")}
    envelopes = [seal(body, "bench", seq) for seq in range(batch)]
    framed = [frame([e]) for e in envelopes]
    for label, chosen in (
        ("parse only (no views)", None),
        ("parse + normalise", ()),
        ("parse + normalise + spans", ("spans",)),
        ("parse + normalise + spans + content", ("spans", "content")),
    ):
        session.query("DROP DATABASE IF EXISTS b")
        session.query("CREATE DATABASE b")
        session.query(f"CREATE TABLE b.otlp_in ({', '.join(f'{n} {t}' for n, t in INPUT_COLUMNS)}) ENGINE = Null")
        if chosen is not None:
            session.query(f"CREATE TABLE b.norm ENGINE = Null EMPTY AS {normalise_select('b.otlp_in')}")
            session.query(f"CREATE MATERIALIZED VIEW b.norm_mv TO b.norm AS {normalise_select('b.otlp_in')}")
        for view in chosen or ():
            definition = ", ".join(f"`{n}` {t}" for n, t in columns[view])
            session.query(f"CREATE TABLE b.{view} ({definition}) ENGINE = MergeTree ORDER BY tuple()")
            session.query(f"CREATE MATERIALIZED VIEW b.{view}_mv TO b.{view} AS {selects[view]}")
        walls: list[float] = []
        cpus: list[float] = []
        for _ in range(repeats):
            wall, cpu = time.perf_counter(), time.process_time()
            insert = session.send_insert(
                f"INSERT INTO b.otlp_in SETTINGS format_schema='{schema}:{PROTO_MESSAGE}'", "Protobuf"
            )
            for envelope in framed:
                insert.append(envelope)
            insert.finish()
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
        total = spans * batch
        # The first inserts compile expressions (JIT) and warm caches: medians of the rest.
        wall_s, cpu_s = statistics.median(walls[2:]), statistics.median(cpus[2:])
        print(
            f"{'chDB ' + label:<40} {total / wall_s:>12,.0f} spans/s   "
            f"({cpu_s / total * 1e6:.2f} µs CPU per span, batch of {batch} requests)"
        )
    session.close()


def _sender(port: int, body: bytes, seconds: float, results: Any) -> None:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/x-protobuf"}
    sent = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        connection.request("POST", "/v1/traces", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")
        sent += 1
    results.put(sent)


def _http_rate(body: bytes, spans: int, senders: int, seconds: float) -> None:
    import multiprocessing

    from ragmon.collectors import HttpReceiver

    with HttpReceiver(_DropConsumer(), port=0) as receiver:
        context = multiprocessing.get_context("spawn")
        results = context.Queue()
        processes = [
            context.Process(target=_sender, args=(receiver.port, body, seconds, results)) for _ in range(senders)
        ]
        began = time.perf_counter()
        for process in processes:
            process.start()
        requests = sum(results.get(timeout=seconds + 60) for _ in processes)
        elapsed = time.perf_counter() - began
        for process in processes:
            process.join()
    print(
        f"{'HTTP receiver end to end (' + str(senders) + ' senders)':<40} {requests * spans / elapsed:>12,.0f} spans/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per Python measurement")
    parser.add_argument("--spans", type=int, default=512, help="spans per request")
    parser.add_argument("--batch", type=int, default=50, help="requests per chDB insert")
    parser.add_argument("--repeats", type=int, default=9, help="chDB inserts per measurement")
    parser.add_argument("--http", type=int, default=0, metavar="SENDERS", help="also measure the HTTP receiver")
    args = parser.parse_args()
    request = build_request(args.spans)
    body = request.SerializeToString()
    json_body = to_otlp_json(request)
    print(f"request: {args.spans} spans, protobuf {len(body):,} B, JSON {len(json_body):,} B")
    attrs_per_span = sum(len(s.attributes) for s in request.resource_spans[0].scope_spans[0].spans) / args.spans
    print(f"attributes per span: {attrs_per_span:.1f} (mean); load average: {os.getloadavg()[0]:.2f}")
    check = validate(parse_protobuf(body), body)
    assert check.spans_accepted == args.spans and check.body is body, check.rejected_by_reason

    probe = {f"k{i}": i for i in range(64)}
    began = time.perf_counter()
    for _ in range(20_000):
        for key in probe:
            probe.get(key)
    # Machines here are shared: this reference says how fast the interpreter ran during the measurement.
    print(f"reference: dict.get {(time.perf_counter() - began) / 1_280_000 * 1e9:.0f} ns (~40 ns on an idle core)")

    def raw_parse() -> object:
        return ExportTraceServiceRequest.FromString(body)

    def parse_validate() -> object:
        return validate(parse_protobuf(body), body)

    def json_path() -> object:
        converted, malformed = request_from_json(parse_json(json_body))
        return validate(converted, malformed_spans=malformed)

    _rate("protobuf ParseFromString only", args.spans, raw_parse, args.seconds)
    _rate("protobuf parse + validate", args.spans, parse_validate, args.seconds)
    _rate("seal (per request)", args.spans, lambda: seal(body, "tenant", 123_456), args.seconds)
    _rate("JSON parse + convert + validate", args.spans, json_path, args.seconds)
    _store_rates(body, args.spans, args.batch, args.repeats)
    if args.http:
        _http_rate(body, args.spans, args.http, args.seconds)


if __name__ == "__main__":
    main()
