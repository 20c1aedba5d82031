"""The signals drift rules watch, each defined once in `SIGNALS`, and the `SignalSource` protocol that serves them.

A signal's entry says everything about it: what it means and in which unit, how it is read from the store (a kind
of read from `reads.py` with the columns it reads: `StoreSignalSource` builds its SQL from that), which way is
trouble and how standardising detectors should scale it, and the rule that watches it unless `default_rules =
false`. Adding a signal over the store's existing tables is one entry here (plus its tests); `rules.py`, the
evaluator and the source read everything from it.

A signal is read per scope — (tenant, feature, stage) — either as a *series* (one aggregate per window, for the mean
detectors) or as a *sample* (the per-request values in a time range, for the distribution detectors); a signal has
a sample when its kind of read has one. Trace-level signals (judged quality, the SLA share) have the stage ""
(the request as a whole, its root span). Windows are `[start_s, start_s + step_s)`, aligned to multiples of step_s;
a window without data is simply absent (no data is not a zero). Example trace ids are the worst few in the window
(slowest, failed, lowest-scoring).

Why the default rules are what they are:
- Means (latency, errors, cost, tokens, judged quality, SLA share) use CUSUM against the last day (ending an hour
  ago): it accumulates small persistent shifts that a fixed threshold misses; its defaults are documented at
  1 false alarm per 5,000 windows per scope on independent noise (measured 6 in 100,000). Skewed signals are judged
  on a log (latency, cost, tokens) or arcsine (error rate, SLA share) scale — see `SignalSpec.transform`.
- `min_count` keeps thin windows out: a p95 or an error rate from a handful of requests is noise.
- Judged scores are sparse (only kept traces are judged), so they are read in 15-minute windows and need an effective
  sample size of 5 per window.
- Retrieval scores are compared as distributions (PSI on the rank-1 score, KS on the similarity gap): a slow slide
  or a changed shape shows up there before the mean moves much.
- Embedding norms: a jump away from the baseline (normally |‖v‖ - 1| ≈ 0) after an embedding-library upgrade is
  critical — every similarity score is off from then on. CUSUM with a 0.01 std floor fires on the third window.
- Saturation: the share of requests within a 2-second SLA for whole requests; evidence carries input vs effective
  QPS. Set `sla_ms` to your SLA by redefining the rule `saturation_sla_share`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from ragmon.drift.detectors.base import Direction, FloatArray
from ragmon.drift.reads import (
    JudgedMean,
    NegativeFeedbackShare,
    RollupQuantile,
    RollupRatio,
    ShareWithinSla,
    SignalRead,
    SpanMean,
)

SignalKind = Literal["series", "sample"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalSpec:
    """One signal: what it is, how it is read, how detectors should treat it by default, and its default rule."""

    name: str
    description: str
    unit: str
    read: SignalRead
    bad_direction: Direction  # which way is trouble: the default direction of its detectors
    # The rule that watches it unless `default_rules = false`: a `rules.RuleConfig` without its signal, as plain
    # data (validated by `rules.default_rules`, so this module imports nothing of the rules).
    default_rule: Mapping[str, Any] = field(compare=False)
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
            default_rule={"name": "latency_p95_up", "detector": {"type": "cusum", "min_count": 20}},
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
            default_rule={
                "name": "error_rate_up",
                "severity": "critical",
                "detector": {"type": "cusum", "min_count": 20},
            },
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
            default_rule={"name": "cost_per_request_up", "detector": {"type": "cusum", "min_count": 10}},
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
            default_rule={
                "name": "tokens_per_request_shift",
                "severity": "info",
                "detector": {"type": "cusum", "min_count": 10},
            },
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
            default_rule={
                "name": "faithfulness_down",
                "window_minutes": 15,
                "warmup_windows": 8,
                "detector": {"type": "cusum", "min_count": 5, "min_baseline_windows": 24},
            },
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
            default_rule={
                "name": "relevance_down",
                "window_minutes": 15,
                "warmup_windows": 8,
                "detector": {"type": "cusum", "min_count": 5, "min_baseline_windows": 24},
            },
        ),
        # Users' own verdict: a proportion, so asin(√share) for the standardising detectors; 15-minute windows and
        # 10 verdicts before a window counts, since feedback is sparse (a few per cent of requests get any)
        SignalSpec(
            name="negative_feedback",
            description="share of negative end-user feedback (thumbs down, rating 1-2)",
            unit="ratio",
            read=NegativeFeedbackShare(),
            bad_direction="up",
            trace_level=True,
            min_std=0.05,
            min_std_rel=0.0,
            transform="asin_sqrt",
            default_rule={
                "name": "negative_feedback_up",
                "window_minutes": 15,
                "warmup_windows": 8,
                "detector": {"type": "cusum", "min_count": 10, "min_baseline_windows": 24},
            },
        ),
        SignalSpec(
            name="top1_score",
            description="rank-1 retrieval score",
            unit="score",
            read=SpanMean("top1_score"),
            bad_direction="down",
            min_std=0.005,
            min_std_rel=0.0,
            default_rule={"name": "top1_score_shift", "detector": {"type": "psi"}},
        ),
        SignalSpec(
            name="similarity_gap",
            description="rank-1 minus rank-2 score",
            unit="score",
            read=SpanMean("similarity_gap"),
            bad_direction="down",
            min_std=0.002,
            min_std_rel=0.0,
            default_rule={"name": "similarity_gap_shift", "severity": "info", "detector": {"type": "ks"}},
        ),
        SignalSpec(
            name="norm_deviation",
            description="|embedding norm - 1|",
            unit="ratio",
            read=SpanMean("norm_deviation"),
            bad_direction="up",
            min_std=0.01,
            min_std_rel=0.0,
            default_rule={
                "name": "embedding_norm_jump",
                "severity": "critical",
                "detector": {"type": "cusum", "min_baseline_windows": 10},
            },
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
            default_rule={
                "name": "saturation_sla_share",
                "sla_ms": 2000.0,
                "scope": {"stages": [""]},
                "detector": {"type": "cusum", "min_count": 20},
            },
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
