"""The `ragmon` command. Each subcommand imports what it needs when it runs, so `import ragmon` stays light."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from ragmon.version import __version__

Command = Callable[[argparse.Namespace], int]


def _lazy(module: str, add_arguments: str, run: str) -> Callable[[argparse.ArgumentParser], Command]:
    """A builder that imports `module` only when the parser is built, adds its arguments, returns its command."""

    def build(parser: argparse.ArgumentParser) -> Command:
        loaded = importlib.import_module(module)
        getattr(loaded, add_arguments)(parser)
        command: Command = getattr(loaded, run)
        return command

    return build


# name -> (help, builder that adds the subcommand's arguments and returns its function)
_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], Command]]] = {
    "demo": (
        "run the instrumented sample RAG app through an embedded agent and report",
        _lazy("ragmon.demo.command", "add_arguments", "main"),
    ),
    "serve": (
        "run the agent: OTLP receivers, tail sampler, ClickHouse store",
        _lazy("ragmon.commands.serve", "add_serve_arguments", "serve"),
    ),
    "check": (
        "validate a settings file as `serve` would at start-up and print what it means, starting nothing",
        _lazy("ragmon.commands.check", "add_check_arguments", "check"),
    ),
    "report": (
        "p50/p95/p99 latency, errors, tokens and cost per feature and stage",
        _lazy("ragmon.commands.report", "add_report_arguments", "report"),
    ),
    "query": ("run read-only SQL against the store", _lazy("ragmon.commands.query", "add_query_arguments", "query")),
    "schema": (
        "the tables and columns `ragmon query` reads, with notes and an example each",
        _lazy("ragmon.commands.query", "add_schema_arguments", "schema"),
    ),
    "migrate": (
        "create or upgrade the store's schema; --cluster NAME for a ClickHouse cluster",
        _lazy("ragmon.commands.migrate", "add_migrate_arguments", "migrate"),
    ),
    "compare": (
        "a release against the previous one: overall and per recurring question, with intervals",
        _lazy("ragmon.commands.compare", "add_compare_arguments", "compare"),
    ),
    "alerts": ("open and recent drift alerts", _lazy("ragmon.commands.alerts", "add_alerts_arguments", "alerts")),
    "eval": (
        "offline evaluation: retrieval metrics equal to trec_eval; drive an app over a labelled dataset (eval run)",
        _lazy("ragmon.evaluation.cli", "add_eval_arguments", "eval_command"),
    ),
    "backeval": (
        "re-score stored kept traces with a judge as a named run (cost estimate, budget, resumable)",
        _lazy("ragmon.evaluation.backeval_cli", "add_backeval_arguments", "backeval"),
    ),
    "gate": (
        "compare two evaluation runs; exit 1 on a regression, 2 on bad input",
        _lazy("ragmon.evaluation.gate_cli", "add_gate_arguments", "gate"),
    ),
    "judge": (
        "run a judge worker over the queue of kept traces (scale-out: several may share a queue)",
        _lazy("ragmon.commands.judge", "add_judge_arguments", "judge"),
    ),
    "calibrate": (
        "agreement of a judge's faithfulness verdicts with human labels",
        _lazy("ragmon.commands.judge", "add_calibrate_arguments", "calibrate"),
    ),
}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, tuple[argparse.ArgumentParser, Command]]]:
    parser = argparse.ArgumentParser(prog="ragmon", description="Monitoring for RAG apps, built on OpenTelemetry.")
    parser.add_argument("--version", action="version", version=f"ragmon {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands: dict[str, tuple[argparse.ArgumentParser, Command]] = {}
    for name, (help_text, builder) in _COMMANDS.items():
        subparser = subparsers.add_parser(name, help=help_text, description=help_text)
        commands[name] = (subparser, builder(subparser))
    return parser, commands


def main(argv: Sequence[str] | None = None) -> int:
    parser, commands = build_parser()
    # Known arguments first: an unknown flag is then reported by its subcommand's parser, with that command's usage
    # (argparse's top-level `parse_args` answers a mistyped `ragmon report --sinse` with `ragmon`'s usage).
    args, unknown = parser.parse_known_args(argv)
    if args.command is None:
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        parser.print_help()
        return 2
    subparser, command = commands[args.command]
    if unknown:
        subparser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return command(args)
    except BrokenPipeError:
        # the reader went away (`ragmon report | head -5`): what it read was what it wanted. Point stdout at
        # /dev/null so the interpreter's final flush does not raise again, and end quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
