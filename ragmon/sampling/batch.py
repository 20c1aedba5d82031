"""The sampler's columnar path: one stored batch's trace fragments as arrays, and rows of it as a `TraceView`.

Most traces arrive whole in one stored batch, root included. Such a trace needs no per-trace Python object while it
waits out its grace period: it stays a row of its batch's `FragmentColumns`, and when the grace has passed the
composite policy is evaluated over all waiting rows of the batch at once (`CompositePolicy.decide_rows` over
`BatchRows`): each policy's one rule (`Rule.fires`) runs on numpy arrays. A trace that does not fit that pattern (no
root yet, already pending, already decided, or a later fragment arrives while it waits) becomes a `TraceFragment` /
`TraceSummary` and takes the per-trace path, where the same rules run on one trace's floats.

Per trace this costs a fraction of the per-trace path's CPU (`python benchmarks/sampler.py`; docs/results.md); the
sampling thread had been a large share of the agent's CPU under `benchmarks/ingest.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ragmon.sampling.trace import TraceFragment
from ragmon.sampling.view import NOT_RANDOM, Fired, Floats, Ints, TextField, random_bits

Rows = npt.NDArray[np.intp]
P95Lookup = Callable[[str, str], "float | None"]

_KEY_SEPARATOR = "\x1f"  # between tenant and feature in a joined key: a control character neither contains


def _floats(column: pa.ChunkedArray | pa.Array) -> Floats:
    """A numeric column as float64, NULL as NaN (every comparison with NaN is false, like the per-trace tests)."""
    return np.asarray(pc.fill_null(pc.cast(column, pa.float64()), math.nan), dtype=np.float64)


def _ints(column: pa.ChunkedArray | pa.Array) -> npt.NDArray[np.int64]:
    return np.asarray(pc.fill_null(pc.cast(column, pa.int64()), 0), dtype=np.int64)


class FragmentColumns:
    """One stored batch's trace fragments (`ragmon.sinks.sampler_sql.trace_fragments_sql`), as arrays."""

    def __init__(self, table: pa.Table, first_ingest_seq: int) -> None:
        self.size = table.num_rows
        self.first_ingest_seq = first_ingest_seq
        self._tenant = table.column("tenant")
        self.tenant: list[str] = self._tenant.to_pylist()
        self.trace_id: list[str] = table.column("trace_id").to_pylist()
        self._feature = pc.fill_null(table.column("feature"), "")
        self._user = pc.fill_null(table.column("user"), "")
        # '' = production; a table without the column (fragments written by hand) is all production
        names = table.column_names
        self.eval_run: list[str] = (
            pc.fill_null(table.column("eval_run"), "").to_pylist() if "eval_run" in names else [""] * self.size
        )
        self.root_span_id: list[str] = (
            pc.fill_null(table.column("root_span_id"), "").to_pylist() if "root_span_id" in names else [""] * self.size
        )
        self.span_count = _ints(table.column("span_count"))
        self.error_count = _ints(table.column("error_count"))
        self.root_seen = _ints(table.column("root_seen")) != 0
        self.root_duration_ms = _floats(table.column("root_duration_ms"))
        self.min_top1_score = _floats(table.column("min_top1_score"))
        self.min_similarity_gap = _floats(table.column("min_similarity_gap"))
        self.max_norm_deviation = _floats(table.column("max_norm_deviation"))
        self.content_bytes = _ints(table.column("content_bytes"))
        self.stage_max_ms = _stage_columns(table.column("stage_max_ms"), self.size)
        self._features: tuple[list[str], npt.NDArray[np.int64]] | None = None
        self._tenant_features: tuple[list[tuple[str, str]], npt.NDArray[np.int64]] | None = None
        self._text: dict[str, list[str]] = {}

    def text(self, field: str) -> list[str]:
        """feature, user or tenant of every row (converted on first use: most policies never read them)."""
        if field == "tenant":
            return self.tenant
        if field not in self._text:
            self._text[field] = (self._feature if field == "feature" else self._user).to_pylist()
        return self._text[field]

    def features(self) -> tuple[list[str], npt.NDArray[np.int64]]:
        """The distinct features and each row's index into them."""
        if self._features is None:
            encoded = pc.dictionary_encode(self._feature).combine_chunks()
            self._features = encoded.dictionary.to_pylist(), np.asarray(encoded.indices, dtype=np.int64)
        return self._features

    def tenant_features(self) -> tuple[list[tuple[str, str]], npt.NDArray[np.int64]]:
        """The distinct (tenant, feature) pairs and each row's index into them."""
        if self._tenant_features is None:
            joined = pc.binary_join_element_wise(self._tenant, self._feature, _KEY_SEPARATOR)
            encoded = pc.dictionary_encode(joined).combine_chunks()
            pairs = [tuple(key.split(_KEY_SEPARATOR, 1)) for key in encoded.dictionary.to_pylist()]
            self._tenant_features = (
                [(tenant, feature) for tenant, feature in pairs],
                np.asarray(encoded.indices, dtype=np.int64),
            )
        return self._tenant_features

    def fragment(self, row: int) -> TraceFragment:
        """Row `row` as a per-trace fragment (for traces that leave the columnar path)."""
        stages = {stage: float(v[row]) for stage, v in self.stage_max_ms.items() if not math.isnan(v[row])}
        return TraceFragment(
            self.tenant[row],
            self.trace_id[row],
            self.text("feature")[row],
            self.text("user")[row],
            int(self.span_count[row]),
            int(self.error_count[row]),
            bool(self.root_seen[row]),
            _optional(self.root_duration_ms[row]),
            stages,
            _optional(self.min_top1_score[row]),
            _optional(self.min_similarity_gap[row]),
            _optional(self.max_norm_deviation[row]),
            int(self.content_bytes[row]),
            self.first_ingest_seq,
            self.eval_run[row],
            self.root_span_id[row],
        )


def _optional(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _stage_columns(column: pa.ChunkedArray, size: int) -> dict[str, Floats]:
    """Map(stage → max ms) per row as one float array per stage present (NaN where the row lacks it)."""
    maps = column.combine_chunks()
    if size == 0 or len(maps.keys) == 0:
        return {}
    offsets = np.asarray(maps.offsets, dtype=np.int64)
    owner = np.repeat(np.arange(size), np.diff(offsets))  # the row of every entry
    keys = pc.dictionary_encode(maps.keys.slice(offsets[0], offsets[-1] - offsets[0]))
    items = _floats(maps.items.slice(offsets[0], offsets[-1] - offsets[0]))
    codes = np.asarray(keys.indices, dtype=np.int64)
    out = {}
    for code, stage in enumerate(keys.dictionary.to_pylist()):
        values = np.full(size, math.nan)
        picked = codes == code
        np.fmax.at(values, owner[picked], items[picked])  # a map has each key once; fmax also ignores NaN
        out[stage] = values
    return out


class BatchRows:
    """Rows `rows` of one stored batch as a `TraceView`: each field an array with one entry per row, in `rows`
    order. `stage_p95` gives the recent p95 of a (feature, stage), `request_p95[i]` that of row `rows[i]`'s
    feature's requests (NaN: unknown); None where no policy reads them."""

    def __init__(
        self,
        columns: FragmentColumns,
        rows: Rows,
        stage_p95: P95Lookup | None = None,
        request_p95: Floats | None = None,
    ) -> None:
        self.columns = columns
        self.rows = rows
        self.size = len(rows)
        self._stage_p95 = stage_p95
        self._request_p95 = request_p95

    def trace_id(self, i: int) -> str:
        return self.columns.trace_id[int(self.rows[i])]

    @property
    def bytes_held(self) -> Ints:
        """The captured bytes each row's trace holds in the store."""
        return self.columns.content_bytes[self.rows]

    @property
    def error_count(self) -> Ints:
        return self.columns.error_count[self.rows]

    @property
    def root_duration_ms(self) -> Floats:
        return self.columns.root_duration_ms[self.rows]

    @property
    def request_p95_ms(self) -> Floats:
        return self._request_p95 if self._request_p95 is not None else np.full(self.size, math.nan)

    @property
    def min_top1_score(self) -> Floats:
        return self.columns.min_top1_score[self.rows]

    @property
    def min_similarity_gap(self) -> Floats:
        return self.columns.min_similarity_gap[self.rows]

    @property
    def max_norm_deviation(self) -> Floats:
        return self.columns.max_norm_deviation[self.rows]

    @property
    def stages(self) -> Iterable[str]:
        return self.columns.stage_max_ms.keys()

    def stage_max_ms(self, stage: str, absent: float = math.nan) -> Floats:
        maxima = self.columns.stage_max_ms.get(stage)
        if maxima is None:
            return np.full(self.size, absent)
        return maxima[self.rows] if math.isnan(absent) else np.nan_to_num(maxima[self.rows], nan=absent)

    def stage_p95_ms(self, stage: str) -> Floats:
        if self._stage_p95 is None:
            return np.full(self.size, math.nan)
        lookup = self._stage_p95
        features, index = self.columns.features()
        p95 = np.array([_nan_if_none(lookup(feature, stage)) for feature in features], dtype=np.float64)
        return p95[index[self.rows]]

    def text_is_one_of(self, field: TextField, values: frozenset[str]) -> Fired:
        texts = self.columns.text(field)
        return np.fromiter((texts[r] in values for r in self.rows), dtype=bool, count=self.size)

    @property
    def random_bits(self) -> Ints:
        return _random_bits(self.columns.trace_id, self.rows)


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value


def _random_bits(trace_ids: Sequence[str], rows: Rows) -> Ints:
    """`view.random_bits` of many trace ids: the low 56 bits (14 hex digits), NOT_RANDOM where not hex."""
    picked = [trace_ids[r] for r in rows]
    if any(len(t) != 32 for t in picked):  # not the stored form: the per-trace parse, which also rejects non-hex
        return np.fromiter((random_bits(t) for t in picked), dtype=np.int64, count=len(picked))
    digits = np.frombuffer("".join(picked).encode("ascii", "replace"), dtype=np.uint8).reshape(-1, 32)[:, 18:]
    lower = digits | 0x20  # 'A'-'F' → 'a'-'f'; digits unchanged
    value = np.where(digits <= ord("9"), digits.astype(np.int64) - ord("0"), lower.astype(np.int64) - ord("a") + 10)
    valid = ((digits >= ord("0")) & (digits <= ord("9"))) | ((lower >= ord("a")) & (lower <= ord("f")))
    randomness = np.zeros(len(picked), dtype=np.int64)
    for k in range(14):
        randomness = (randomness << 4) | value[:, k]
    bits: Ints = np.where(valid.all(axis=1), randomness, NOT_RANDOM)
    return bits
