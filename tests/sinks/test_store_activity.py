"""`Store.span_activity` and `Store.alert_rows`, the demo's reads: a range's spans, traces and last start (of one
service or all), and the stored rows of chosen alerts — names that look like SQL are values."""

from __future__ import annotations

import time

from ragmon.sinks import Store

from tests.support.span_rows import insert_spans
from tests.support.synth import make_batch

ODD_SERVICE = "demo' OR service != '"


def test_span_activity_counts_a_range_of_one_service_or_all(store: Store) -> None:
    start_s = int(time.time()) // 60 * 60 - 1200
    batch = make_batch(8, seed=4, start_ns=start_s * 10**9, spread_s=600)
    batch.service = [ODD_SERVICE if i < 5 * 3 else "other" for i in range(len(batch))]  # 3 traces of 5 spans
    insert_spans(store, batch)

    everything = store.span_activity(start_s)
    assert everything == {"spans": 40, "traces": 8, "last_s": max(batch.start_time) // 10**9}
    odd = store.span_activity(start_s, service=ODD_SERVICE)
    assert (odd["spans"], odd["traces"]) == (15, 3)
    assert store.span_activity(start_s, service="demo") == {"spans": 0, "traces": 0, "last_s": 0}
    assert store.span_activity(start_s - 600, start_s) == {"spans": 0, "traces": 0, "last_s": 0}  # before it
    first_half = store.span_activity(start_s, start_s + 300)["spans"]
    assert first_half == sum(start_s * 10**9 <= t < (start_s + 300) * 10**9 for t in batch.start_time)


def test_alert_rows_are_the_chosen_alerts_every_state(store: Store) -> None:
    odd_id = "a1' OR alert_id != '"
    alert = {"tenant": "acme", "rule": "p95"}
    store.insert_alerts(
        [
            {**alert, "alert_id": odd_id, "state": "firing"},
            {**alert, "alert_id": odd_id, "state": "resolved"},
            {**alert, "alert_id": "a2", "state": "firing"},
        ]
    )
    assert sorted(row["state"] for row in store.alert_rows([odd_id])) == ["firing", "resolved"]
    assert [row["alert_id"] for row in store.alert_rows(["a2", "a3"])] == ["a2"]
    assert store.alert_rows([]) == []
