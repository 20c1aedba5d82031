"""The judges' side of the store carries a trace's release (schema v10) on both backends: the payload read for
judging says which release the trace ran, and a score row written with it keeps it."""

from __future__ import annotations

import asyncio
import time

from ragmon.judges.queue import Lease
from ragmon.judges.score_rows import score_row
from ragmon.judges.types import MetricResult, Status
from ragmon.sinks import Store

from ragmon.pipeline.judge_store import StoredPayload, StorePayloadSource, StoreScoreSink


def test_the_release_goes_from_the_payload_read_for_judging_to_the_score_row(store: Store) -> None:
    released, unreleased = "1" * 32, "2" * 32
    payload = {"tenant": "acme", "start_time": time.time_ns(), "question": "q?", "answer": "a."}
    store.insert_payloads([{**payload, "trace_id": released, "release": "2.3.1"}, {**payload, "trace_id": unreleased}])
    read = store.payloads_for_judging("acme", [released, unreleased])
    assert {trace: row["release"] for trace, row in read.items()} == {released: "2.3.1", unreleased: ""}
    sink = StoreScoreSink(store)
    for trace_id in (released, unreleased):
        stored = asyncio.run(StorePayloadSource(store).payload("acme", trace_id))
        assert isinstance(stored, StoredPayload)
        lease = Lease("acme", trace_id, "v1", "qa", "", "baseline", 1.0, 1, "", release=stored.release)
        result = MetricResult(metric="faithfulness", value=1.0, status=Status.OK)
        sink.write([score_row(lease, result, judge_version="v1", feature="qa")])
    assert not sink.dropped_keys
    rows = store.query("SELECT trace_id, release FROM scores ORDER BY trace_id")
    assert rows == [{"trace_id": released, "release": "2.3.1"}, {"trace_id": unreleased, "release": ""}]
