"""A store with something for every named read (`ragmon.sinks.named_reads`), for two tenants: requests rolled up
(report, production minutes), sampling counts (kept share), kept traces with scores (quality), alerts, and labels
beside scores (labelled scores), end users' feedback on requests and on labelled traces. Everything of globex's says
"globex" somewhere it is read back (its feature, alert ids, labelled trace ids' judge version), and nothing of
acme's does, so a read that leaks a tenant's rows shows it.

Run as `python -m tests.agent.named_reads_case <store>` to fill a store in a process of its own (the embedded engine
serves one data path per process); `now_s` places everything a few minutes back, inside an hour's window.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime

from ragmon.sinks import Store, open_store
from ragmon.sinks.documents_rollup_sql import documents_rollup_sql
from ragmon.sinks.schema import TRACE_QUESTION_COLUMNS, TRACE_QUESTIONS_TABLE, Ddl

from tests.dashboard.known_rows import Trace, alert, insert_traces, payload, request, score, span_id, utc
from tests.labels import known_labels
from tests.support import release_rows
from tests.support.span_rows import SpanBatch, insert_spans

TENANTS = {"acme": "docs-qa", "globex": "globex-qa"}  # tenant -> its feature
GLOBEX_JUDGE = "globex-judge-v1"
SHARED = "shared-qa"  # a feature both tenants send, with two releases (compare)


def fill(store: Store, now_s: float | None = None) -> None:
    now_s = time.time() if now_s is None else now_s
    traces = [
        request(n, now_s - 600 + 10 * n, tenant=tenant, feature=feature, scale=1.0 + n / 10)
        for i, (tenant, feature) in enumerate(TENANTS.items())
        for n in range(10 * i + 1, 10 * i + 6)
    ]
    insert_traces(store, traces)
    store.insert_payloads(
        [payload(t, probability=1.0 if t.trace_id[-1] in "13579" else 0.25, reasons=["baseline"]) for t in traces]
    )
    store.insert_scores(
        [score(t, "faithfulness", 0.2 + 0.1 * (int(t.trace_id, 16) % 5), at_s=now_s - 300) for t in traces]
    )
    _documents(store, traces, now_s)
    minute = utc(now_s - 600 - (now_s % 60))
    store.insert_sampling_counts(
        [
            {"minute": minute, "tenant": tenant, "feature": feature, "outcome": outcome, "reason": reason, "traces": n}
            for tenant, feature in TENANTS.items()
            for outcome, reason, n in (("keep", "slow", 3), ("keep", "baseline", 2), ("drop", "", 20))
        ]
    )
    resolved_at = str(utc(now_s - 700))
    store.insert_alerts(
        [
            alert("acme-p95", "firing", at_s=now_s - 500, tenant="acme"),
            alert("acme-old", "firing", at_s=now_s - 900, tenant="acme"),
            alert("acme-old", "resolved", at_s=now_s - 900, tenant="acme", labels={"resolved_at": resolved_at}),
            alert("globex-p95", "firing", at_s=now_s - 400, tenant="globex", message="globex fired"),
        ]
    )
    for tenant, base, judge in (("acme", 700, known_labels.JUDGE), ("globex", 800, GLOBEX_JUDGE)):
        ids = [known_labels.trace_id(base + i) for i in range(4)]
        known_labels.score(store, tenant, {t: 0.2 + 0.2 * i for i, t in enumerate(ids)}, version=judge)
        known_labels.label(store, tenant, {t: i % 2 == 0 for i, t in enumerate(ids)})
    # end users' feedback: on the requests (per feature) and on the labelled traces (beside the judge's scores)
    at = utc(now_s - 200)
    labelled = [
        (tenant, known_labels.trace_id(base + i)) for tenant, base in (("acme", 700), ("globex", 800)) for i in range(4)
    ]
    store.insert_feedback(
        {
            "tenant": tenant,
            "trace_id": trace_id,
            "name": "thumbs",
            "kind": "thumbs",
            "value": float(n % 2),
            "negative": n % 2 == 0,
            "voter": f"user:{n}",
            "given_at": at,
            "received_at": at,
        }
        for n, (tenant, trace_id) in enumerate([*((t.tenant, t.trace_id) for t in traces), *labelled])
    )

    _releases(store, now_s)


def _releases(store: Store, now_s: float) -> None:
    """Two releases of one feature both tenants share, each tenant with a question group and paragraph of its own
    (globex's say so), for `compare`: a comparison over every tenant mixes both, each tenant's holds its own. Hours
    back, outside the commands' window, so the report and the alerts' history stay the case's own."""
    for i, tenant in enumerate(TENANTS):
        group = release_rows.Group(f"{tenant}-g", f"{tenant} question?", 1.0, (f"{tenant}-para",))
        stretches = [
            release_rows.Traffic(
                f"r{n}", now_s - 4 * 3600 + 1200 * n, 30, 20.0, (group,), feature=SHARED, tenant=tenant
            )
            for n in (1, 2)
        ]
        release_rows.write(store, stretches, seed=i)


def _documents(store: Store, traces: list[Trace], now_s: float) -> None:
    """The document views' rows: a search span per trace retrieving its feature's paragraphs (one only in the answers
    judged unfaithful, above the feature's rate), the trace's question group, the first two traces release v1, the
    rest v2."""
    batch = SpanBatch()
    questions = []
    for k, t in enumerate(traces):
        feature = t.feature
        bad = 0.2 + 0.1 * (int(t.trace_id, 16) % 5) < 0.5
        release = "v1" if k % 5 < 2 else "v2"
        docs = [f"{feature}#{'stale' if bad else 'fresh'}", f"{feature}#common"]
        start_ns = int((now_s - 590 + k) * 1e9)
        row = {
            "tenant": t.tenant, "trace_id": t.trace_id, "span_id": f"{k + 1:08x}d0c50000",
            "parent_span_id": span_id(t, 0),
            "name": "search", "stage": "search", "feature": feature, "eval_run": "", "user": "", "session": "",
            "service": "svc", "release": release, "environment": "", "start_time": start_ns, "duration_ms": 5.0,
            "status": "ok", "error_type": "", "model": "", "provider": "", "input_tokens": 0, "output_tokens": 0,
            "cached_input_tokens": 0, "cost_usd": None, "top1_score": None, "similarity_gap": None,
            "norm_deviation": None, "ttft_ms": None, "retrieved_ids": [f"c{k}", f"c{k}b"],
            "retrieved_scores": [0.9, 0.8], "retrieved_sources": docs, "attributes": {}, "ingest_seq": 1,
        }  # fmt: skip
        for name, value in row.items():
            getattr(batch, name).append(value)
        questions.append(
            {
                "tenant": t.tenant,
                "trace_id": t.trace_id,
                "feature": feature,
                "eval_run": "",
                "release": release,
                "environment": "",
                "start_time": datetime.fromtimestamp(start_ns / 1e9, UTC),
                "group_id": f"{feature}-group",
                "question": f"a question of {feature}",
                "similarity": 1.0,
                "failed": 0,
                "duration_ms": 5.0,
            }
        )
    insert_spans(store, batch)
    # their documents into the document rollups, as the agent's roll-up does once they are decided (not the span
    # rollup: these search spans would add calls, and minutes, to the report's rows)
    store.backend.execute(documents_rollup_sql(Ddl(store.topology)), {"seq_from": 1, "seq_to": 1})
    store._insert_rows(TRACE_QUESTIONS_TABLE, TRACE_QUESTION_COLUMNS, questions, None)


if __name__ == "__main__":
    opened = open_store(sys.argv[1])
    try:
        fill(opened)
    finally:
        opened.close()
