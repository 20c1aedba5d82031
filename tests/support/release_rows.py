"""Two releases' traffic written straight into a store — spans, question groups, payloads and judged scores — with
every number chosen here, so a release comparison can be checked against the same numbers computed in Python.

A trace is three spans (the request, a search that retrieved documents with their paragraph ids, a generation with
tokens and cost), one `trace_questions` row (its question group), one payload (kept with probability `p`) and one
faithfulness score (flagged a refusal when the trace's answer was one). `Traffic` describes one release's stretch.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ragmon.sinks import Store
from ragmon.sinks.schema import (
    PAYLOAD_COLUMNS,
    SCORE_COLUMNS,
    TRACE_QUESTION_COLUMNS,
    TRACE_QUESTIONS_TABLE,
)

from tests.support.span_rows import SpanBatch, insert_spans


@dataclass(frozen=True)
class Group:
    """A recurring question, how it is asked, and what each trace of it does under one release."""

    group_id: str
    question: str
    weight: float  # share of the release's traffic
    documents: tuple[str, ...]  # the paragraph ids a trace of it retrieves
    error_rate: float = 0.0
    faithfulness: float = 0.8  # mean judged score
    refusal_rate: float = 0.0
    document_rate: float = 1.0  # the chance a trace retrieves each of `documents`


@dataclass(frozen=True)
class Traffic:
    release: str
    start_s: float
    traces: int
    spacing_s: float
    groups: tuple[Group, ...]
    duration_ms: float = 400.0  # scale of the request's duration (lognormal around it)
    p_keep: float = 0.5
    feature: str = "support"
    tenant: str = "t"


@dataclass
class Written:
    """What was written, per release: the values a comparison must find."""

    traces: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _hex(rng: random.Random, digits: int) -> str:
    return f"{rng.getrandbits(digits * 4):0{digits}x}"


def write(store: Store, traffic: Sequence[Traffic], seed: int = 0) -> Written:
    rng = random.Random(seed)
    batch = SpanBatch()
    questions: list[dict[str, Any]] = []
    payloads: list[dict[str, Any]] = []
    scores: list[dict[str, Any]] = []
    written = Written()
    for stretch in traffic:
        weights = [g.weight for g in stretch.groups]
        records = written.traces.setdefault(stretch.release, [])
        for i in range(stretch.traces):
            group = rng.choices(stretch.groups, weights)[0]
            trace_id, start_s = _hex(rng, 32), stretch.start_s + i * stretch.spacing_s
            failed = rng.random() < group.error_rate
            duration = stretch.duration_ms * rng.lognormvariate(0, 0.5)
            cost = 0.001 + 0.0005 * rng.random()
            tokens = (rng.randint(200, 400), rng.randint(20, 80))
            refused = rng.random() < group.refusal_rate
            value = min(1.0, max(0.0, rng.gauss(group.faithfulness, 0.1)))
            root = _hex(rng, 16)
            _span(batch, stretch, trace_id, root, "", "request", start_s, duration, "error" if failed else "ok")
            search = _span(batch, stretch, trace_id, _hex(rng, 16), root, "search", start_s, duration * 0.2, "ok")
            documents = [d for d in group.documents if rng.random() < group.document_rate]
            batch.retrieved_ids[search] = [f"{stretch.release}-chunk-{d}" for d in documents]
            batch.retrieved_sources[search] = documents
            batch.retrieved_scores[search] = [0.9 - 0.1 * k for k in range(len(documents))]
            batch.top1_score[search] = 0.9
            batch.similarity_gap[search] = 0.1
            gen = _span(batch, stretch, trace_id, _hex(rng, 16), root, "generate", start_s, duration * 0.7, "ok")
            batch.input_tokens[gen], batch.output_tokens[gen] = tokens
            batch.cost_usd[gen] = cost
            when = datetime.fromtimestamp(start_s, UTC)
            questions.append(
                {
                    "tenant": stretch.tenant,
                    "trace_id": trace_id,
                    "feature": stretch.feature,
                    "eval_run": "",
                    "release": stretch.release,
                    "environment": "",
                    "start_time": when,
                    "group_id": group.group_id,
                    "question": group.question,
                    "similarity": 1.0,
                    "failed": int(failed),
                    "duration_ms": duration,
                }
            )
            kept = rng.random() < stretch.p_keep
            if kept:
                payloads.append(_payload(stretch, trace_id, when))
                scores.append(_score(stretch, trace_id, None if refused else value, refused, when))
            records.append(
                {
                    "trace_id": trace_id,
                    "group": group.group_id,
                    "failed": failed,
                    "duration_ms": duration,
                    "cost": cost,
                    "tokens": sum(tokens),
                    "kept": kept,
                    "value": None if refused else value,
                    "refused": refused,
                    "documents": documents,
                }
            )
    insert_spans(store, batch)
    store._insert_rows(TRACE_QUESTIONS_TABLE, TRACE_QUESTION_COLUMNS, questions, None)
    if payloads:
        store._insert_rows("payloads", PAYLOAD_COLUMNS, payloads, None)
        store._insert_rows("scores", SCORE_COLUMNS, scores, None)
    return written


def _span(
    batch: SpanBatch,
    stretch: Traffic,
    trace_id: str,
    span_id: str,
    parent: str,
    stage: str,
    start_s: float,
    duration_ms: float,
    status: str,
) -> int:
    batch.tenant.append(stretch.tenant)
    batch.trace_id.append(trace_id)
    batch.span_id.append(span_id)
    batch.parent_span_id.append(parent)
    batch.name.append(stage)
    batch.stage.append(stage)
    batch.feature.append(stretch.feature)
    batch.eval_run.append("")
    batch.user.append("")
    batch.session.append("")
    batch.service.append("support-bot")
    batch.release.append(stretch.release)
    batch.environment.append("prod")
    batch.start_time.append(int(start_s * 1e9))
    batch.duration_ms.append(duration_ms)
    batch.status.append(status)
    batch.error_type.append("")
    batch.model.append("m" if stage == "generate" else "")
    batch.provider.append("")
    batch.input_tokens.append(0)
    batch.output_tokens.append(0)
    batch.cached_input_tokens.append(0)
    batch.cost_usd.append(None)
    batch.top1_score.append(None)
    batch.similarity_gap.append(None)
    batch.norm_deviation.append(None)
    batch.ttft_ms.append(None)
    batch.retrieved_ids.append([])
    batch.retrieved_scores.append([])
    batch.retrieved_sources.append([])
    batch.attributes.append({})
    batch.ingest_seq.append(0)
    return len(batch.span_id) - 1


def _payload(stretch: Traffic, trace_id: str, when: datetime) -> dict[str, Any]:
    return {
        "tenant": stretch.tenant,
        "trace_id": trace_id,
        "feature": stretch.feature,
        "eval_run": "",
        "release": stretch.release,
        "environment": "prod",
        "session": "",
        "start_time": when,
        "question": "",
        "answer": "",
        "passages": [],
        "tool_calls": [],
        "messages": [],
        "context_source": "passages",
        "content": {},
        "sampling_reason": "baseline",
        "sampling_reasons": ["baseline"],
        "inclusion_probability": stretch.p_keep,
    }


def _score(stretch: Traffic, trace_id: str, value: float | None, refused: bool, when: datetime) -> dict[str, Any]:
    return {
        "tenant": stretch.tenant,
        "trace_id": trace_id,
        "feature": stretch.feature,
        "eval_run": "",
        "release": "",  # as the judge path wrote it before the releases work: the payload says which
        "metric": "faithfulness",
        "judge_version": "local:test",
        "value": value,
        "status": "ok" if value is not None else "unscorable",
        "explanation": "",
        "claims": [],
        "judge_model": "",
        "prompt_version": "",
        "input_tokens": 0,
        "output_tokens": 0,
        "cost_usd": None,
        "run_name": "",
        "scored_at": when,  # judged as its trace started: a window over scores finds it with its trace
        "flags": ["refusal"] if refused else [],
        "judge_calls": 0,
        "claim_flags": [],
        "claim_support": [],
        "sampling_reason": "baseline",
        "inclusion_probability": stretch.p_keep,
        "context_source": "passages",
    }
