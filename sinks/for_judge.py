"""The store as the judges see it: the payloads of the traces a worker leased, the score rows it writes, and the
kept traces no judge has scored yet (the agent's catch-up at start). A `ragmon judge` worker beside an agent that owns
the embedded store reads and writes the same two calls through the agent's API (`ragmon.judges.agent_client`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from ragmon.sinks.conversation_sql import earlier_turns_sql, sessioned_payloads_sql, target_params
from ragmon.sinks.inserts import json_param
from ragmon.sinks.sampler_sql import payloads_for_judging_sql, unjudged_payloads_sql
from ragmon.sinks.schema import SCORE_COLUMNS
from ragmon.sinks.store_base import StoreBase

from ragmon.conversation import EARLIER_TURNS

# How far back a judged turn's earlier turns are looked for: a conversation resumed after a day is a new one to the
# judge (and `span_content` holds a turn's text that long).
EARLIER_TURNS_WINDOW_S = 86400


class JudgeStore(Protocol):
    """What a judge worker depends on (`ragmon.pipeline.judge_store`): the store, or the agent's judge endpoints."""

    def payloads_for_judging(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]: ...

    def insert_scores(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str: ...


class JudgeQueueStore(JudgeStore, Protocol):
    """What the agent's judging depends on: the worker's calls and the queue's start-up catch-up."""

    def unjudged_payloads(self, since_s: float = 7 * 86400, limit: int = 100_000) -> list[dict[str, Any]]: ...


class JudgeMethods(StoreBase):
    """The judges' methods of `Store`."""

    def payloads_for_judging(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """trace_id → its payload's question, answer, passage_texts, feature, eval_run, release, sampling_reason
        and inclusion_probability, for those of `trace_ids` (of `tenant`) that have one: one query for many traces.
        With `earlier_turns`: the question and answer of the last `ragmon.conversation.EARLIER_TURNS` turns of its
        conversation before it, oldest first ([] without a session) — a second query for the whole batch."""
        if not trace_ids:
            return {}
        params = {"tenant": tenant, "trace_ids": list(trace_ids)}
        rows = self._select(payloads_for_judging_sql(self._ddl), params, readonly=True)
        found = {row["trace_id"]: {**row, "earlier_turns": []} for row in rows}
        pairs = {"tenants": json_param([tenant] * len(found)), "trace_ids": json_param(list(found))}
        targets = (
            self._select(sessioned_payloads_sql(self._ddl, follow_ups_only=False), pairs, readonly=True)
            if found
            else []
        )
        if targets:  # only traces with a session have earlier turns
            turns = {"turns": EARLIER_TURNS, "window_s": EARLIER_TURNS_WINDOW_S}
            earlier = self._select(earlier_turns_sql(self._ddl), {**target_params(targets), **turns}, readonly=True)
            for turn in earlier:  # oldest first
                if turn["target"] in found:
                    found[turn["target"]]["earlier_turns"].append(
                        {"question": turn["question"], "answer": turn["answer"]}
                    )
        return found

    def insert_scores(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str:
        """Judge results, one dict per (trace, metric, judge version) with keys from `schema.SCORE_COLUMNS`."""
        return self._insert_rows("scores", SCORE_COLUMNS, rows, dedup_token)

    def unjudged_payloads(self, since_s: float = 7 * 86400, limit: int = 100_000) -> list[dict[str, Any]]:
        """Kept traces of the last `since_s` seconds with no online score yet (tenant, trace_id, feature,
        sampling_reason, inclusion_probability), oldest first, at most `limit`: the judge queue's start-up
        catch-up."""
        rows = self._select(
            unjudged_payloads_sql(self._ddl),
            {"since_s": int(since_s), "limit": int(limit)},
            settings={"distributed_product_mode": "local"},
            readonly=True,
        )
        return rows
