"""A store with something for every named read (`ragmon.sinks.named_reads`), for two tenants: requests rolled up
(report, production minutes), sampling counts (kept share), kept traces with scores (quality), alerts, and labels
beside scores (labelled scores). Everything of globex's says "globex" somewhere it is read back (its feature, alert
ids, labelled trace ids' judge version), and nothing of acme's does, so a read that leaks a tenant's rows shows it.

Run as `python -m tests.agent.named_reads_case <store>` to fill a store in a process of its own (the embedded engine
serves one data path per process); `now_s` places everything a few minutes back, inside an hour's window.
"""

from __future__ import annotations

import sys
import time

from ragmon.sinks import Store, open_store

from tests.dashboard.known_rows import alert, insert_traces, payload, request, score, utc
from tests.labels import known_labels
from tests.support import release_rows

TENANTS = {"acme": "docs-qa", "globex": "globex-qa"}  # tenant -> its feature
GLOBEX_JUDGE = "globex-judge-v1"


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
    # two releases of each tenant's feature, for `compare`
    for i, (tenant, feature) in enumerate(TENANTS.items()):
        group = release_rows.Group(f"{tenant}-g", f"{feature}?", 1.0, (f"{tenant}-para",))
        stretches = [
            release_rows.Traffic(
                f"{tenant}-{n}", now_s - 3000 + 1200 * n, 30, 20.0, (group,), feature=feature, tenant=tenant
            )
            for n in (1, 2)
        ]
        release_rows.write(store, stretches, seed=i)


if __name__ == "__main__":
    opened = open_store(sys.argv[1])
    try:
        fill(opened)
    finally:
        opened.close()
