"""The sampler's columnar path (`ingest_table`) decides exactly as its per-trace path (`ingest`) does.

One random stream of stored batches — whole traces, traces split over batches, late spans, errors, slow stages,
unhealthy retrieval, several features and users — goes through two samplers with the same clock: one fed per
fragment, one fed each batch as the table the store returns. Decisions, reasons, probabilities, triggers and every
counter must match.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from ragmon.sampling import Decision, Sampler, SamplerConfig, TraceFragment
from ragmon.sampling.batch import BatchRows, FragmentColumns
from ragmon.sampling.composite import CompositePolicy
from ragmon.sampling.config import POLICY_TYPES
from ragmon.sampling.decision import Verdict
from ragmon.sampling.policies import Policy
from ragmon.sampling.policies.error import ErrorPolicy
from ragmon.sampling.policies.probabilistic import ProbabilisticPolicy, keeps
from ragmon.sampling.trace import TraceSummary

_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("trace_id", pa.string()),
        ("feature", pa.string()),
        ("user", pa.string()),
        ("span_count", pa.uint64()),
        ("error_count", pa.uint64()),
        ("root_seen", pa.uint8()),
        ("root_duration_ms", pa.float64()),
        ("stage_max_ms", pa.map_(pa.string(), pa.float64())),
        ("min_top1_score", pa.float64()),
        ("min_similarity_gap", pa.float64()),
        ("max_norm_deviation", pa.float64()),
        ("content_bytes", pa.uint64()),
        ("eval_run", pa.string()),
        ("root_span_id", pa.string()),
    ]
)
_STAGES = ("embed", "search", "rerank", "generate", "tool")


def _table(fragments: list[TraceFragment]) -> pa.Table:
    """Fragments as the store's `trace_fragment_table` returns them."""
    columns: dict[str, list[Any]] = {name: [] for name in _SCHEMA.names}
    for f in fragments:
        columns["tenant"].append(f.tenant)
        columns["trace_id"].append(f.trace_id)
        columns["feature"].append(f.feature)
        columns["user"].append(f.user)
        columns["span_count"].append(f.span_count)
        columns["error_count"].append(f.error_count)
        columns["root_seen"].append(int(f.root_seen))
        columns["root_duration_ms"].append(f.root_duration_ms)
        columns["stage_max_ms"].append(list(f.stage_max_ms.items()))
        columns["min_top1_score"].append(f.min_top1_score)
        columns["min_similarity_gap"].append(f.min_similarity_gap)
        columns["max_norm_deviation"].append(f.max_norm_deviation)
        columns["content_bytes"].append(f.content_bytes)
        columns["eval_run"].append(f.eval_run)
        columns["root_span_id"].append(f.root_span_id)
    return pa.table(columns, schema=_SCHEMA)


def _fragment(rng: random.Random, trace_id: str, *, root: bool, seq: int) -> TraceFragment:
    stages = {s: rng.uniform(1, 40) for s in rng.sample(_STAGES, rng.randrange(0, 4))}
    if root:
        stages["request"] = sum(stages.values()) + rng.uniform(0, 5)
    return TraceFragment(
        tenant="t",
        trace_id=trace_id,
        feature=rng.choice(["qa", "chat", "search", ""]),
        user=rng.choice(["u1", "u2", "blocked", ""]),
        span_count=len(stages) or 1,
        error_count=int(rng.random() < 0.05),
        root_seen=root,
        root_duration_ms=stages["request"] if root else None,
        stage_max_ms=stages,
        min_top1_score=rng.choice([None, rng.uniform(0.2, 0.95)]),
        min_similarity_gap=rng.choice([None, rng.uniform(0.0, 0.4)]),
        max_norm_deviation=rng.choice([None, None, rng.uniform(0.0, 0.1)]),
        content_bytes=rng.randrange(0, 3000),
        first_ingest_seq=seq,
        # a few traces from an eval run: judged against the production p95, never part of it
        eval_run=rng.choices(["", "nightly"], [85, 15])[0],
        root_span_id=f"{int(trace_id, 16) % 2**64:016x}" if root else "",
    )


def _stream(seed: int, batches: int, *, whole_only: bool = False) -> list[list[TraceFragment]]:
    """Batches of fragments. Unless `whole_only`: some traces send children in one batch and the root in the next,
    some send a child after the root (late: within the grace period or after the decision), some never a root."""
    rng = random.Random(seed)
    out: list[list[TraceFragment]] = [[] for _ in range(batches + 3)]
    n = 0
    for b in range(batches):
        for _ in range(rng.randrange(20, 60)):
            n += 1
            trace_id = f"{rng.getrandbits(128):032x}"
            shape = "whole" if whole_only else rng.choices(["whole", "split", "late", "orphan"], [70, 12, 12, 6])[0]
            if shape in ("whole", "late"):
                out[b].append(_fragment(rng, trace_id, root=True, seq=b))
            if shape == "late":
                out[b + rng.choice([1, 3])].append(_fragment(rng, trace_id, root=False, seq=b))
            if shape == "split":
                out[b].append(_fragment(rng, trace_id, root=False, seq=b))
                out[b + 1].append(_fragment(rng, trace_id, root=True, seq=b + 1))
            if shape == "orphan":
                out[b].append(_fragment(rng, trace_id, root=False, seq=b))
    return out


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def _run(
    config: SamplerConfig,
    stream: list[list[TraceFragment]],
    *,
    columnar: bool,
    policies: list[Policy] | None = None,
) -> tuple[Sampler, dict]:
    """Sample `stream`; `policies` (of one's own, which only code can give) in place of the configured ones."""
    clock = Clock()
    p95 = {("qa", "generate"): 20.0, ("chat", "search"): 10.0, ("qa", "request"): 50.0, ("search", "embed"): 0.0}
    sampler = Sampler(config, clock=clock, p95_lookup=lambda feature, stage: p95.get((feature, stage)))
    if policies is not None:
        sampler.policy = CompositePolicy(policies)
    decided: dict[str, list[tuple[Any, ...]]] = defaultdict(list)

    def record(traces: list) -> None:
        for t in traces:
            decided[t.trace_id].append(
                (
                    t.tenant,
                    t.decision,
                    t.reasons,
                    round(t.probability, 12),
                    t.decided_by,
                    t.first_ingest_seq,
                    t.eval_run,
                    t.root_span_id,
                )
            )

    for seq, fragments in enumerate(stream):
        if columnar:
            record(sampler.ingest_table(_table(fragments), seq))
        else:
            record(sampler.ingest(fragments))
        clock.now_s += 0.4  # grace is 1 s: a trace waits over two or three batches
        record(sampler.tick())
    clock.now_s += 40  # past the timeout: orphans are decided
    record(sampler.tick())
    return sampler, dict(decided)


_CONFIGS = {
    "default": SamplerConfig(),
    "rules and thresholds": SamplerConfig(
        policies=[
            {"type": "attribute", "name": "never_blocked", "field": "user", "values": ["blocked"], "action": "drop"},
            {"type": "attribute", "name": "always_search", "field": "feature", "values": ["search"]},
            {"type": "error"},
            {
                "type": "slow",
                "stage_threshold_ms": {"rerank": 30, "tool": 35},
                "relative_to_p95": 1.2,
                "stage_relative_to_p95": 1.5,
                "min_excess_ms": 5,
            },
            {"type": "retrieval_health", "min_top1_score": 0.3, "min_similarity_gap": 0.05},
            {"type": "baseline", "rate": 0.2},
        ],
        request_p95_window=200,  # refreshed every 10 requests: the paths must agree across many refreshes
        request_p95_min_requests=20,
    ),
    "rules that read little": SamplerConfig(
        policies=[
            {"type": "attribute", "name": "never_blocked", "field": "user", "values": ["blocked"], "action": "drop"},
            {"type": "attribute", "name": "tenant_t", "field": "tenant", "values": ["t"]},  # every trace's tenant
            {"type": "baseline", "name": "never", "rate": 0.0},  # fires on no trace, whatever the trace
            # a stage no trace has took 0 ms, which is above -1 ms: every trace not dropped is kept
            {"type": "slow", "stage_threshold_ms": {"unseen": -1.0}},
        ],
    ),
}


@pytest.mark.parametrize("name", list(_CONFIGS))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_columnar_and_per_trace_paths_decide_alike(name: str, seed: int) -> None:
    stream = _stream(seed, 30)
    per_trace, expected = _run(_CONFIGS[name], stream, columnar=False)
    columnar, got = _run(_CONFIGS[name], stream, columnar=True)
    assert got == expected
    assert columnar.counts == per_trace.counts
    assert columnar.policy.counts == per_trace.policy.counts
    assert columnar.traces_held == per_trace.traces_held == 0
    assert columnar.bytes_held == per_trace.bytes_held == 0
    kept = sum(1 for d in expected.values() if d[0][1] is Decision.KEEP)
    assert 0 < kept < len(expected)  # the stream exercises both outcomes
    assert {d[0][4] for d in expected.values()} >= {"complete", "timeout"}
    assert any(len(d) > 1 and d[1][4] == "late" for d in expected.values())
    # a decision names the trace's root span (its evaluation events are parented to it) once the root has arrived
    for trace_id, decisions in expected.items():
        root_id = f"{int(trace_id, 16) % 2**64:016x}"
        assert {d[7] for d in decisions} <= {root_id, ""}
        assert decisions[0][4] != "complete" or decisions[0][7] == root_id
    # an eval run's decisions are counted apart (the kept share /metrics shows is production's), once per trace
    for counts in (per_trace.counts, columnar.counts):
        for traffic, prefix in (("production", ""), ("evaluation", "eval:")):
            first = [d[0] for d in expected.values() if bool(d[0][6]) == (traffic == "evaluation")]
            decided = sum(n for k, n in counts.items() if k.startswith(prefix + "decided:"))
            kept = sum(n for k, n in counts.items() if k.startswith(prefix + "kept:"))
            assert first and decided == len(first)
            assert kept == sum(1 for d in first if d[1] is Decision.KEEP)


def test_every_policy_type_is_driven_through_both_paths() -> None:
    """A policy type registered in the configuration but missing here would have its two evaluations unchecked."""
    driven = {policy.type for config in _CONFIGS.values() for policy in config.policies}
    assert driven == set(POLICY_TYPES)


class _FeatureIsQa:
    """A policy of one's own: only `name` and `evaluate`, no rule over a `TraceView`."""

    name = "feature_is_qa"

    def evaluate(self, trace: TraceSummary) -> Verdict:
        return Verdict(Decision.KEEP) if trace.feature == "qa" else Verdict(Decision.SKIP)


def test_a_policy_of_ones_own_sends_every_trace_the_per_trace_way() -> None:
    config = SamplerConfig(policies=[{"type": "error"}])
    stream = _stream(6, 20)
    policies: list[Policy] = [ErrorPolicy(), _FeatureIsQa()]
    per_trace, expected = _run(config, stream, columnar=False, policies=policies)
    fed_tables, got = _run(config, stream, columnar=True, policies=policies)
    assert not fed_tables.policy.columnar
    assert got == expected
    assert fed_tables.counts == per_trace.counts and fed_tables.policy.counts == per_trace.policy.counts
    assert any(d[0][2] == ("feature_is_qa",) for d in expected.values())
    counts = fed_tables.policy.counts
    assert counts[("feature_is_qa", "keep")] + counts[("feature_is_qa", "skip")] == len(expected)  # each trace once


def test_a_decision_names_the_batch_its_trace_was_first_seen_in() -> None:
    """The payload copy reads spans from that ingest sequence on: every decision, late ones too, must carry the
    sequence of the trace's first batch, never a later one (the copy would miss the trace's first spans)."""
    stream = _stream(4, 30)
    first_seen: dict[str, int] = {}
    for seq, fragments in enumerate(stream):
        for fragment in fragments:
            first_seen.setdefault(fragment.trace_id, seq)
    for columnar in (False, True):
        _, decided = _run(SamplerConfig(), stream, columnar=columnar)
        assert {trace_id: {d[5] for d in ds} for trace_id, ds in decided.items()} == {
            trace_id: {seq} for trace_id, seq in first_seen.items()
        }


def test_the_budget_spends_in_the_same_order() -> None:
    config = SamplerConfig(budget={"traces_per_s": 3})
    stream = _stream(7, 30, whole_only=True)
    per_trace, expected = _run(config, stream, columnar=False)
    columnar, got = _run(config, stream, columnar=True)
    assert got == expected
    assert columnar.policy.counts == per_trace.policy.counts
    assert per_trace.policy.counts[("budget", "skip")] > 0


@pytest.mark.parametrize("cap", ["max_traces", "max_bytes"])
def test_caps_decide_the_oldest_early_and_hold_no_more(cap: str) -> None:
    limits = {"max_traces": {"max_traces": 40}, "max_bytes": {"max_bytes": 40_000}}[cap]
    config = SamplerConfig(decision_grace_s=30, **limits)
    stream = _stream(5, 20)
    clock = Clock()
    sampler = Sampler(config, clock=clock)
    decisions: list[Any] = []
    for seq, fragments in enumerate(stream):
        decisions += sampler.ingest_table(_table(fragments), seq)
        assert sampler.traces_held <= config.max_traces
        assert sampler.bytes_held <= config.max_bytes
        clock.now_s += 0.1
        decisions += sampler.tick()
    evicted = [d for d in decisions if d.decided_by == f"evicted:{cap}"]
    assert evicted and sampler.counts[f"evicted:{cap}"] == len(evicted)
    first = [d for d in decisions if d.decided_by != "late"]
    assert len({d.trace_id for d in first}) == len(first)  # each trace decided once
    decisions += sampler.flush()
    every = {f.trace_id for fragments in stream for f in fragments}
    assert {d.trace_id for d in decisions} == every
    assert (sampler.traces_held, sampler.bytes_held) == (0, 0)


def test_low_water_mark_counts_waiting_rows() -> None:
    sampler = Sampler(SamplerConfig(), clock=Clock())
    rng = random.Random(3)
    sampler.ingest_table(_table([_fragment(rng, f"{7:032x}", root=True, seq=5)]), 5)
    sampler.ingest_table(_table([_fragment(rng, f"{8:032x}", root=False, seq=9)]), 9)
    assert sampler.traces_held == 2
    assert sampler.low_water_seq() == 5


def _baseline(rate: float, ids: list[str], rows: np.ndarray) -> np.ndarray:
    """The baseline policy's rule over `rows` of a stored batch of traces `ids`: the columnar path's evaluation."""
    columns = FragmentColumns(_table([TraceFragment("t", trace_id, root_seen=True) for trace_id in ids]), 0)
    return np.broadcast_to(ProbabilisticPolicy(rate=rate).fires(BatchRows(columns, rows)), len(rows))


def test_vectorised_baseline_matches_the_per_trace_test() -> None:
    rng = random.Random(11)
    ids = [f"{rng.getrandbits(128):032x}" for _ in range(2000)]
    ids += [i.upper() for i in ids[:50]] + ["f" * 18 + "0" * 14, "0" * 18 + "f" * 14, "x" * 32, "0" * 31 + "g"]
    rows = np.arange(len(ids))
    for rate in (0.0, 1e-9, 0.05, 0.5, 0.999999, 1.0):
        assert _baseline(rate, ids, rows).tolist() == [keeps(i, rate) for i in ids]
    short = ["abc", "0" * 20]  # not the stored form: the per-trace test decides
    assert _baseline(0.5, short, np.arange(2)).tolist() == [keeps(i, 0.5) for i in short]
