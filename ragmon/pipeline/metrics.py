"""The pipeline's families on /metrics: the log and its backlog, the store writer, the sampling stage and roll-ups,
the sampler's decisions and what became of them, and the judge's (`judging.collect`). Read from the counts each
stage keeps; the agent's registry collects them beside the receivers' and its own (`ragmon.agent.agent.Agent`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from ragmon.pipeline.pipeline import Pipeline
from ragmon.sampling import decision_counts


def pipeline_families(pipeline: Pipeline) -> Iterator[Metric]:
    """Every family the pipeline's stages report (a prometheus_client collector's `collect`)."""
    requests, backlog_bytes = pipeline.intake.backlog
    yield GaugeMetricFamily("ragmon_queue_requests", "Acknowledged requests waiting for the store.", requests)
    yield GaugeMetricFamily(
        "ragmon_queue_bytes", "Bytes of acknowledged requests waiting for the store.", backlog_bytes
    )
    yield GaugeMetricFamily("ragmon_wal_bytes", "Bytes held by the write-ahead log.", pipeline.wal.bytes_total)
    # Counter families are named without _total: prometheus_client appends it (ragmon_intake_refused_total).
    refused = CounterMetricFamily(
        "ragmon_intake_refused", "Requests refused with back-pressure, by reason.", labels=["reason"]
    )
    for reason, n in sorted(pipeline.intake.refused.items()):
        refused.add_metric([reason], n)
    yield refused
    writer = pipeline.writer.counts + pipeline.sampling.counts
    yield CounterMetricFamily("ragmon_spans_stored", "Spans stored.", writer["spans_stored"])
    yield CounterMetricFamily("ragmon_store_batches", "Batches stored.", writer["batches"])
    seconds = CounterMetricFamily(
        "ragmon_store_writer_seconds",
        "Wall time of the store writer, by phase: insert, sample (fragments query and policies), decided "
        "(payload copies and judge queue), roll_up (the per-minute rollup).",
        labels=["phase"],
    )
    for phase, s in sorted({**pipeline.writer.seconds, **pipeline.sampling.seconds}.items()):
        seconds.add_metric([phase], round(s, 6))
    yield seconds
    yield GaugeMetricFamily(
        "ragmon_rollup_lag_seconds",
        "How long the oldest stored range has waited to enter the per-minute rollup (the report trails by this).",
        round(pipeline.sampling.rollups.lag_s(), 3),
    )
    errors = CounterMetricFamily("ragmon_store_errors", "Store errors, by kind.", labels=["kind"])
    errors.add_metric(["retryable"], writer["store_retries"])
    errors.add_metric(["rejected"], writer["batches_rejected"])
    yield errors
    yield CounterMetricFamily(
        "ragmon_spans_quarantined", "Spans the store rejected, kept aside.", writer["spans_quarantined"]
    )
    yield CounterMetricFamily(
        "ragmon_requests_quarantined",
        "Logged requests the store rejected even alone, moved to quarantine/ with the reason.",
        writer["requests_quarantined"],
    )
    yield CounterMetricFamily(
        "ragmon_store_isolation_inserts",
        "Inserts spent finding the request a rejected batch holds (by halves: a few per poison request).",
        writer["isolation_inserts"],
    )
    yield CounterMetricFamily(
        "ragmon_store_requests_reencoded",
        "Logged requests read again and re-encoded by the receiver's rules after the store rejected their batch.",
        writer["requests_reencoded"],
    )
    loop_errors = CounterMetricFamily(
        "ragmon_loop_errors", "Failed tries of the writer's loops, each retried with backoff.", labels=["loop"]
    )
    for loop in ("writer", "sampling", "rollup"):
        loop_errors.add_metric([loop], writer[f"{loop}_errors"])
    yield loop_errors
    yield GaugeMetricFamily(
        "ragmon_sampler_traces_held", "Traces waiting for a decision.", pipeline.sampler.traces_held
    )
    decisions = CounterMetricFamily(
        "ragmon_sampler_decisions", "Sampling decisions, by decision and trigger.", labels=["decision", "by"]
    )
    for key, n in sorted(pipeline.decisions.counts.items()):
        decision, _, by = key.partition(":")
        if decision in {"keep", "skip", "drop"}:
            decisions.add_metric([decision, by], n)
    yield decisions
    kept_traces = CounterMetricFamily(
        "ragmon_sampler_kept_traces",
        "Kept traces, by first reason (policies in configured order) and traffic (production, or `ragmon eval "
        "run` traces): a traffic's reasons add up to all its kept traces.",
        labels=["reason", "traffic"],
    )
    kept_share = GaugeMetricFamily(
        "ragmon_sampler_kept_share",
        "Share of a traffic's traces decided since start that were kept, by first reason (for a window: the rate "
        "of ragmon_sampler_kept_traces_total over the rate of that traffic's decisions).",
        labels=["reason", "traffic"],
    )
    for traffic in ("production", "evaluation"):
        kept, decided = _kept_by_reason(pipeline, evaluation=traffic == "evaluation")
        for reason, n in sorted(kept.items()):
            kept_traces.add_metric([reason, traffic], n)
            kept_share.add_metric([reason, traffic], round(n / max(decided, 1), 6))
    yield kept_traces
    yield kept_share
    policy = CounterMetricFamily(
        "ragmon_sampler_policy", "Policy verdicts, by policy and verdict.", labels=["policy", "verdict"]
    )
    for (name, verdict), n in sorted(pipeline.sampler.policy.counts.items()):
        policy.add_metric([name, verdict], n)
    yield policy
    evictions = CounterMetricFamily(
        "ragmon_sampler_evictions", "Traces decided early to bound memory, by reason.", labels=["reason"]
    )
    for key, n in sorted(pipeline.sampler.counts.items()):
        if key.startswith("evicted:"):
            evictions.add_metric([key.split(":", 1)[1]], n)
    yield evictions
    yield CounterMetricFamily(
        "ragmon_payloads_copied",
        "Kept traces whose text went to payloads.",
        pipeline.decisions.counts["payloads_copied"],
    )
    questions = pipeline.sampling.questions
    if questions is not None:
        traces = CounterMetricFamily(
            "ragmon_question_traces",
            "Decided traces the question stage read, by outcome: grouped, or without a captured question (no row).",
            labels=["outcome"],
        )
        traces.add_metric(["grouped"], questions.counts["traces_grouped"])
        traces.add_metric(["without_question"], questions.counts["traces_without_question"])
        yield traces
        ranges = CounterMetricFamily(
            "ragmon_question_ranges",
            "Sampled ranges the question stage gave up ungrouped (skipped: it fell too far behind).",
            labels=["outcome"],
        )
        ranges.add_metric(["skipped"], questions.counts["ranges_skipped"])
        yield ranges
        groups = CounterMetricFamily(
            "ragmon_question_groups", "Question groups started or evicted (memory bound).", labels=["event"]
        )
        for event in ("created", "evicted"):
            groups.add_metric([event], questions.grouper.counts[f"groups_{event}"])
        yield groups
    yield from pipeline.judging.collect()


def _kept_by_reason(pipeline: Pipeline, *, evaluation: bool = False) -> tuple[Counter[str], int]:
    """Kept traces by first reason, and every trace decided, since start (the sampler's own counts), of
    production or of the eval runs."""
    counts = decision_counts(pipeline.sampler.counts, evaluation=evaluation)
    kept = Counter({key.removeprefix("kept:"): n for key, n in counts.items() if key.startswith("kept:")})
    return kept, sum(n for key, n in counts.items() if key.startswith("decided:"))
