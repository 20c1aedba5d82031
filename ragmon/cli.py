"""The `ragmon` command. Each subcommand imports what it needs when it runs, so `import ragmon` stays light."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ragmon.version import __version__

Command = Callable[[argparse.Namespace], int]


def _demo_command(parser: argparse.ArgumentParser) -> Command:
    from ragmon.demo import run

    run.add_arguments(parser)
    return run.main


def _agent_command(name: str) -> Callable[[argparse.ArgumentParser], Command]:
    def build(parser: argparse.ArgumentParser) -> Command:
        from ragmon.agent import commands

        getattr(commands, f"add_{name}_arguments")(parser)
        run: Command = getattr(commands, name)
        return run

    return build


def _migrate_command(parser: argparse.ArgumentParser) -> Command:
    from ragmon.agent import migrate

    migrate.add_migrate_arguments(parser)
    return migrate.migrate


def _alerts_command(parser: argparse.ArgumentParser) -> Command:
    from ragmon.agent.drift import cli

    cli.add_alerts_arguments(parser)
    return cli.alerts


def _calibrate_command(parser: argparse.ArgumentParser) -> Command:
    from judges import cli

    cli.add_calibrate_arguments(parser)
    return cli.calibrate


def _judge_command(parser: argparse.ArgumentParser) -> Command:
    from judges import cli

    cli.add_judge_arguments(parser)
    return cli.judge


def _eval_command(parser: argparse.ArgumentParser) -> Command:
    from ragmon.evaluation import cli

    cli.add_eval_arguments(parser)
    return cli.eval_command


def _gate_command(parser: argparse.ArgumentParser) -> Command:
    from ragmon.evaluation import cli

    cli.add_gate_arguments(parser)
    return cli.gate


# name -> (help, builder that adds the subcommand's arguments and returns its function)
_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], Command]]] = {
    "demo": ("run the instrumented sample RAG app and show what ragmon records", _demo_command),
    "serve": ("run the agent: OTLP receivers, tail sampler, ClickHouse store", _agent_command("serve")),
    "report": ("p50/p95/p99 latency, errors, tokens and cost per feature and stage", _agent_command("report")),
    "query": ("run read-only SQL against the store", _agent_command("query")),
    "migrate": ("create or upgrade the store's schema; --cluster NAME for a ClickHouse cluster", _migrate_command),
    "alerts": ("open and recent drift alerts", _alerts_command),
    "eval": ("offline evaluation: retrieval metrics equal to trec_eval", _eval_command),
    "gate": ("compare two evaluation runs; exit 1 on a regression, 2 on bad input", _gate_command),
    "judge": ("run a judge worker over the queue of kept traces (scale-out: several may share a queue)",
              _judge_command),
    "calibrate": ("agreement of a judge's faithfulness verdicts with human labels", _calibrate_command),
}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Command]]:
    parser = argparse.ArgumentParser(prog="ragmon", description="Monitoring for RAG apps, built on OpenTelemetry.")
    parser.add_argument("--version", action="version", version=f"ragmon {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    handlers: dict[str, Command] = {}
    for name, (help_text, builder) in _COMMANDS.items():
        handlers[name] = builder(subparsers.add_parser(name, help=help_text, description=help_text))
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
