"""What the commands share: the store options, their settings, the traffic they read, and reading from the store
or from the running agent that owns it (`read_rows`: a named read of the store, or a user's query).

Argument definitions only import the standard library; each command imports the agent's parts when it runs, so
`ragmon --help` and `ragmon demo` never load the store engine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration_s(text: str) -> float:
    """'90s', '30m', '1h', '7d', '2w' or plain seconds."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"expected a duration like 30m, 1h or 7d, got {text!r}")
    seconds = float(match.group(1)) * _UNIT_S[match.group(2) or "s"]
    if seconds <= 0:  # an empty window reads nothing and says so as "no data", which misleads
        raise argparse.ArgumentTypeError(f"a window must be longer than zero, got {text!r}")
    return seconds


def add_store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help="embedded store directory (default ./.ragmon)")
    parser.add_argument("--clickhouse-url", help="a ClickHouse server instead of the embedded store")
    parser.add_argument("--config", type=Path, help="settings file (TOML or JSON)")
    parser.add_argument("--api-key", help="API key, when the agent requires one (or RAGMON_API_KEY)")


def command_settings(args: argparse.Namespace, **agent: Any) -> Any:
    from ragmon.settings import load_settings

    overrides: dict[str, Any] = {k: v for k, v in agent.items() if v is not None}
    if args.data_dir is not None:
        overrides["data_dir"] = args.data_dir
    if args.clickhouse_url is not None:
        overrides["clickhouse_url"] = args.clickhouse_url
    return load_settings({"agent": overrides}, config_file=args.config)


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


# -- reading from a store, or from the agent that owns it ----------------------------------------------------------
class CommandError(Exception):
    pass


def read_rows(args: argparse.Namespace, what: str, **params: Any) -> Any:
    """What `what` answers from the store, or from the running agent that owns the data directory: a named read
    (`ragmon.sinks.named_reads`: "report", "kept_share", "quality", "releases", "alerts", "production_minutes",
    "labelled_scores") with its parameters, checked here first; or "query", the rows of a user's `sql` (with its bound
    `sql_params`, at most `max_rows`)."""
    from pydantic import ValidationError

    if what != "query":
        params = checked_read(what, params)
    try:
        settings = command_settings(args)
    except (ValidationError, ValueError, OSError) as exc:
        raise CommandError(str(exc)) from exc
    api_key = args.api_key or _env_api_key()
    if settings.agent.clickhouse_url:
        return _read_store(settings, what, params)
    from ragmon.agent import DataDirUnavailable, claim_or_find_agent

    try:
        claimed = claim_or_find_agent(Path(settings.agent.data_dir))
    except DataDirUnavailable as exc:
        raise CommandError(str(exc)) from exc
    if isinstance(claimed, str):
        return ask_agent(claimed, what, params, api_key)
    try:
        return _read_store(settings, what, params)
    finally:
        claimed.release()


def checked_read(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """The named read's values as the agent would read them (a bad or unknown one is a CommandError)."""
    from ragmon.sinks.named_reads import BadParameter, UnknownRead, named_read

    try:
        return named_read(name).check(params)
    except (BadParameter, UnknownRead) as exc:
        raise CommandError(str(exc)) from exc


def _read_store(settings: Any, what: str, params: dict[str, Any]) -> Any:
    from ragmon.data_dir import embedded_store
    from ragmon.sinks import open_store
    from ragmon.sinks.errors import StoreError
    from ragmon.sinks.named_reads import run_read

    try:
        store = open_store(settings.agent.clickhouse_url or embedded_store(settings.agent.data_dir))
    except StoreError as exc:
        raise CommandError(str(exc)) from exc
    try:
        if what != "query":
            return run_read(store, what, params)
        return store.query(
            params["sql"], params.get("sql_params"), max_rows=params.get("max_rows", 10_000), cut_at_max_rows=True
        )
    except StoreError as exc:
        raise CommandError(str(exc)) from exc
    finally:
        store.close()


def ask_agent(api: str, what: str, params: dict[str, Any], api_key: str | None) -> Any:
    """`read_rows` through the agent at `api`: a named read as `GET /api/read/<what>`, a query as `POST /api/query`."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if what != "query":
        from urllib.parse import quote, urlencode

        from ragmon.sinks.named_reads import BadParameter, named_read

        try:
            query_string = urlencode(named_read(what).encode(params))
        except BadParameter as exc:
            raise CommandError(str(exc)) from exc
        request = urllib.request.Request(f"{api}/api/read/{quote(what)}?{query_string}", headers=headers)
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
            return json.loads(response.read())
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
