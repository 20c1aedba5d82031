"""The `ragmon` subcommands built on the agent's parts: serve, check, report, query, schema, migrate, alerts, judge and
calibrate, one module each (`ragmon.cli` names them), and what the other commands (demo, evaluation) reuse.

Modules here import only the standard library at their top; each command imports the parts it drives when it runs,
so building `ragmon --help` loads nothing heavy.
"""

from ragmon.commands.alerts import collapse_alert_rows, format_alerts
from ragmon.commands.common import CommandError, chosen_traffic, parse_duration_s
from ragmon.commands.report import format_quality, format_report, format_sampler_counts

__all__ = [
    "CommandError",
    "chosen_traffic",
    "collapse_alert_rows",
    "format_alerts",
    "format_quality",
    "format_report",
    "format_sampler_counts",
    "parse_duration_s",
]
