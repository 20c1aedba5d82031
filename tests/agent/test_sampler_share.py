"""The kept share under the default sampling policies, on a generated steady stream with known latency distributions.

docs/agent.md's arithmetic (Tail sampler): with defaults a steady stream keeps about the baseline rate + the error
share + at most ~5 % slow requests (those above their feature's p95 by 100 ms or more), and the shares by reason add
up to the kept share. The same stream under the old default (any stage above its own p95) keeps several times as much.
"""

from __future__ import annotations

import math
import random
from collections import Counter

from ragmon.sampling import Decision, Sampler, SamplerConfig, TraceFragment
from tests.agent.test_sampler_batch import _table

_Z95 = 1.6449  # the standard normal's 95th percentile

# feature -> stage -> (median ms, sigma of the log): lognormal stage latencies, a request is their sum + 5 ms
_FEATURES = {
    "docs-qa": {"embed": (30, 0.4), "search": (20, 0.5), "rerank": (60, 0.4), "generate": (900, 0.5), "tool": (8, 1)},
    "support-chat": {"embed": (25, 0.3), "search": (15, 0.6), "rerank": (50, 0.3), "generate": (2500, 0.4)},
    "autocomplete": {"embed": (3, 0.3), "search": (2, 0.5), "generate": (25, 0.3)},  # fast: p95 + 100 ms is rare
}
_ERROR_RATE = 0.02
_BASELINE = 0.05
_TRACES = 30_000
_PER_BATCH = 300


class _Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def _stream(seed: int) -> list[list[TraceFragment]]:
    rng = random.Random(seed)
    features = list(_FEATURES)
    batches: list[list[TraceFragment]] = []
    for b in range(_TRACES // _PER_BATCH):
        batch = []
        for _ in range(_PER_BATCH):
            feature = rng.choice(features)
            stages = {
                stage: rng.lognormvariate(math.log(median), sigma)
                for stage, (median, sigma) in _FEATURES[feature].items()
            }
            batch.append(
                TraceFragment(
                    tenant="t",
                    trace_id=f"{rng.getrandbits(128):032x}",
                    feature=feature,
                    span_count=len(stages) + 1,
                    error_count=int(rng.random() < _ERROR_RATE),
                    root_seen=True,
                    root_duration_ms=sum(stages.values()) + 5.0,
                    stage_max_ms=stages,
                    content_bytes=500,
                    first_ingest_seq=b,
                )
            )
        batches.append(batch)
    return batches


def _sample(config: SamplerConfig, stream: list[list[TraceFragment]], **sampler: object) -> dict[str, tuple]:
    clock = _Clock()
    s = Sampler(config, clock, **sampler)  # type: ignore[arg-type]
    decided = {}
    for seq, fragments in enumerate(stream):
        s.ingest_table(_table(fragments), seq)
        clock.now_s += 1.0
        decided.update({d.trace_id: (d.decision, d.reasons, d.feature) for d in s.tick()})
    clock.now_s += 60
    decided.update({d.trace_id: (d.decision, d.reasons, d.feature) for d in s.tick()})
    return decided


def test_defaults_keep_about_baseline_plus_errors_plus_five_percent() -> None:
    stream = _stream(11)
    errors = {f.trace_id for batch in stream for f in batch if f.error_count}
    decided = _sample(SamplerConfig(), stream)
    assert len(decided) == _TRACES
    kept = {trace_id: reasons for trace_id, (decision, reasons, _) in decided.items() if decision is Decision.KEEP}
    by_reason = Counter(reasons[0] for reasons in kept.values())
    assert sum(by_reason.values()) == len(kept)  # each kept trace under its first reason: the shares add up
    assert {trace_id for trace_id, reasons in kept.items() if reasons[0] == "error"} == errors  # every error, first
    error_share, baseline_share = len(errors) / _TRACES, by_reason["baseline"] / _TRACES
    assert 0.045 < baseline_share / (1 - error_share) < 0.055  # the baseline among what errors did not take

    slow_features = ("docs-qa", "support-chat")
    slow_share = {
        feature: sum(1 for trace_id, r in kept.items() if "slow" in r and decided[trace_id][2] == feature)
        / sum(1 for d in decided.values() if d[2] == feature)
        for feature in _FEATURES
    }
    for feature in slow_features:  # above p95 by 100 ms: a little under 5 % of a feature's requests
        assert 0.025 < slow_share[feature] < 0.055, slow_share
    assert slow_share["autocomplete"] < 0.002, slow_share  # 30 ms requests are never 100 ms over their p95

    kept_share = len(kept) / _TRACES
    assert kept_share < _BASELINE + error_share + 0.05
    assert kept_share > _BASELINE + error_share  # slow requests do add to it


def test_the_old_any_stage_rule_keeps_several_times_as_much_on_the_same_stream() -> None:
    """Why the default changed: with five stages, one is above its p95 about 1 - 0.95^5 ≈ 23 % of the time."""
    stream = _stream(12)
    true_p95 = {
        (feature, stage): median * math.exp(_Z95 * sigma)
        for feature, stages in _FEATURES.items()
        for stage, (median, sigma) in stages.items()
    }
    any_stage = SamplerConfig(
        policies=[{"type": "error"}, {"type": "slow", "stage_relative_to_p95": 1.0, "min_excess_ms": 1e-9}]
    )
    old = _sample(any_stage, stream, p95_lookup=lambda feature, stage: true_p95.get((feature, stage)))
    new = _sample(SamplerConfig(policies=[{"type": "error"}, {"type": "slow", "relative_to_p95": 1.0}]), stream)
    old_share = sum(1 for d in old.values() if "slow" in d[1]) / _TRACES
    new_share = sum(1 for d in new.values() if "slow" in d[1]) / _TRACES
    assert old_share > 0.15  # 1 - 0.95^k over the features' 5, 4 and 3 stages
    assert new_share < 0.05
