"""The store as the sampling stage sees it: per-trace fragments of the spans just stored, the roll-up of ranges
whose traces are decided, kept traces' payloads copied in the engine, the decision counts, and recent latency that
tells the sampler what "slow" is (`ragmon.pipeline.sampling_loop`, `decisions`, `sampling_tally`, `agent`). These
reads use the read-only connection and no caller's budget: the agent's own, not a caller's."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import pyarrow as pa
from ragmon.sinks.arrow import to_rows
from ragmon.sinks.backend import Settings
from ragmon.sinks.conversation_sql import conversation_turns_to_copy_sql
from ragmon.sinks.documents_rollup_sql import documents_rollup_sql
from ragmon.sinks.inserts import INSERT_SETTINGS, json_param
from ragmon.sinks.rollup_sql import rollup_sql
from ragmon.sinks.sampler_sql import (
    copy_payloads_sql,
    kept_count_sql,
    recent_p95_sql,
    recent_request_durations_sql,
    trace_fragments_sql,
)
from ragmon.sinks.schema import SAMPLING_COLUMNS, SAMPLING_TABLE
from ragmon.sinks.store_base import StoreBase

from ragmon.conversation import EARLIER_TURNS

# The sampling reason of a turn copied because a later turn of its conversation was kept (`copy_conversation_turns`).
CONVERSATION_REASON = "conversation"
# How far back a kept follow-up's earlier turns are looked for: as long as `span_content` holds their text.
CONVERSATION_WINDOW_S = 86400


class SamplerStore(Protocol):
    """What the agent's sampling stage, its decision sink and tally, and the sampler's latency lookups depend on."""

    def trace_fragment_table(self, seq_from: int, seq_to: int) -> pa.Table: ...

    def roll_up(
        self, seq_from: int, seq_to: int, dedup_token: str | None = None, *, context_to: int | None = None
    ) -> None: ...

    def copy_payloads(self, kept: Sequence[Mapping[str, Any]]) -> None: ...

    def copy_conversation_turns(self, kept: Sequence[Mapping[str, Any]]) -> int: ...

    def insert_sampling_counts(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str: ...

    def recent_p95(self, window_s: int = 900) -> dict[tuple[str, str], float]: ...

    def recent_request_durations(self, window_s: int, per_feature: int) -> dict[tuple[str, str], list[float]]: ...


class SamplerMethods(StoreBase):
    """The sampling stage's methods of `Store`."""

    def trace_fragment_table(self, seq_from: int, seq_to: int) -> pa.Table:
        """One summary per (tenant, trace_id) among the spans with ingest_seq in [seq_from, seq_to], as a table (the
        sampler's hot path reads it as arrays). `stage_max_ms` is a Map(stage, ms)."""
        params = {"seq_from": int(seq_from), "seq_to": int(seq_to)}
        # the read connection: on the embedded engine the sampler's query then runs beside the next insert
        return self.backend.select(trace_fragments_sql(self._ddl), params, readonly=True)

    def trace_fragments(self, seq_from: int, seq_to: int) -> list[dict[str, Any]]:
        """The same summaries as rows (for tools and tests)."""
        rows = to_rows(self.trace_fragment_table(seq_from, seq_to))
        for row in rows:
            row["root_seen"] = bool(row["root_seen"])
            row["stage_max_ms"] = dict(row["stage_max_ms"] or ())
        return rows

    def roll_up(
        self, seq_from: int, seq_to: int, dedup_token: str | None = None, *, context_to: int | None = None
    ) -> None:
        """Add the spans with ingest_seq in [seq_from, seq_to] to the minute rollup (and through it the hourly
        one), one call per nested run of a stage (`rollup_sql.py`), and their retrieved documents to the document
        rollups (`documents_rollup_sql.py`); their ancestors looked up among the spans of
        [seq_from, context_to] (default: everything stored since). Roll a range up once, after its traces are
        whole: the agent does it when the sampler has decided them; a re-run with the same token is dropped."""
        token = dedup_token or f"rollup:{int(seq_from)}-{int(seq_to)}"
        # a trace is whole on one shard: the subquery that finds the range's traces runs shard by shard
        settings: Settings = {
            **INSERT_SETTINGS,
            "insert_deduplication_token": token,
            "distributed_product_mode": "local",
        }
        params = {"seq_from": int(seq_from), "seq_to": int(seq_to), "context_to": context_to or 2**64 - 1}
        self.backend.execute(rollup_sql(self._ddl), params, settings)
        # The range's documents (`documents_rollup_sql.py`), under a token of their own derived from the range's: a
        # range re-run after a crash between the two INSERTs lands the missing one and drops the repeat.
        documents: Settings = {**settings, "insert_deduplication_token": f"{token}:documents"}
        self.backend.execute(documents_rollup_sql(self._ddl), {k: params[k] for k in ("seq_from", "seq_to")}, documents)

    def copy_payloads(self, kept: Sequence[Mapping[str, Any]]) -> None:
        """Copy the kept traces' captured text from `span_content` into `payloads` (in the engine), with their
        sampling reasons and inclusion probability. Idempotent.

        A row's `first_ingest_seq` (the sampler's: its spans were all stored at or after it) bounds what the copy
        reads to recent parts; without it the copy reads every stored span's trace id, which grows with the store."""
        unique: dict[tuple[str, str], Mapping[str, Any]] = {}
        for row in kept:
            unique[(str(row["tenant"]), str(row["trace_id"]))] = row
        if not unique:
            return
        lists = {
            "tenants": [tenant for tenant, _ in unique],
            "trace_ids": [trace_id for _, trace_id in unique],
            "reasons": [[str(r) for r in row.get("reasons", ())] for row in unique.values()],
            "probabilities": [float(row.get("probability", 1.0)) for row in unique.values()],
        }
        params: dict[str, Any] = {name: json_param(values) for name, values in lists.items()}
        params["min_seq"] = min(int(row.get("first_ingest_seq") or 0) for row in unique.values())
        # the params say all there is to copy: hashing them is cheaper than hashing the rows one by one
        digest = hashlib.blake2b(json.dumps(params, ensure_ascii=False).encode(), digest_size=16).hexdigest()
        token = f"payloads:{len(unique)}:{digest}"
        self.backend.execute(
            copy_payloads_sql(self._ddl), params, settings={**INSERT_SETTINGS, "insert_deduplication_token": token}
        )

    def copy_conversation_turns(self, kept: Sequence[Mapping[str, Any]]) -> int:
        """Copy the earlier turns (the last `ragmon.conversation.EARLIER_TURNS`) of those just-copied `kept` traces
        that are follow-ups, when they have no payload of their own, from `span_content` into `payloads` with the
        sampling reason `conversation`: the turns a kept follow-up depends on are kept beside it. Their inclusion
        probability is recorded as 1 (copied for sure once the follow-up is kept); they are not a sample and nothing
        judges or counts them (`ragmon.pipeline.decisions`). Returns how many turns were copied."""
        if not kept:
            return 0
        params: dict[str, Any] = {
            "tenants": json_param([str(row["tenant"]) for row in kept]),
            "trace_ids": json_param([str(row["trace_id"]) for row in kept]),
            "turns": EARLIER_TURNS,
            "window_s": CONVERSATION_WINDOW_S,
        }
        turns = self._select(conversation_turns_to_copy_sql(self._ddl), params, readonly=True)
        self.copy_payloads(
            [
                {
                    "tenant": t["tenant"],
                    "trace_id": t["trace_id"],
                    "reasons": [CONVERSATION_REASON],
                    "probability": 1.0,
                    "first_ingest_seq": int(t["first_ingest_seq"]),  # bounds the copy's read to recent parts
                }
                for t in turns
            ]
        )
        return len(turns)

    def kept_payload_count(self, traces: Sequence[tuple[str, str]]) -> int:
        """How many of `traces` ((tenant, trace_id) pairs) have a payload row (for tools and tests: the agent's
        copies do not ask, the count reads the payloads table)."""
        if not traces:
            return 0
        params = {"tenants": json_param([t for t, _ in traces]), "trace_ids": json_param([i for _, i in traces])}
        return int(self._select(kept_count_sql(self._ddl), params, readonly=True)[0]["n"])

    def insert_sampling_counts(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str:
        """Sampling decisions per (minute, tenant, feature, outcome, reason): keys of `schema.SAMPLING_COLUMNS`."""
        return self._insert_rows(SAMPLING_TABLE, SAMPLING_COLUMNS, rows, dedup_token)

    def recent_p95(self, window_s: int = 900) -> dict[tuple[str, str], float]:
        """(feature, stage) → p95 duration in ms over the last `window_s` seconds, from the per-minute rollup."""
        rows = self._select(recent_p95_sql(self._ddl), {"window_s": int(window_s)}, readonly=True)
        return {(r["feature"], r["stage"]): float(r["p95_ms"]) for r in rows if r["p95_ms"] == r["p95_ms"]}

    def recent_request_durations(self, window_s: int, per_feature: int) -> dict[tuple[str, str], list[float]]:
        """(tenant, feature) → the durations (ms) of its latest `per_feature` root spans of the last `window_s`
        seconds, oldest first (`sampler_sql.recent_request_durations_sql`)."""
        params = {"window_s": int(window_s), "per_feature": int(per_feature)}
        rows = self._select(recent_request_durations_sql(self._ddl), params, readonly=True)
        return {(r["tenant"], r["feature"]): [float(d) for d in r["durations_ms"]] for r in rows}
