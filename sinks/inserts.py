"""How rows reach the store: the insert policy every insert sends, and rows turned into the columns it sends.

Insert policy (the same on both backends, sent with every insert):

- one request per batch (rows go columnar, as Arrow), never row by row;
- `async_insert = 0`: the agent already batches, and async inserts would ignore the deduplication token;
- `insert_deduplicate = 1` with `insert_deduplication_token` = the caller's token (the agent's: its write-ahead-log
  position) or else a hash of the rows. A batch re-sent after a crash carries the same token and is dropped by
  the engine — in `spans` and, with `deduplicate_blocks_in_dependent_materialized_views = 1`, in the per-minute
  rollup, so report counts stay exact. Raw tables are ReplacingMergeTree as a backstop (see `schema.py`);
- `optimize_on_insert = 0`: by default a ReplacingMergeTree runs a merge pass over every inserted block, which
  cannot find anything here (the sorting key ends in (trace_id, span_id)) and cost several times the rest of
  the insert (docs/results.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ragmon.sinks.errors import StoreError

INSERT_SETTINGS: dict[str, int] = {
    "async_insert": 0,
    "insert_deduplicate": 1,
    "deduplicate_blocks_in_dependent_materialized_views": 1,
    "optimize_on_insert": 0,
    # The normalised OTLP rows feed two views (spans, span_content): run them side by side on both cores instead
    # of one after the other.
    "parallel_view_processing": 1,
    # Every INSERT plans the normalising views again (paid per insert whatever its size): merging their expression
    # steps into one is a good part of that and made the views no faster to run (docs/results.md).
    "query_plan_merge_expressions": 0,
}


# A part of a split OTLP batch carries at least this many request bytes: each INSERT plans the views once.
MIN_INSERT_PART_BYTES = 4 * 1024 * 1024


def split_envelopes(envelopes: Sequence[bytes], parts: int, min_part_bytes: int) -> list[Sequence[bytes]]:
    """`envelopes` cut into at most `parts` consecutive runs of about equal bytes, each of at least
    `min_part_bytes` (one run when the batch is too small to split)."""
    total = sum(len(e) for e in envelopes)
    count = max(1, min(parts, len(envelopes), total // min_part_bytes))
    if count == 1:
        return [envelopes]
    out: list[Sequence[bytes]] = []
    start, seen = 0, 0
    for i, envelope in enumerate(envelopes):
        seen += len(envelope)
        if len(out) < count - 1 and seen >= total * (len(out) + 1) / count:
            out.append(envelopes[start : i + 1])
            start = i + 1
    out.append(envelopes[start:])
    return [part for part in out if part]


def json_param(values: Any) -> str:
    """A JSON text parameter (why not ``Array`` parameters: `ragmon.sinks.sampler_sql.copy_payloads_sql`)."""
    return json.dumps(values, ensure_ascii=False)


def rows_token(kind: str, rows: Sequence[Mapping[str, Any]]) -> str:
    text = json.dumps(list(rows), sort_keys=True, default=str, ensure_ascii=False)
    return f"{kind}:{len(rows)}:{hashlib.blake2b(text.encode(), digest_size=16).hexdigest()}"


def _default(ch_type: str) -> Any:
    if ch_type.startswith("Nullable"):
        return None
    if ch_type.startswith("Array"):
        return []
    if ch_type.startswith("Map"):
        return {}
    if ch_type.startswith("DateTime"):
        return datetime.now(UTC)
    if "String" in ch_type:
        return ""
    return 0


def _time_value(value: Any, ch_type: str) -> Any:
    """Integers are unix nanoseconds everywhere (as in OTLP); Arrow wants the column's own unit."""
    if isinstance(value, int) and not isinstance(value, bool):
        if ch_type == "DateTime64(3)":
            return value // 1_000_000
        if ch_type == "DateTime":
            return value // 1_000_000_000
    return value


def rows_to_columns(rows: Sequence[Mapping[str, Any]], columns: tuple[tuple[str, str], ...]) -> dict[str, list[Any]]:
    """Row dicts → columns; a missing key takes the type's default, an unknown key is an error (typos)."""
    known = {name for name, _ in columns}
    for row in rows:
        unknown = set(row) - known
        if unknown:
            raise StoreError(f"unknown columns {sorted(unknown)}", retryable=False)
    out: dict[str, list[Any]] = {}
    for name, ch_type in columns:
        values = [row[name] if name in row else _default(ch_type) for row in rows]
        if ch_type.startswith("DateTime"):
            values = [_time_value(v, ch_type) for v in values]
        out[name] = values
    return out
