"""Span rows written straight into the store's `spans` table, for tests and benchmarks with known numbers.

The agent never writes `spans` row by row: its spans arrive as OTLP and the engine normalises them
(`Store.insert_otlp`). Tests of the schema, the rollups and the reports want rows they chose themselves, so a
`SpanBatch` holds exactly the `spans` columns (one Python list per column, in `SPAN_COLUMNS` order) and
`insert_spans` writes it as one Arrow block with the store's insert settings — deduplicated by a token like every
insert of the store, so a re-sent batch is dropped as a re-sent OTLP request is.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from typing import Any

from ragmon.sinks import Store
from ragmon.sinks.arrow import to_table
from ragmon.sinks.inserts import INSERT_SETTINGS
from ragmon.sinks.schema import Ddl

from ragmon.model import SPAN_COLUMNS


@dataclass(slots=True)
class SpanBatch:
    """Columns of `spans` rows; every list has the same length."""

    tenant: list[str] = field(default_factory=list)
    trace_id: list[str] = field(default_factory=list)
    span_id: list[str] = field(default_factory=list)
    parent_span_id: list[str] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    stage: list[str] = field(default_factory=list)
    feature: list[str] = field(default_factory=list)
    eval_run: list[str] = field(default_factory=list)
    user: list[str] = field(default_factory=list)
    session: list[str] = field(default_factory=list)
    service: list[str] = field(default_factory=list)
    release: list[str] = field(default_factory=list)  # optional: '' for every row when left empty
    environment: list[str] = field(default_factory=list)  # optional, likewise
    start_time: list[int] = field(default_factory=list)  # unix nanoseconds
    duration_ms: list[float] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    error_type: list[str] = field(default_factory=list)
    model: list[str] = field(default_factory=list)
    provider: list[str] = field(default_factory=list)
    input_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    cached_input_tokens: list[int] = field(default_factory=list)
    cost_usd: list[float | None] = field(default_factory=list)
    top1_score: list[float | None] = field(default_factory=list)
    similarity_gap: list[float | None] = field(default_factory=list)
    norm_deviation: list[float | None] = field(default_factory=list)
    ttft_ms: list[float | None] = field(default_factory=list)
    retrieved_ids: list[list[str]] = field(default_factory=list)
    retrieved_scores: list[list[float]] = field(default_factory=list)
    retrieved_sources: list[list[str]] = field(default_factory=list)  # optional: '' per retrieved id when left empty
    attributes: list[dict[str, str]] = field(default_factory=list)
    ingest_seq: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.span_id)

    def columns(self) -> dict[str, list[Any]]:
        self._default_optional()
        return {name: getattr(self, name) for name, _ in SPAN_COLUMNS}

    def _default_optional(self) -> None:
        """The columns builders may leave empty (added with v10) get their defaults: no release, no sources."""
        n = len(self.span_id)
        for name in ("release", "environment"):
            if not getattr(self, name):
                getattr(self, name).extend([""] * n)
        if not self.retrieved_sources:
            self.retrieved_sources.extend([""] * len(ids) for ids in self.retrieved_ids)

    def take(self, indices: list[int]) -> SpanBatch:
        """A new batch with the rows at `indices`, in that order."""
        self._default_optional()
        out = SpanBatch()
        for name, _ in SPAN_COLUMNS:
            column = getattr(self, name)
            getattr(out, name).extend(column[i] for i in indices)
        return out


# A column added to the schema must be added here too, or every insert of these rows would fail.
assert tuple(f.name for f in fields(SpanBatch)) == tuple(name for name, _ in SPAN_COLUMNS), "SpanBatch is not spans"


def batch_token(batch: SpanBatch) -> str:
    """A deterministic deduplication token: the same spans in the same order give the same token."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update("\n".join(batch.tenant).encode())
    digest.update(b"\0")
    digest.update("\n".join(batch.trace_id).encode())
    digest.update(b"\0")
    digest.update("\n".join(batch.span_id).encode())
    return f"spans:{len(batch)}:{digest.hexdigest()}"


def insert_spans(store: Store, batch: SpanBatch, dedup_token: str | None = None) -> str:
    """Write every row of `batch` into `store`'s `spans` in one insert; returns the deduplication token used
    (`dedup_token`, else `batch_token(batch)`; '' for an empty batch, which writes nothing)."""
    if not len(batch):
        return ""
    token = dedup_token or batch_token(batch)
    table = to_table(batch.columns(), SPAN_COLUMNS)
    settings = {**INSERT_SETTINGS, "insert_deduplication_token": token}
    store.backend.insert(Ddl(store.topology).table("spans"), table, settings)
    return token
