"""Synthetic `spans` rows (a `span_rows.SpanBatch`) and OTLP request bodies with known numbers, for the store's
tests and benchmarks.

Each request is a root span plus embed → search → rerank → generate stage spans, with log-normal durations per
stage, tokens and cost on `generate`, and retrieved ids on `search`. Everything derives from a seeded
`random.Random`, so a test can recompute the expected report from the batch itself.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tests.support.span_rows import SpanBatch

# (stage, span name, log-normal mu of duration_ms, sigma)
_STAGES: tuple[tuple[str, str, float, float], ...] = (
    ("embed", "embed query", 3.0, 0.4),
    ("search", "vector search", 3.5, 0.6),
    ("rerank", "rerank", 4.0, 0.5),
    ("generate", "chat gpt-4o-mini", 6.5, 0.7),
)
_MODELS = {"embed": "text-embedding-3-small", "rerank": "rerank-v3", "generate": "gpt-4o-mini", "search": ""}


def make_batch(
    requests: int,
    *,
    seed: int = 0,
    start_ns: int | None = None,
    spread_s: float = 600.0,
    features: tuple[str, ...] = ("support", "search"),
    tenants: tuple[str, ...] = ("acme",),
    error_rate: float = 0.02,
    ingest_seq: int = 0,
    eval_run: str = "",
) -> SpanBatch:
    """`requests` traces of 5 spans each, start times spread uniformly over `spread_s` after `start_ns`
    (default: the minute that began an hour ago — recent, because tables expire old rows at once by TTL).
    Every span carries `ingest_seq` (the write-ahead-log position of the request that would have carried it)."""
    rng = random.Random(seed)
    if start_ns is None:
        start_ns = (int(time.time()) // 60 * 60 - 3600) * 10**9
    b = SpanBatch()
    for r in range(requests):
        trace_id = f"{rng.getrandbits(128):032x}"
        root_id = f"{rng.getrandbits(64):016x}"
        tenant = tenants[r % len(tenants)]
        feature = features[rng.randrange(len(features))]
        t0 = start_ns + int(rng.random() * spread_s * 1e9)
        stage_rows: list[tuple[str, str, float, str]] = []
        total_ms = 0.0
        for stage, name, mu, sigma in _STAGES:
            duration_ms = rng.lognormvariate(mu, sigma)
            total_ms += duration_ms
            stage_rows.append((stage, name, duration_ms, f"{rng.getrandbits(64):016x}"))
        failed = rng.random() < error_rate
        rows = [("request", "POST /ask", total_ms, root_id), *stage_rows]
        offset_ms = 0.0
        for i, (stage, name, duration_ms, span_id) in enumerate(rows):
            is_root = i == 0
            b.tenant.append(tenant)
            b.trace_id.append(trace_id)
            b.span_id.append(span_id)
            b.parent_span_id.append("" if is_root else root_id)
            b.name.append(name)
            b.stage.append(stage)
            b.feature.append(feature)
            b.eval_run.append(eval_run)
            b.user.append(f"user-{rng.randrange(1000)}")
            b.session.append(f"session-{rng.randrange(300)}")
            b.service.append("rag-api")
            b.start_time.append(t0 + int(offset_ms * 1e6))
            if not is_root:
                offset_ms += duration_ms
            b.duration_ms.append(duration_ms)
            error = failed and (is_root or stage == "generate")
            b.status.append("error" if error else "ok")
            b.error_type.append("TimeoutError" if error else "")
            model = "" if is_root else _MODELS[stage]
            b.model.append(model)
            b.provider.append("openai" if model.startswith(("gpt", "text-")) else ("cohere" if model else ""))
            generate = stage == "generate"
            input_tokens = rng.randrange(200, 3000) if generate else (rng.randrange(5, 60) if stage == "embed" else 0)
            output_tokens = rng.randrange(20, 600) if generate else 0
            b.input_tokens.append(input_tokens)
            b.output_tokens.append(output_tokens)
            b.cached_input_tokens.append(input_tokens // 4 if generate else 0)
            if generate:
                b.cost_usd.append(input_tokens * 0.15e-6 + output_tokens * 0.6e-6)
            elif stage == "embed":
                b.cost_usd.append(input_tokens * 0.02e-6)
            else:
                b.cost_usd.append(None)
            search = stage == "search"
            top1 = rng.uniform(0.4, 0.95) if search else None
            b.top1_score.append(top1)
            b.similarity_gap.append(rng.uniform(0.0, 0.2) if search else None)
            b.norm_deviation.append(rng.uniform(0.0, 0.05) if stage == "embed" else None)
            b.ttft_ms.append(duration_ms * rng.uniform(0.05, 0.3) if generate else None)
            if search and top1 is not None:
                b.retrieved_ids.append([f"doc-{rng.randrange(5000)}" for _ in range(5)])
                b.retrieved_scores.append(sorted((rng.uniform(0.2, top1) for _ in range(4)), reverse=True))
                b.retrieved_scores[-1].insert(0, top1)
            else:
                b.retrieved_ids.append([])
                b.retrieved_scores.append([])
            b.attributes.append({"http.route": "/ask", "deployment.environment": "prod"} if is_root else {})
            b.ingest_seq.append(ingest_seq)
    return b


# --- OTLP request bodies (opentelemetry-proto is imported only here: the store itself never needs it) ----------


def _any_value(value: Any) -> Any:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue

    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, list | tuple):
        out = AnyValue()
        out.array_value.values.extend(_any_value(v) for v in value)
        return out
    return AnyValue(string_value=str(value))


def encode_otlp_request(spans: Sequence[Mapping[str, Any]], service: str = "rag-api") -> bytes:
    """An ExportTraceServiceRequest from span dicts: trace_id/span_id/parent_span_id (hex), name, start_ns,
    duration_ms, status_code (0 unset, 1 ok, 2 error), attributes."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value=service)))
    scope = rs.scope_spans.add()
    for s in spans:
        span = scope.spans.add()
        span.trace_id = bytes.fromhex(s["trace_id"])
        span.span_id = bytes.fromhex(s["span_id"])
        span.parent_span_id = bytes.fromhex(s.get("parent_span_id", ""))
        span.name = s.get("name", "span")
        span.start_time_unix_nano = s["start_ns"]
        span.end_time_unix_nano = s["start_ns"] + int(s["duration_ms"] * 1e6)
        span.status.code = s.get("status_code", 1)
        for key, value in s.get("attributes", {}).items():
            span.attributes.append(KeyValue(key=key, value=_any_value(value)))
    return request.SerializeToString()


def otlp_traces(requests: int, *, seed: int = 0, start_ns: int | None = None, spread_s: float = 600.0) -> list[dict]:
    """Span dicts for `requests` traces as the ragmon SDK writes them: a root and embed, search, rerank and
    generate spans, with ragmon/GenAI attributes and captured question, passages and answer."""
    rng = random.Random(seed)
    if start_ns is None:
        start_ns = (int(time.time()) // 60 * 60 - 3600) * 10**9
    out: list[dict] = []
    for _ in range(requests):
        trace_id = f"{rng.getrandbits(128):032x}"
        root = f"{rng.getrandbits(64):016x}"
        t0 = start_ns + int(rng.random() * spread_s * 1e9)
        feature = rng.choice(("support", "search", "billing"))
        ids = [f"doc-{rng.randrange(5000)}" for _ in range(5)]
        scores = sorted((rng.uniform(0.2, 0.95) for _ in range(5)), reverse=True)
        children = [
            (
                "embeddings",
                "embed query",
                3.0,
                {"gen_ai.request.model": "text-embedding-3-small", "gen_ai.usage.input_tokens": rng.randrange(5, 60)},
            ),
            (
                "retrieval",
                "vector search",
                3.5,
                {
                    "ragmon.retrieval.document_ids": ids,
                    "ragmon.retrieval.document_scores": scores,
                    "ragmon.retrieval.top1_score": scores[0],
                    "ragmon.retrieval.similarity_gap": scores[0] - scores[-1],
                    "ragmon.retrieval.document_texts": json.dumps([f"passage text {i} " * 8 for i in ids]),
                },
            ),
            (
                "rerank",
                "rerank",
                4.0,
                {"ragmon.retrieval.document_ids": ids[:3], "ragmon.retrieval.document_scores": scores[:3]},
            ),
            (
                "chat",
                "chat gpt-4o-mini",
                6.5,
                {
                    "gen_ai.request.model": "gpt-4o-mini",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.usage.input_tokens": rng.randrange(200, 3000),
                    "gen_ai.usage.output_tokens": rng.randrange(20, 600),
                    "gen_ai.output.messages": json.dumps(
                        [{"role": "assistant", "parts": [{"type": "text", "content": "An answer. " * 10}]}]
                    ),
                },
            ),
        ]
        total_ms = 0.0
        spans = []
        for i, (operation, name, mu, attributes) in enumerate(children):
            duration_ms = rng.lognormvariate(mu, 0.5)
            spans.append(
                {
                    "trace_id": trace_id,
                    "span_id": f"{rng.getrandbits(64):016x}",
                    "parent_span_id": root,
                    "name": name,
                    "start_ns": t0 + int(total_ms * 1e6) + i,
                    "duration_ms": duration_ms,
                    "attributes": {"gen_ai.operation.name": operation, "ragmon.feature": feature, **attributes},
                }
            )
            total_ms += duration_ms
        out.append(
            {
                "trace_id": trace_id,
                "span_id": root,
                "name": "POST /ask",
                "start_ns": t0,
                "duration_ms": total_ms,
                "attributes": {
                    "ragmon.stage": "request",
                    "ragmon.feature": feature,
                    "ragmon.user": f"user-{rng.randrange(1000)}",
                    "ragmon.question": "What is the refund window?",
                },
            }
        )
        out.extend(spans)
    return out
