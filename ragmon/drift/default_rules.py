"""The rule set that is on unless `default_rules = false`: one rule per signal, tuned to stay quiet on steady traffic.

Why these choices:
- Means (latency, errors, cost, tokens, judged quality, SLA share) use CUSUM against the last day (ending an hour
  ago): it accumulates small persistent shifts that a fixed threshold misses; its defaults are documented at
  1 false alarm per 5,000 windows per scope on independent noise (measured 6 in 100,000). Skewed signals are judged
  on a log (latency, cost, tokens) or arcsine (error rate, SLA share) scale — see `signals.SignalSpec.transform`.
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

from typing import Any

# Plain data, validated into `RuleConfig`s by `rules.default_rules` (so this module imports nothing of the rules).
DEFAULT_RULES: tuple[dict[str, Any], ...] = (
    {
        "name": "latency_p95_up",
        "signal": "latency_p95_ms",
        "detector": {"type": "cusum", "min_count": 20},
    },
    {
        "name": "error_rate_up",
        "signal": "error_rate",
        "severity": "critical",
        "detector": {"type": "cusum", "min_count": 20},
    },
    {
        "name": "cost_per_request_up",
        "signal": "cost_per_request_usd",
        "detector": {"type": "cusum", "min_count": 10},
    },
    {
        "name": "tokens_per_request_shift",
        "signal": "tokens_per_request",
        "severity": "info",
        "detector": {"type": "cusum", "min_count": 10},
    },
    {
        "name": "faithfulness_down",
        "signal": "faithfulness",
        "window_minutes": 15,
        "warmup_windows": 8,
        "detector": {"type": "cusum", "min_count": 5, "min_baseline_windows": 24},
    },
    {
        "name": "relevance_down",
        "signal": "relevance",
        "window_minutes": 15,
        "warmup_windows": 8,
        "detector": {"type": "cusum", "min_count": 5, "min_baseline_windows": 24},
    },
    {
        "name": "top1_score_shift",
        "signal": "top1_score",
        "detector": {"type": "psi"},
    },
    {
        "name": "similarity_gap_shift",
        "signal": "similarity_gap",
        "severity": "info",
        "detector": {"type": "ks"},
    },
    {
        "name": "embedding_norm_jump",
        "signal": "norm_deviation",
        "severity": "critical",
        "detector": {"type": "cusum", "min_baseline_windows": 10},
    },
    {
        "name": "saturation_sla_share",
        "signal": "sla_share",
        "sla_ms": 2000.0,
        "scope": {"stages": [""]},
        "detector": {"type": "cusum", "min_count": 20},
    },
)
