"""What a sampling rule reads about traces: one trace at a time, or many rows of a stored batch at once.

A built-in policy states its rule once, as a function of a `TraceView` (`policies.Rule.fires`). The per-trace path
hands it a `TraceRow` (one trace: plain floats and bools), the columnar path a `batch.BatchRows` (numpy arrays, one
entry per row), and the same comparisons run on either: `>`, `<`, `!=`, `|` and `&` mean the same on a float as
on each entry of an array. What is unknown — no root yet, no p95, no retrieval score — reads as NaN, which fails
every comparison, as the rules want (an unknown p95 says nothing is slow).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from ragmon.sampling.trace import TraceSummary

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

Number = float | Floats  # one trace's value, or one per row
Whole = int | Ints
Fired = bool | Mask  # whether a rule fires: for one trace, or for each row

TextField = Literal["feature", "user", "tenant"]

RANDOM_BITS = 56
NOT_RANDOM = 1 << RANDOM_BITS  # the random bits of a trace id that has none: below no rate's limit


class TraceView(Protocol):
    """One trace or many, as a sampling rule reads it."""

    @property
    def error_count(self) -> Whole: ...

    @property
    def root_duration_ms(self) -> Number:
        """The whole request (NaN: the root has not arrived)."""

    @property
    def request_p95_ms(self) -> Number:
        """The recent p95 of the feature's requests, measured before this one (NaN: not known yet)."""

    @property
    def min_top1_score(self) -> Number: ...

    @property
    def min_similarity_gap(self) -> Number: ...

    @property
    def max_norm_deviation(self) -> Number: ...

    @property
    def stages(self) -> Iterable[str]:
        """The stages with a span (a row of a batch may lack some of them: NaN there)."""

    def stage_max_ms(self, stage: str, absent: float = math.nan) -> Number:
        """The longest span of `stage`, `absent` where the trace has none."""

    def stage_p95_ms(self, stage: str) -> Number:
        """The recent p95 of the feature's `stage` spans (NaN: not known)."""

    def text_is_one_of(self, field: TextField, values: frozenset[str]) -> Fired: ...

    @property
    def random_bits(self) -> Whole:
        """The rightmost 56 bits of the trace id (`NOT_RANDOM` where they are not hex digits)."""


def random_bits(trace_id: str) -> int:
    """The rightmost 56 bits (14 hex digits) of one trace id, which W3C trace-context level 2 ("random" flag) and
    OpenTelemetry's consistent-probability sampling treat as uniformly random."""
    try:
        return int(trace_id[-14:], 16)
    except ValueError:
        return NOT_RANDOM


class TraceRow:
    """One trace (a `TraceSummary` as the sampler holds it when it decides) as a `TraceView`. Its numbers are read
    once, as plain attributes: rules read them several times per trace."""

    __slots__ = (
        "error_count",
        "max_norm_deviation",
        "min_similarity_gap",
        "min_top1_score",
        "request_p95_ms",
        "root_duration_ms",
        "trace",
    )

    def __init__(self, trace: TraceSummary) -> None:
        self.trace = trace
        self.error_count = trace.error_count
        nan = math.nan  # unknown (None) reads as NaN; spelled out, not a helper call: this runs once per trace
        self.root_duration_ms = nan if (value := trace.root_duration_ms) is None else value
        self.request_p95_ms = nan if (value := trace.request_p95_ms) is None else value
        self.min_top1_score = nan if (value := trace.min_top1_score) is None else value
        self.min_similarity_gap = nan if (value := trace.min_similarity_gap) is None else value
        self.max_norm_deviation = nan if (value := trace.max_norm_deviation) is None else value

    @property
    def stages(self) -> Iterable[str]:
        return self.trace.stage_max_ms.keys()

    def stage_max_ms(self, stage: str, absent: float = math.nan) -> float:
        return self.trace.stage_max_ms.get(stage, absent)

    def stage_p95_ms(self, stage: str) -> float:
        return self.trace.stage_p95_ms.get(stage, math.nan)

    def text_is_one_of(self, field: TextField, values: frozenset[str]) -> bool:
        return getattr(self.trace, field) in values

    @property
    def random_bits(self) -> int:  # parsed only when a rule asks
        return random_bits(self.trace.trace_id)
