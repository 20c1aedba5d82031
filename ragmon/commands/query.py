"""`ragmon schema` (the tables `ragmon query` reads) and `ragmon query` (read-only SQL over them)."""

from __future__ import annotations

import argparse
import json
import sys

from ragmon.commands.common import CommandError, add_store_options, read_rows


def add_schema_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--markdown", action="store_true", help="as docs/tables.md")


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
    add_store_options(parser)


MAX_ROWS = 1_000_000  # a result the agent holds in memory at once to answer


def _row_cap(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_ROWS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_ROWS}")
    return value


def query(args: argparse.Namespace) -> int:
    try:
        rows = read_rows(args, "query", sql=args.sql, max_rows=args.max_rows)
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
