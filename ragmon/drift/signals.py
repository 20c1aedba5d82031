"""The signals drift rules watch, and the `SignalSource` protocol that serves them from the store.

A signal is read per scope — (tenant, feature, stage) — either as a *series* (one aggregate per window, for the mean
detectors) or as a *sample* (the per-request values in a time range, for the distribution detectors). What each
signal means, so an implementation over SQL computes the same thing as `InMemorySignalSource`:

| signal | series value per window | count | sample values |
|---|---|---|---|
| latency_p95_ms | 0.95-quantile of span duration_ms (spans_1m `duration_q`) | spans | span duration_ms |
| error_rate | errors / spans | spans | — |
| cost_per_request_usd | sum(cost_usd) / cost_known | cost_known | — |
| tokens_per_request | (input_tokens + output_tokens) / spans | spans | — |
| faithfulness, relevance | Σ(score/p) / Σ(1/p) over judged traces, p = inclusion probability | Kish n: (Σw)²/Σw² | — |
| top1_score | mean rank-1 retrieval score | spans with one | the scores |
| similarity_gap | mean gap between rank-1 and rank-2 scores | spans with one | the gaps |
| norm_deviation | mean |‖v‖ - 1| of the span's vectors | spans with one | the deviations |
| sla_share | share of requests with duration_ms ≤ sla_ms | requests | — |

`sla_share` also reports `input_qps` (requests / window seconds: offered load) and `effective_qps` (requests within
the SLA / window seconds) in `WindowPoint.extra`: a share that falls while input QPS rises is saturation. Judged
metrics and `sla_share` are trace-level: their stage is "" (the request as a whole). Windows are
`[start_s, start_s + step_s)`, aligned to multiples of step_s; a window without data is simply absent (no data is not
a zero). Example trace ids are the worst few in the window (slowest, failed, lowest-scoring), when the source has them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from ragmon.drift.detectors.base import Direction, FloatArray

SignalKind = Literal["series", "sample"]


@dataclass(frozen=True, slots=True)
class SignalSpec:
    """What a signal is and how detectors should treat it by default."""

    name: str
    description: str
    unit: str
    kinds: frozenset[SignalKind]
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


_SERIES: frozenset[SignalKind] = frozenset({"series"})
_BOTH: frozenset[SignalKind] = frozenset({"series", "sample"})

SIGNALS: Mapping[str, SignalSpec] = {
    spec.name: spec
    for spec in (
        # log(p95 + 25 ms), noise floor 0.05: jitter of a few milliseconds (0.13 → 0.22 ms, 0.9 → 3.3 ms: the
        # demo's in-process stages on a busy machine, from minute to minute) is not an incident and fired with
        # log(p95 + 1 ms) and a 0.01 floor; a 300 ms stall fires at once, a sustained doubling from 5 ms in a few
        # windows
        SignalSpec(
            "latency_p95_ms",
            "p95 span latency",
            "ms",
            _BOTH,
            "up",
            min_std=0.05,
            min_std_rel=0.0,
            transform="log",
            log_offset=25.0,
        ),
        SignalSpec(
            "error_rate",
            "share of spans with status error",
            "ratio",
            _SERIES,
            "up",
            min_std=0.05,
            min_std_rel=0.0,
            transform="asin_sqrt",
        ),
        SignalSpec(
            "cost_per_request_usd",
            "cost per request",
            "USD",
            _SERIES,
            "up",
            min_std=0.01,
            min_std_rel=0.0,
            transform="log",
            log_offset=1e-6,
        ),
        SignalSpec(
            "tokens_per_request",
            "input + output tokens per request",
            "tokens",
            _SERIES,
            "both",
            min_std=0.01,
            min_std_rel=0.0,
            transform="log",
        ),
        SignalSpec(
            "faithfulness", "judged faithfulness (sampling-weighted)", "score", _SERIES, "down", True, 0.02, 0.0
        ),
        SignalSpec("relevance", "judged relevance (sampling-weighted)", "score", _SERIES, "down", True, 0.02, 0.0),
        SignalSpec("top1_score", "rank-1 retrieval score", "score", _BOTH, "down", min_std=0.005, min_std_rel=0.0),
        SignalSpec(
            "similarity_gap", "rank-1 minus rank-2 score", "score", _BOTH, "down", min_std=0.002, min_std_rel=0.0
        ),
        SignalSpec("norm_deviation", "|embedding norm - 1|", "ratio", _BOTH, "up", min_std=0.01, min_std_rel=0.0),
        SignalSpec(
            "sla_share",
            "share of requests within the latency SLA",
            "ratio",
            _SERIES,
            "down",
            True,
            0.05,
            0.0,
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
    sla_ms: float | None = None  # sla_share only
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
