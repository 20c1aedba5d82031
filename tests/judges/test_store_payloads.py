"""`StorePayloadSource`: the worker asks per trace, the store is asked per batch."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from ragmon.pipeline.judge_store import StoredPayload, StorePayloadSource


class CountingStore:
    def __init__(self, rows: dict[tuple[str, str], dict[str, Any]], *, fail: bool = False) -> None:
        self.rows = rows
        self.fail = fail
        self.calls: list[tuple[str, list[str]]] = []

    def payloads_for_judging(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        self.calls.append((tenant, list(trace_ids)))
        if self.fail:
            raise ConnectionError("store is down")
        return {t: self.rows[(tenant, t)] for t in trace_ids if (tenant, t) in self.rows}


def row(n: int) -> dict[str, Any]:
    return {
        "question": f"q{n}",
        "answer": f"a{n}",
        "passage_texts": [f"p{n}", "x"],
        "feature": "faq",
        "sampling_reason": "baseline",
        "inclusion_probability": 0.1,
    }


async def test_concurrent_asks_share_one_query_per_tenant() -> None:
    store = CountingStore({("t1", f"id{n}"): row(n) for n in range(30)} | {("t2", "id0"): row(100)})
    source = StorePayloadSource(store)
    asks = [("t1", f"id{n}") for n in range(40)] + [("t2", "id0"), ("t2", "id1")]
    got = await asyncio.gather(*(source.payload(tenant, trace_id) for tenant, trace_id in asks))
    assert sorted((tenant, len(ids)) for tenant, ids in store.calls) == [("t1", 40), ("t2", 2)]
    assert got[5] == StoredPayload(
        question="q5",
        answer="a5",
        passages=["p5", "x"],
        feature="faq",
        sampling_reason="baseline",
        inclusion_probability=0.1,
    )
    assert got[30:40] == [None] * 10  # not stored
    assert got[40] is not None and got[40].question == "q100"
    assert got[41] is None


async def test_batches_are_capped_and_duplicates_answered_once() -> None:
    store = CountingStore({("t", f"id{n}"): row(n) for n in range(25)})
    source = StorePayloadSource(store, max_batch=10)
    asks = [f"id{n}" for n in range(25)] + ["id3", "id3"]
    got = await asyncio.gather(*(source.payload("t", trace_id) for trace_id in asks))
    assert [len(ids) for _, ids in store.calls] == [10, 10, 5]
    assert [p.question for p in got if p is not None] == [f"q{n}" for n in range(25)] + ["q3", "q3"]


async def test_a_failing_store_fails_every_ask_of_its_query_and_the_next_round_asks_again() -> None:
    store = CountingStore({("t", "a"): row(1)}, fail=True)
    source = StorePayloadSource(store)
    results = await asyncio.gather(*(source.payload("t", i) for i in ("a", "b")), return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)
    store.fail = False
    payload = await source.payload("t", "a")
    assert payload is not None and payload.question == "q1"
    assert len(store.calls) == 2


async def test_an_abandoned_ask_does_not_break_the_others() -> None:
    store = CountingStore({("t", "a"): row(1), ("t", "b"): row(2)})
    source = StorePayloadSource(store, window_s=0.05)
    abandoned = asyncio.create_task(source.payload("t", "a"))
    kept = asyncio.create_task(source.payload("t", "b"))
    await asyncio.sleep(0.01)
    abandoned.cancel()
    payload = await kept
    assert payload is not None and payload.question == "q2"
    with pytest.raises(asyncio.CancelledError):
        await abandoned
