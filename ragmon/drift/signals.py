"""The signals drift rules watch, each defined once in `SIGNALS`, and the `SignalSource` protocol that serves them.

A signal's entry says what it means and in which unit, how it is read from the store (a kind of read from
`reads.py` with the columns it reads: `StoreSignalSource` builds its SQL from that), which way is trouble and how
standardising detectors should scale it; `rules.py`, the evaluator and the source read everything from it.

A signal is read per scope — (tenant, feature, stage) — either as a *series* (one aggregate per window, for the mean
detectors) or as a *sample* (the per-request values in a time range, for the distribution detectors); a signal has
a sample when its kind of read has one. Trace-level signals (judged quality, the SLA share) have the stage ""
(the request as a whole, its root span). Windows are `[start_s, start_s + step_s)`, aligned to multiples of step_s;
a window without data is simply absent (no data is not a zero). Example trace ids are the worst few in the window
(slowest, failed, lowest-scoring).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from ragmon.drift.detectors.base import Direction, FloatArray
from ragmon.drift.reads import JudgedMean, RollupQuantile, RollupRatio, ShareWithinSla, SignalRead, SpanMean

SignalKind = Literal["series", "sample"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalSpec:
    """One signal: what it is, how it is read, and how detectors should treat it by default."""

    name: str
    description: str
    unit: str
    read: SignalRead
    bad_direction: Direction  # which way is trouble: the default direction of its detectors
    trace_level: bool = False  # only the stage "" scope (whole requests)
    min_std: float = 0.0  # floor for the baseline std when standardising (in the units detectors see)
    min_std_rel: float = 0.05  # floor as a share of |baseline mean|
    # Standardising detectors (CUSUM, Page–Hinkley) see a transformed value, because they assume roughly symmetric
    # noise and per-minute aggregates are not (a static threshold always sees the raw value):
    # - "log": log(value + log_offset). p95s, costs and token counts are right-skewed and move multiplicatively;
    #   measured skew of a p95 over 30 lognormal requests 0.55 raw, 0.25 logged; false alarms 6 → 1 per 60,000.
    # - "asin_sqrt": asin(√value), the variance-stabilising transform for proportions (error rate, SLA share).
    #   A 1% error rate over 30 requests a minute is mostly 0 with rare 2s and 3s; false alarms measured
    #   2.0 → 0.8 per 10,000 windows.
    transform: Literal["log", "asin_sqrt"] | None = None
    log_offset: float = 1.0

    @property
    def kinds(self) -> frozenset[SignalKind]:
        """Which detectors it feeds: mean detectors always, distribution detectors when its read has a sample."""
        return frozenset({"series", "sample"}) if self.read.sample_column is not None else frozenset({"series"})

    @property
    def needs_sla_ms(self) -> bool:
        """Its rules must say the latency SLA it is measured against."""
        return isinstance(self.read, ShareWithinSla)


SIGNALS: Mapping[str, SignalSpec] = {
    spec.name: spec
    for spec in (
        # log(p95 + 25 ms), noise floor 0.05: jitter of a few milliseconds (0.13 → 0.22 ms, 0.9 → 3.3 ms: the
        # demo's in-process stages on a busy machine, from minute to minute) is not an incident and fired with
        # log(p95 + 1 ms) and a 0.01 floor; a 300 ms stall fires at once, a sustained doubling from 5 ms in a few
        # windows
        SignalSpec(
            name="latency_p95_ms",
            description="p95 span latency",
            unit="ms",
            read=RollupQuantile(0.95),
            bad_direction="up",
            min_std=0.05,
            min_std_rel=0.0,
            transform="log",
            log_offset=25.0,
        ),
        SignalSpec(
            name="error_rate",
            description="share of spans with status error",
            unit="ratio",
            read=RollupRatio(("errors",), per="spans", examples="failed"),
            bad_direction="up",
            min_std=0.05,
            min_std_rel=0.0,
            transform="asin_sqrt",
        ),
        SignalSpec(
            name="cost_per_request_usd",
            description="cost per request",
            unit="USD",
            # per request whose cost is known: a span without a price is not a free one
            read=RollupRatio(("cost_usd",), per="cost_known", examples=("cost_usd",)),
            bad_direction="up",
            min_std=0.01,
            min_std_rel=0.0,
            transform="log",
            log_offset=1e-6,
        ),
        SignalSpec(
            name="tokens_per_request",
            description="input + output tokens per request",
            unit="tokens",
            read=RollupRatio(
                ("input_tokens", "output_tokens"), per="spans", examples=("input_tokens", "output_tokens")
            ),
            bad_direction="both",
            min_std=0.01,
            min_std_rel=0.0,
            transform="log",
        ),
        SignalSpec(
            name="faithfulness",
            description="judged faithfulness (sampling-weighted)",
            unit="score",
            read=JudgedMean("faithfulness"),
            bad_direction="down",
            trace_level=True,
            min_std=0.02,
            min_std_rel=0.0,
        ),
        SignalSpec(
            name="relevance",
            description="judged relevance (sampling-weighted)",
            unit="score",
            read=JudgedMean("relevance"),
            bad_direction="down",
            trace_level=True,
            min_std=0.02,
            min_std_rel=0.0,
        ),
        SignalSpec(
            name="top1_score",
            description="rank-1 retrieval score",
            unit="score",
            read=SpanMean("top1_score"),
            bad_direction="down",
            min_std=0.005,
            min_std_rel=0.0,
        ),
        SignalSpec(
            name="similarity_gap",
            description="rank-1 minus rank-2 score",
            unit="score",
            read=SpanMean("similarity_gap"),
            bad_direction="down",
            min_std=0.002,
            min_std_rel=0.0,
        ),
        SignalSpec(
            name="norm_deviation",
            description="|embedding norm - 1|",
            unit="ratio",
            read=SpanMean("norm_deviation"),
            bad_direction="up",
            min_std=0.01,
            min_std_rel=0.0,
        ),
        SignalSpec(
            name="sla_share",
            description="share of requests within the latency SLA",
            unit="ratio",
            read=ShareWithinSla(),
            bad_direction="down",
            trace_level=True,
            min_std=0.05,
            min_std_rel=0.0,
            transform="asin_sqrt",
        ),
    )
}


@dataclass(frozen=True, slots=True, order=True)
class ScopeKey:
    tenant: str
    feature: str
    stage: str  # "" = the request as a whole

    def describe(self) -> str:
        return f"tenant={self.tenant} feature={self.feature or '-'} stage={self.stage or 'request'}"


@dataclass(frozen=True, slots=True)
class SeriesQuery:
    signal: str
    scope: ScopeKey
    start_s: float  # inclusive, aligned to step_s
    end_s: float  # exclusive
    step_s: float
    sla_ms: float | None = None  # the SLA share only (`SignalSpec.needs_sla_ms`)
    # Example trace ids wanted? The evaluator's baseline reads say no: a source over a store would otherwise scan a
    # day of raw spans every hour for ids nobody shows.
    examples: bool = True


@dataclass(frozen=True, slots=True)
class SampleQuery:
    signal: str
    scope: ScopeKey
    start_s: float
    end_s: float
    max_values: int = 20_000  # a uniform subsample beyond this; distribution tests need no more


@dataclass(frozen=True, slots=True)
class WindowPoint:
    start_s: float
    value: float  # NaN when undefined (no judged trace, no known cost)
    count: float  # samples behind the value (or the effective sample size)
    extra: Mapping[str, float] = field(default_factory=dict)
    trace_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Sample:
    values: FloatArray
    trace_ids: tuple[str, ...] = ()  # examples from the bad end of the distribution

    @staticmethod
    def empty() -> Sample:
        return Sample(np.empty(0, dtype=np.float64))


class SignalSource(Protocol):
    """Reads signals for the evaluator. Implementations may raise; the evaluator counts the error and moves on."""

    def scopes(self, signal: str, start_s: float, end_s: float) -> Sequence[ScopeKey]:
        """The scopes with data for `signal` in [start_s, end_s)."""
        ...

    def series(self, query: SeriesQuery) -> Sequence[WindowPoint]:
        """One point per window with data, in time order."""
        ...

    def sample(self, query: SampleQuery) -> Sample:
        """The per-request values in [start_s, end_s)."""
        ...
