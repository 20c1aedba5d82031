"""`python -m ragmon.demo`: the same as `ragmon demo`, for when the CLI entry point is not installed."""

from __future__ import annotations

import argparse
import sys

from ragmon.demo.command import __doc__ as command_doc
from ragmon.demo.command import add_arguments, main

parser = argparse.ArgumentParser(prog="python -m ragmon.demo", description=(command_doc or "").splitlines()[0])
add_arguments(parser)
sys.exit(main(parser.parse_args()))
