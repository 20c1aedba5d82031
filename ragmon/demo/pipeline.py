"""`ragmon demo` end to end: an embedded agent in this process, the sample app's traffic through it, the report.

The agent is the real one (`ragmon serve`'s): OTLP/HTTP receiver on an ephemeral loopback port, write-ahead log,
embedded ClickHouse under `--data-dir`, tail sampler. The app exports with ragmon's SDK over OTLP/HTTP, exactly as
a production app would; the demo then waits until every acknowledged span is stored and the sampler has decided,
and prints what a user would ask for first: latency, errors, tokens and cost per feature and stage, and which
traces kept their text and why.

Then drift. Detectors judge minutes against a baseline of many earlier minutes, and the demo lasts seconds, so the
demo gives the store a past: an hour of the same app's fault-free traffic, replayed with backdated timestamps
(`history.py`: real exported traces of a fault-free run, resampled into each past minute at the live run's request
rate, service `ragmon-demo-history`). The evaluator then runs once, as of the end of the live run's minute, with
the production detectors (CUSUM per feature and stage) sized for a demo, and the demo prints the alerts it stored
— the same rows `ragmon alerts` reads.
"""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from ragmon.demo.faults import Faults
from ragmon.demo.run import run_demo

_SETTLE_TIMEOUT_S = 60.0
LIVE_SERVICE = "ragmon-demo"
HISTORY_MINUTES = 60
HISTORY_SOURCE_REQUESTS = 40  # fault-free requests recorded, then resampled into the past hour
# The production detectors (CUSUM, per feature and stage, against the baseline hour) with demo-sized settings: a
# demo has one or two live minutes of a dozen requests, so a single minute 3.5 σ off fires (h = 3; the defaults,
# h = 8, want about three such minutes and a day of baseline), and a minute needs 3 requests to count.
DEMO_RULES: tuple[tuple[str, str, str], ...] = (
    ("latency_p95_up", "latency_p95_ms", "warning"),
    ("error_rate_up", "error_rate", "critical"),
    ("embedding_norm_jump", "norm_deviation", "critical"),
)


# The demo sends a few dozen requests: too few to trust a feature's p95 (the sampler waits for 50), so the demo
# sets what a user with an SLA would — a request over 250 ms is slow — beside the default policies.
DEMO_SLA_MS = 250.0
DEMO_SAMPLING: dict[str, Any] = {
    "policies": [
        {"type": "error"},
        {"type": "slow", "relative_to_p95": 1.0, "trace_threshold_ms": DEMO_SLA_MS},
        {"type": "retrieval_health"},
        {"type": "baseline", "rate": 0.05},
    ]
}


def run_through_agent(
    data_dir: Path,
    run_app: Any,
    *,
    out: TextIO = sys.stdout,
    sampling: dict[str, Any] | None = None,
    history_app: Callable[[str], object] | None = None,
    eval_run: str | None = None,
) -> int:
    """Start an agent on `data_dir`, call `run_app(endpoint)`, wait for the pipeline to settle, print the report,
    then replay an hour of history and print the alerts the live run raised against it.

    `history_app(endpoint)` runs the app without faults and exports to `endpoint` (default: `run_demo` with the
    offline embedder and generator); pass one configured like `run_app` when the app uses other components, so
    the baseline is the same app. `eval_run`: the app's traffic is that `ragmon eval run`'s, so the report shows
    that run (production views leave eval runs out)."""
    from ragmon.agent import Agent, DataDirInUse
    from ragmon.commands import chosen_traffic, format_report
    from ragmon.settings import load_settings

    settings = load_settings(
        {
            "agent": {
                "data_dir": data_dir,
                "otlp_http": "127.0.0.1:0",
                "otlp_grpc": "",
                "api": "127.0.0.1:0",
                "sampling": DEMO_SAMPLING if sampling is None else sampling,
                "alerts": {"enabled": False},  # no background evaluation: the demo runs it once, at its own time
            }
        }
    )
    agent = Agent(settings)
    try:
        agent.start()
    except DataDirInUse as exc:
        print(f"ragmon demo: {exc}", file=sys.stderr)
        return 2
    try:
        endpoint = f"http://127.0.0.1:{agent.receivers[0].port}"
        print(f"agent: OTLP/HTTP {endpoint}, embedded ClickHouse in {data_dir}", file=out)
        started = time.time()
        exit_code = run_app(endpoint)
        _settle(agent)
        window_s = time.time() - started + 60
        if eval_run is None:
            print("\nreport (what `ragmon report` shows):", file=out)
            print(format_report(agent.store.report(window_s)), file=out)
        else:
            print(f"\nreport (what `ragmon report --eval-run {eval_run}` shows):", file=out)
            print(format_report(agent.store.report(window_s, traffic=chosen_traffic(eval_run=eval_run))), file=out)
        _print_kept(agent, out, evaluation=eval_run is not None)
        drift_alerts(agent, out, started, history_app or _fault_free_app)
        print(
            f"\nexplore: ragmon report --data-dir {data_dir} · ragmon alerts --data-dir {data_dir} · "
            f'ragmon query "SELECT stage, count() FROM spans GROUP BY stage" --data-dir {data_dir}',
            file=out,
        )
        # not this agent's address: it stops with the demo, and a URL that dies as it is printed helps no one
        print(f"dashboard: `ragmon serve --data-dir {data_dir}`, then open http://127.0.0.1:4320/", file=out)
        return int(exit_code)
    finally:
        agent.stop()


def _settle(agent: Any) -> None:
    """Wait until everything acknowledged is stored, let the sampler decide (root + grace), and the minute rollup
    take the decided ranges in."""
    pipeline = agent.pipeline
    deadline = time.monotonic() + _SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        stored = pipeline.writer.counts["requests_stored"]
        if pipeline.intake.backlog[0] == 0 and stored >= pipeline.intake.accepted_requests:
            break
        time.sleep(0.05)
    grace_s = agent.sampler.config.decision_grace_s
    time.sleep(grace_s + 2 * agent.pipeline.sampling.tick_interval_s)
    deadline = time.monotonic() + _SETTLE_TIMEOUT_S
    while agent.sampler.traces_held and time.monotonic() < deadline:
        time.sleep(0.05)
    agent.pipeline.copy_kept_now()
    while not agent.pipeline.settled and time.monotonic() < deadline:
        time.sleep(0.05)


def _print_kept(agent: Any, out: TextIO, *, evaluation: bool = False) -> None:
    """What the sampler decided in this run (its own counts: the data dir may hold earlier demo runs), in the
    words `ragmon report` uses; of the eval run's traffic when the app's traffic is one."""
    from ragmon.commands import format_sampler_counts
    from ragmon.sampling import SamplerConfig

    print("\n" + format_sampler_counts(agent.sampler.counts, evaluation=evaluation), file=out)
    if agent.sampler_config == SamplerConfig.model_validate(DEMO_SAMPLING):
        print(
            f"  slow: over the demo's {DEMO_SLA_MS:.0f} ms SLA, or over the feature's recent p95 by 100 ms once it has"
            " 50 requests (docs/agent.md: Tail sampler)",
            file=out,
        )


def _fault_free_app(endpoint: str) -> object:
    return run_demo(
        HISTORY_SOURCE_REQUESTS, faults=Faults(), endpoint=endpoint, out=io.StringIO(), seed=1, show_spans=False
    )


def demo_alerts_config(judged_minutes: int) -> Any:
    """The demo's rules: judge the last `judged_minutes` minutes against the hour before them."""
    from ragmon.drift import AlertsConfig

    rule = {
        "window_minutes": 1,
        "warmup_windows": judged_minutes,
        "baseline_minutes": HISTORY_MINUTES,
        "baseline_lag_minutes": 0,
        "channels": [],  # the demo prints what the alerts table holds; a log line per alert would say it twice
        "detector": {"type": "cusum", "h": 3.0, "min_count": 3, "min_baseline_windows": 20},
    }
    return AlertsConfig.model_validate(
        {
            "settle_s": 0,  # the demo waited until every span was stored: nothing can arrive late
            "default_rules": False,
            "rules": [
                {"name": name, "signal": signal, "severity": severity, **rule} for name, signal, severity in DEMO_RULES
            ],
        }
    )


def drift_alerts(agent: Any, out: TextIO, started_s: float, history_app: Callable[[str], object]) -> None:
    """Replay the history hour before the live run, evaluate once as of the end of the live minutes, print."""
    from ragmon.agent import AlertingService
    from ragmon.commands import collapse_alert_rows, format_alerts
    from ragmon.demo.history import HISTORY_SERVICE, history_requests, record_traces, send

    live = agent.store.span_activity(started_s, service=LIVE_SERVICE)
    traces = live["traces"]
    if not traces:
        print("\ndrift: the live run stored no traces, so there is nothing to judge", file=out)
        return
    history_end_s = int(started_s) // 60 * 60  # the minute the live run began
    judged_end_s = live["last_s"] // 60 * 60 + 60  # the end of its last minute
    judged_minutes = (judged_end_s - history_end_s) // 60
    earlier = agent.store.span_activity(history_end_s - HISTORY_MINUTES * 60, history_end_s)["spans"]

    recorded = record_traces(history_app)
    bodies = history_requests(
        recorded, start_s=history_end_s - HISTORY_MINUTES * 60, minutes=HISTORY_MINUTES, per_minute=traces
    )
    send(f"http://127.0.0.1:{agent.receivers[0].port}", bodies)
    _settle(agent)

    service = AlertingService(demo_alerts_config(judged_minutes), agent.store, clock=lambda: float(judged_end_s))
    records = service.run_once()
    service.stop()
    fired = {record.alert_id for record in records}
    rows = agent.store.alert_rows(sorted(fired))

    until = datetime.fromtimestamp(judged_end_s, UTC).strftime("%H:%M")
    print(
        f"\ndrift: baseline = {HISTORY_MINUTES} min of synthetic history before the run ({traces} requests a minute,"
        f" as many as the live run sent, resampled from {len(recorded)} fault-free requests of the same app and"
        f" replayed over OTLP with backdated timestamps as service {HISTORY_SERVICE});"
        f" current = the live run's {judged_minutes} minute(s), judged as of {until} UTC when the last one closes",
        file=out,
    )
    if earlier:
        print(f"  note: the store already held {earlier} spans from that hour (earlier runs); they count too", file=out)
    rules = ", ".join(signal for _, signal, _ in DEMO_RULES)
    print(
        f"  rules: CUSUM per feature and stage on {rules}; h = 3, so one minute 3.5 σ off the baseline fires"
        " (`ragmon serve` defaults: a day of baseline, h = 8). Judged quality needs 15-minute windows: not here.",
        file=out,
    )
    print("\nalerts the injected faults raised (what `ragmon alerts` shows):", file=out)
    if rows:
        print(format_alerts(collapse_alert_rows(rows)), file=out)
    else:
        print(
            f"none: {traces} requests in {judged_minutes} minute(s) were too little evidence against the baseline"
            " for the faults injected; stronger ones show, e.g. `ragmon demo --slow generate=300 --norm-bug`",
            file=out,
        )
    skipped = service.evaluator.stats.source_errors
    if skipped:
        print(f"  (signals that could not be read: {dict(skipped)})", file=out)
