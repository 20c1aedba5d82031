"""How a drift signal is read from the store: the kinds of read `StoreSignalSource` knows, as plain data.

Each signal in `signals.SIGNALS` names one of these with the columns it reads, so a new signal over the same tables
is one entry there; a new kind of read is a class here plus its case in `store_source.py` and its SQL in
`ragmon.sinks.drift_sql`. Column names are checked against the store's tables when the SQL is built: a misspelt
column is a KeyError, never text in a query.

What every kind shares: a series has one point per window with data, windows `[start, start + step)` aligned to
the step; a window without data is absent (no data is not a zero); a value that is undefined (no known cost, no
judged trace) is NaN. Each point carries the worst few traces of its window as examples (slowest, failed, lowest
score ...), and a sample the per-request values behind the series, when the kind has them.

Plain data on purpose: the evaluator imports the signals, and must not load the store (tests/drift/test_drift_api.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# The column the slowest spans are ranked by, for the reads whose examples are the slowest requests.
_DURATION = "duration_ms"


@dataclass(frozen=True, slots=True)
class RollupQuantile:
    """A quantile (`level`, one the rollup's duration sketches keep) of span durations per window, from the
    per-minute rollup, whose merged sketches cover every span; count: the spans. Sample: the spans' durations.
    Examples: the slowest spans. Windows are whole minutes."""

    level: float

    @property
    def sample_column(self) -> str | None:
        return _DURATION

    def describe(self) -> str:
        return f"the {self.level:g} quantile of span `duration_ms` per window, from the per-minute rollup (every span)"


@dataclass(frozen=True, slots=True)
class RollupRatio:
    """Σ `numerator` / Σ `per` per window over the per-minute rollup's summed columns (several numerator columns
    add up); count: Σ `per`, and a window where it is 0 has the value NaN (an unknown cost is unknown, not free).
    Examples: the spans with the highest sum of the `spans` columns in `examples`, or only failed spans
    ("failed"). No sample. Windows are whole minutes."""

    numerator: tuple[str, ...]
    per: str
    examples: tuple[str, ...] | Literal["failed"]

    @property
    def sample_column(self) -> str | None:
        return None

    def describe(self) -> str:
        numerator = " + ".join(f"`{name}`" for name in self.numerator)
        if len(self.numerator) > 1:
            numerator = f"({numerator})"
        return f"Σ {numerator} / Σ `{self.per}` per window, from the per-minute rollup (every span)"


@dataclass(frozen=True, slots=True)
class SpanMean:
    """The mean of one `spans` column per window over the spans where it is set and finite; count: those spans.
    Sample: those values. Examples: the worst values in the signal's bad direction. Read from raw spans, a
    re-sent span's unmerged duplicate counted once."""

    column: str

    @property
    def sample_column(self) -> str | None:
        return self.column

    def describe(self) -> str:
        return f"the mean of `spans.{self.column}` per window, over the spans that carry it"


@dataclass(frozen=True, slots=True)
class ShareWithinSla:
    """The share of spans with duration_ms ≤ the rule's `sla_ms` per window, from raw spans; count: the spans.
    Each point also carries `input_qps` (spans per second: offered load), `effective_qps` (those within the SLA
    per second) and `sla_ms`: a share that falls while input QPS rises is saturation. Examples: the slowest spans.
    No sample. Needs `sla_ms` on the query."""

    @property
    def sample_column(self) -> str | None:
        return None

    def describe(self) -> str:
        return "the share of spans with `duration_ms` ≤ the rule's `sla_ms` per window, with input and effective QPS"


@dataclass(frozen=True, slots=True)
class JudgedMean:
    """The online judge scores of `metric` (run_name '', the value set and finite), each trace counted once with
    its latest verdict and weighted by 1 / its inclusion probability (recorded by the sampler on the kept trace's
    payload; 1 once the payload expired): Σ(score·w) / Σw per window of `scored_at`; count: Kish's effective n,
    (Σw)² / Σw². Each point also carries `judged_traces` and `weight_sum`. Examples: the lowest scores. Scopes are
    (tenant, feature) with the stage "" (the request as a whole). No sample."""

    metric: str

    @property
    def sample_column(self) -> str | None:
        return None

    def describe(self) -> str:
        return (
            f"online `{self.metric}` scores weighted by 1 / inclusion probability per window of `scored_at`"
            " (count: Kish's effective n)"
        )


@dataclass(frozen=True, slots=True)
class NegativeFeedbackShare:
    """End users' verdicts (thumbs and ratings; each voter's latest, `feedback FINAL`) on the scope's traces: the
    share that is negative (thumbs down, a rating of 1-2) per window of arrival (`received_at`); count: the
    verdicts. Feedback is joined to its trace when read (by trace id, or the request span's `ragmon.request_id`),
    so feedback whose trace is not stored yet counts in no scope until it is. Examples: traces with negative
    feedback. Scopes are (tenant, feature) with the stage "" (the request as a whole). No sample."""

    @property
    def sample_column(self) -> str | None:
        return None

    def describe(self) -> str:
        return (
            "the share of end users' thumbs and ratings that are negative (thumbs down, rating 1-2) per window of"
            " arrival, each user's latest (count: the verdicts)"
        )


SignalRead = RollupQuantile | RollupRatio | SpanMean | ShareWithinSla | JudgedMean | NegativeFeedbackShare
