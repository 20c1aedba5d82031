"""`ragmon serve`, `ragmon report` and `ragmon query`.

Argument definitions only import the standard library; each command imports the agent's parts when it runs, so
`ragmon --help` and `ragmon demo` never load the store engine.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import re
import signal
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Allocations (net) between young-generation collections; Python's default is 700.
_GC_YOUNG_THRESHOLD = 50_000


def _tune_gc_for_serving() -> None:
    """The agent keeps many long-lived objects (traces waiting for a decision, the decision cache) and makes
    short-lived ones by the hundred thousand a second; with Python's default thresholds the cyclic collector
    traversed the long-lived ones again and again: 5-9 % of the agent's CPU under `benchmarks/ingest.py`
    (perf), and ingest ran 6 % faster without it (84.5k against 79.3k spans/s, two runs each, side by side).
    Freezing what start-up made takes it out of every collection; a higher young threshold makes collections rarer.
    Only `ragmon serve` does this: an agent embedded in someone else's process leaves their collector alone."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(_GC_YOUNG_THRESHOLD, middle, old)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

REPORT_FIELDS = (
    "feature",
    "stage",
    "requests",
    "error_rate",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "ttft_p95_ms",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "cost_per_request_usd",
)


def parse_duration_s(text: str) -> float:
    """'90s', '30m', '1h', '7d', '2w' or plain seconds."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"expected a duration like 30m, 1h or 7d, got {text!r}")
    seconds = float(match.group(1)) * _UNIT_S[match.group(2) or "s"]
    if seconds <= 0:  # an empty window reads nothing and says so as "no data", which misleads
        raise argparse.ArgumentTypeError(f"a window must be longer than zero, got {text!r}")
    return seconds


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help="embedded store directory (default ./.ragmon)")
    parser.add_argument("--clickhouse-url", help="a ClickHouse server instead of the embedded store")
    parser.add_argument("--config", type=Path, help="settings file (TOML or JSON)")
    parser.add_argument("--api-key", help="API key, when the agent requires one (or RAGMON_API_KEY)")


def _settings(args: argparse.Namespace, **agent: Any) -> Any:
    from ragmon.settings import load_settings

    overrides: dict[str, Any] = {k: v for k, v in agent.items() if v is not None}
    if args.data_dir is not None:
        overrides["data_dir"] = args.data_dir
    if args.clickhouse_url is not None:
        overrides["clickhouse_url"] = args.clickhouse_url
    return load_settings({"agent": overrides}, config_file=args.config)


# -- serve -------------------------------------------------------------------------------------------------------
def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--otlp-http", metavar="HOST:PORT", help="OTLP/HTTP receiver (default 127.0.0.1:4318)")
    parser.add_argument("--otlp-grpc", metavar="HOST:PORT", help="OTLP/gRPC receiver (default 127.0.0.1:4317)")
    parser.add_argument(
        "--api", metavar="HOST:PORT", help="the dashboard (at /) and the report/query API (default 127.0.0.1:4320)"
    )
    parser.add_argument(
        "--instance", type=int, help="this agent's number (0-4095), distinct per agent sharing one ClickHouse"
    )
    _store_options(parser)


def serve(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from ragmon.agent.agent import Agent, DataDirInUse
    from ragmon.agent.check_command import config_error

    try:
        settings = _settings(
            args, otlp_http=args.otlp_http, otlp_grpc=args.otlp_grpc, api=args.api, instance=args.instance
        )
        agent = Agent(settings)
        agent.start()
        _tune_gc_for_serving()
    except (ValidationError, ValueError, DataDirInUse, OSError) as exc:
        print(f"ragmon serve: {config_error(exc)}", file=sys.stderr)
        return 2
    store = settings.agent.clickhouse_url or f"embedded ClickHouse (chDB) in {settings.agent.data_dir}"
    print(f"ragmon agent listening: OTLP/HTTP http://{settings.agent.otlp_http}/v1/traces", flush=True)
    if settings.agent.otlp_grpc:
        print(f"                        OTLP/gRPC {settings.agent.otlp_grpc}", flush=True)
    assert agent.api is not None
    print(f"                        dashboard {agent.api.url}/ (and the report/query API)", flush=True)
    print("                        health and metrics at the OTLP/HTTP port: /health, /metrics", flush=True)
    print(f"store: {store}; Ctrl-C to stop", flush=True)
    stopping = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    stopping.wait()
    print("stopping: storing what was acknowledged…", flush=True)
    agent.stop()
    unstored, unstored_bytes = agent.intake.backlog
    if unstored:
        print(
            f"{unstored} acknowledged requests ({unstored_bytes} bytes) were not stored before the deadline; "
            "they stay in the write-ahead log and are stored at the next start",
            flush=True,
        )
    else:
        print("stopped: everything acknowledged is stored", flush=True)
    return 0


# -- report ------------------------------------------------------------------------------------------------------
def add_traffic_arguments(parser: argparse.ArgumentParser) -> None:
    """--eval-run NAME / --eval: which traffic a command reads (production by default; `ragmon.sinks.traffic`)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--eval-run", metavar="NAME", help="only the traffic of this `ragmon eval run` (default: production only)"
    )
    group.add_argument("--eval", action="store_true", help="only evaluation traffic: every `ragmon eval run`")


def traffic_of(args: argparse.Namespace) -> Any:
    """The `ragmon.sinks.traffic.Traffic` that --eval-run / --eval ask for; raises CommandError for an empty name."""
    return chosen_traffic(eval_run=getattr(args, "eval_run", None), evaluation=getattr(args, "eval", False))


def chosen_traffic(*, eval_run: str | None = None, evaluation: bool = False) -> Any:
    """Production traffic by default, else one eval run's (`eval_run`) or every run's (`evaluation`)."""
    from ragmon.sinks.traffic import Traffic

    try:
        return Traffic.of(eval_run=eval_run, evaluation=evaluation)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc


def format_sampler_counts(counts: Mapping[str, int], *, evaluation: bool = False) -> str:
    """A sampler's own decision counts (`Sampler.counts`: `kept:<reason>`, `decided:skip|drop`; an eval run's under
    `eval:`) as the kept share `ragmon report` prints: production's, or with `evaluation` the eval runs'."""
    from ragmon.agent.sampling.sampler import decision_counts
    from ragmon.sinks.kept_share import format_kept_share, summarise

    rows = []
    for key, n in decision_counts(counts, evaluation=evaluation).items():
        if key.startswith("kept:"):
            rows.append({"feature": "", "outcome": "keep", "reason": key.split(":", 1)[1], "traces": n})
        elif key in ("decided:skip", "decided:drop"):
            rows.append({"feature": "", "outcome": key.split(":", 1)[1], "reason": "", "traces": n})
    return format_kept_share(summarise(rows))


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", type=parse_duration_s, default=3600.0, help="window, e.g. 15m, 1h, 7d (default 1h)")
    parser.add_argument("--feature", help="only this feature")
    add_traffic_arguments(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help='one JSON object: {"stages": [...], "sampling": {...}, "quality": [...]}, the sections of the text',
    )
    _store_options(parser)


def report(args: argparse.Namespace) -> int:
    try:
        traffic = traffic_of(args)
        rows = _read(args, "report", since_s=args.since, feature=args.feature, traffic=traffic)
    except CommandError as exc:
        print(f"ragmon report: {exc}", file=sys.stderr)
        return 2
    sampling, sampling_error = _kept_share(args, traffic)
    quality, quality_error = _quality(args, traffic)
    if args.json:
        unavailable = {"sampling": sampling_error, "quality": quality_error}
        document = {
            "since_s": args.since,
            "feature": args.feature,
            "traffic": traffic.label(),
            "stages": rows,
            "sampling": sampling,
            "quality": quality,
            "unavailable": {section: error for section, error in unavailable.items() if error},
        }
        print(json.dumps(document, default=str))
        return 0
    from ragmon.sinks.kept_share import format_kept_share

    # Say which traffic this is: evaluation runs are kept out of production figures, and how to see them.
    aside = "; evaluation runs: --eval or --eval-run NAME" if traffic.is_production else ""
    print(f"traffic: {traffic.label()}{aside}")
    print(format_report(rows))
    print(f"\ntail sampler: unavailable ({sampling_error})" if sampling is None else "\n" + format_kept_share(sampling))
    print(f"\njudged quality: unavailable ({quality_error})" if quality is None else "\n" + format_quality(quality))
    return 0


def _kept_share(args: argparse.Namespace, traffic: Any) -> tuple[dict[str, Any] | None, str]:
    """What the tail sampler kept over the same window, by reason (read like the quality section)."""
    import time

    from ragmon.sinks.kept_share import kept_share_sql, summarise

    end_s = int(time.time())
    sql, sql_params = kept_share_sql(end_s - int(args.since), end_s, args.feature, traffic=traffic)
    try:
        return summarise(_read(args, "query", sql=sql, sql_params=sql_params)), ""
    except CommandError as exc:
        return None, str(exc)


def _quality(args: argparse.Namespace, traffic: Any) -> tuple[list[dict[str, Any]] | None, str]:
    """Judged quality over the same window, read with the query path (a running agent's API too). A store or
    agent that cannot answer it (older schema, no scores table) costs this section, never the report."""
    import time

    from ragmon.sinks.quality import assemble_quality, quality_sql

    end_s = int(time.time())
    sql, sql_params = quality_sql(end_s - int(args.since), end_s, args.feature, traffic=traffic)
    try:
        return assemble_quality(_read(args, "query", sql=sql, sql_params=sql_params)), ""
    except CommandError as exc:
        return None, str(exc)


def format_quality(rows: list[dict[str, Any]]) -> str:
    """Per feature, day, metric and judge version: the mean over kept traces and the mean weighted back to all
    traffic (1 / inclusion probability), each with its 95 % interval."""
    if not rows:
        return "judged quality: no scores in this window"
    headers = ("feature", "day", "metric", "judge", "ok/judged", "kept mean [95% CI]", "all traffic [95% CI]", "flags")
    table = [headers]
    for row in rows:
        weighted = row["weighted"]
        flags = []
        if row["refusals"]:
            flags.append(f"{row['refusals']} refusal")
        if row["unparseable"]:
            flags.append(f"{row['unparseable']} unparseable")
        if row["unknown_weight"]:
            flags.append(f"{row['unknown_weight']} without weight")
        table.append(
            (
                row["feature"],
                row["day"],
                row["metric"],
                row["judge_version"],
                f"{row['ok']}/{row['judged']}",
                _estimate(row["kept"]),
                _estimate(weighted) + (f" ≈{weighted['traffic']:.0f} traces" if weighted["mean"] is not None else ""),
                ", ".join(flags) or "-",
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    out = ["judged quality (kept traces, and weighted back to all traffic)"]
    out += ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table]
    out.insert(2, "  ".join("-" * width for width in widths))
    return "\n".join(out)


def _estimate(estimate: dict[str, Any]) -> str:
    if estimate["mean"] is None:
        return "-"
    if estimate["ci_low"] is None:
        return f"{estimate['mean']:.3f} [n<2]"
    return f"{estimate['mean']:.3f} [{estimate['ci_low']:.3f}, {estimate['ci_high']:.3f}]"


def format_report(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no spans in this window"
    headers = (
        "feature",
        "stage",
        "requests",
        "errors",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "ttft p95",
        "tokens in/out",
        "cost $",
        "$/request",
    )
    table = [headers]
    for row in rows:
        table.append(
            (
                str(row["feature"]),
                str(row["stage"]),
                str(row["requests"]),
                f"{row['error_rate'] * 100:.1f}%",
                _ms(row["p50_ms"]),
                _ms(row["p95_ms"]),
                _ms(row["p99_ms"]),
                _ms(row.get("ttft_p95_ms")),
                f"{row['input_tokens']}/{row['output_tokens']}",
                "-" if row["cost_usd"] is None else f"{row['cost_usd']:.4f}",
                "-" if row["cost_per_request_usd"] is None else f"{row['cost_per_request_usd']:.6f}",
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    out = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in table]
    out.insert(1, "  ".join("-" * width for width in widths))
    # Per model only where a stage used more than one: elsewhere the row above says it all.
    models = [
        (row["feature"], row["stage"], m) for row in rows if len(row.get("models", [])) > 1 for m in row["models"]
    ]
    if models:
        out.append("")
        out.append("per model: feature / stage / model: requests, p95 ms, cost $")
        for feature, stage, model in models:
            cost = "-" if model.get("cost_usd") is None else f"{model['cost_usd']:.4f}"
            out.append(
                f"  {feature} / {stage} / {model.get('model') or '-'}: {model.get('requests')}, "
                f"{_ms(model.get('p95_ms'))}, {cost}"
            )
    return "\n".join(out)


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}"


# -- schema ------------------------------------------------------------------------------------------------------
def add_schema_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--markdown", action="store_true", help="as the README's Tables section")


def schema(args: argparse.Namespace) -> int:
    from ragmon.sinks.schema_doc import render_markdown, render_text

    print(render_markdown() if args.markdown else render_text(), end="")
    return 0


# -- query -------------------------------------------------------------------------------------------------------
def add_query_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sql", help="a read-only SELECT over the tables `ragmon schema` lists")
    parser.add_argument("--json", action="store_true", help="one JSON object per row, one per line")
    parser.add_argument(
        "--max-rows",
        type=_row_cap,
        default=10_000,
        help=f"print at most this many rows, saying so when the result has more (default 10000, at most {MAX_ROWS})",
    )
    _store_options(parser)


MAX_ROWS = 1_000_000  # a result the agent holds in memory at once to answer


def _row_cap(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_ROWS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_ROWS}")
    return value


def query(args: argparse.Namespace) -> int:
    try:
        rows = _read(args, "query", sql=args.sql, max_rows=args.max_rows)
    except CommandError as exc:
        print(f"ragmon query: {exc}", file=sys.stderr)
        return 2
    more = len(rows) > args.max_rows
    rows = rows[: args.max_rows]
    if args.json:
        for row in rows:
            print(json.dumps(row, default=str))
    elif rows:
        columns = list(rows[0])
        print("\t".join(columns))
        for row in rows:
            print("\t".join("" if row[c] is None else str(row[c]) for c in columns))
    if more:
        print(
            f"ragmon query: the result has more than {args.max_rows} rows; these are the first "
            "(add a LIMIT, aggregate, or raise --max-rows)",
            file=sys.stderr,
        )
    return 0


# -- reading from a store, or from the agent that owns it ----------------------------------------------------------
class CommandError(Exception):
    pass


def _read(args: argparse.Namespace, what: str, **params: Any) -> list[dict[str, Any]]:
    """Rows of `what` ("report", "labelled_scores" or "query": `sql` with its bound `sql_params`) from the store,
    or from the running agent that owns the data directory."""
    from pydantic import ValidationError

    try:
        settings = _settings(args)
    except (ValidationError, ValueError, OSError) as exc:
        raise CommandError(str(exc)) from exc
    api_key = args.api_key or _env_api_key()
    if settings.agent.clickhouse_url:
        return _read_store(settings, what, params)
    from ragmon.agent.agent import DataDirUnavailable, claim_or_find_agent

    try:
        claimed = claim_or_find_agent(Path(settings.agent.data_dir))
    except DataDirUnavailable as exc:
        raise CommandError(str(exc)) from exc
    if isinstance(claimed, str):
        return _ask_agent(claimed, what, params, api_key)
    try:
        return _read_store(settings, what, params)
    finally:
        claimed.release()


def _read_store(settings: Any, what: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    from ragmon.sinks import open_store
    from ragmon.sinks.errors import StoreError

    try:
        store = open_store(settings.agent.clickhouse_url or Path(settings.agent.data_dir) / "chdb")
    except StoreError as exc:
        raise CommandError(str(exc)) from exc
    try:
        if what == "report":
            return store.report(params["since_s"], feature=params.get("feature"), traffic=params["traffic"])
        if what == "labelled_scores":
            return store.labelled_scores(params["since_s"], judge_version=params.get("judge_version"))
        return store.query(
            params["sql"], params.get("sql_params"), max_rows=params.get("max_rows", 10_000), cut_at_max_rows=True
        )
    except StoreError as exc:
        raise CommandError(str(exc)) from exc
    finally:
        store.close()


def _ask_agent(api: str, what: str, params: dict[str, Any], api_key: str | None) -> list[dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if what == "report":
        from urllib.parse import urlencode

        query = {"since_s": params["since_s"], **params["traffic"].to_params()}
        if params.get("feature"):
            query["feature"] = params["feature"]
        query_string = urlencode(query)
        request = urllib.request.Request(f"{api}/api/report?{query_string}", headers=headers)
    elif what == "labelled_scores":
        from urllib.parse import urlencode

        wanted = {"since_s": params["since_s"]}
        if params.get("judge_version") is not None:
            wanted["judge_version"] = params["judge_version"]
        request = urllib.request.Request(f"{api}/api/labels/scored?{urlencode(wanted)}", headers=headers)
    else:
        query_body = {
            "sql": params["sql"],
            "params": params.get("sql_params") or {},  # the values travel bound, as the store would take them
            "max_rows": params.get("max_rows", 10_000),
        }
        body = json.dumps(query_body).encode()
        request = urllib.request.Request(f"{api}/api/query", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            rows: list[dict[str, Any]] = json.loads(response.read())
            return rows
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")
        with contextlib.suppress(ValueError, KeyError, TypeError):  # not our JSON error body: show it raw
            detail = json.loads(detail)["error"]
        raise CommandError(f"the agent answered {exc.code}: {detail}") from exc
    except OSError as exc:
        raise CommandError(f"cannot reach the agent at {api}: {exc}") from exc


def _env_api_key() -> str | None:
    import os

    return os.environ.get("RAGMON_API_KEY") or None
