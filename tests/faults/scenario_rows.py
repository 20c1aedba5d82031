"""One row of figures per fault scenario, printed as a table at the end of the run by `tests/faults/conftest.py`.

Imported as ``tests.faults.scenario_rows`` everywhere (also from tests/agent), so there is one registry per run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ScenarioRow:
    scenario: str
    unit: str  # what acknowledged / stored / lost count: "spans" or "traces"
    tried: int  # requests sent (OTLP exports, or judge calls for judge scenarios)
    faults: int  # faults injected (failed replies, kills, clock jumps, outage refusals)
    acknowledged: int  # spans acknowledged by the agent, or traces queued for judging
    stored: int  # distinct spans / judged-or-failed traces found in the store at the end
    lost: int
    duplicates: int  # extra copies visible to a query (0 is the guarantee)
    peak_rss_mb: float | None = None  # of the process under test, where it is a process of its own
    note: str = ""


_rows: list[ScenarioRow] = []
_lock = threading.Lock()


def record(row: ScenarioRow) -> None:
    with _lock:
        _rows.append(row)


def rows() -> list[ScenarioRow]:
    with _lock:
        return list(_rows)


def rss_mb(pid: int) -> float | None:
    """Resident set size of a live process (Linux /proc), None when it is gone or unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def table(rows: list[ScenarioRow]) -> list[str]:
    header = ("scenario", "unit", "tried", "faults", "acked", "stored", "lost", "dups", "peak RSS MB", "note")
    body = [
        (
            r.scenario,
            r.unit,
            str(r.tried),
            str(r.faults),
            str(r.acknowledged),
            str(r.stored),
            str(r.lost),
            str(r.duplicates),
            "-" if r.peak_rss_mb is None else f"{r.peak_rss_mb:.0f}",
            r.note,
        )
        for r in rows
    ]
    widths = [max(len(cells[i]) for cells in (header, *body)) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip() for cells in (header, *body)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines
