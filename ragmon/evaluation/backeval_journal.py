"""The run journal of a back-evaluation: what has been scored, so an interrupted run resumes where it stopped.

One JSONL file per run name (``ragmon-runs/NAME.journal.jsonl``), appended and fsynced one line per scored trace,
so a crash loses at most the traces in flight — never a recorded one, and never records one twice:

    {"kind": "header", "run": "nightly", "judge_version": "llm:gpt-4o-mini", "metrics": ["faithfulness", ...]}
    {"kind": "trace", "key": "t/4bf9…", "tenant": "t", "trace_id": "4bf9…", "row_id": "q07", "cost_usd": 0.0012,
     "rows": [{score row}, ...]}
    {"kind": "spend", "key": "t/77aa…", "cost_usd": 0.0004}     # paid for, then discarded (budget hit mid-trace)

A trace is done when its ``trace`` line is in the file; re-running with the same name skips it. A torn last line
(the process died mid-write) is ignored and overwritten by the next append. The file is locked (``flock``) while a
run holds it, so two processes cannot resume the same run at once. The header pins the judge version and the
metrics: resuming with another judge would mix two judges in one run, so it is refused.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ragmon.evaluation.errors import EvalInputError


@dataclass(frozen=True)
class JournalEntry:
    key: str
    tenant: str
    trace_id: str
    row_id: str
    cost_usd: float
    rows: tuple[dict[str, Any], ...]


@dataclass
class JournalState:
    entries: dict[str, JournalEntry] = field(default_factory=dict)
    discarded_spend_usd: float = 0.0
    torn_lines: int = 0

    @property
    def spent_usd(self) -> float:
        return sum(e.cost_usd for e in self.entries.values()) + self.discarded_spend_usd


class RunJournal:
    def __init__(self, path: str | Path, *, run: str, judge_version: str, metrics: Sequence[str]) -> None:
        self.path = Path(path)
        self.header = {"kind": "header", "run": run, "judge_version": judge_version, "metrics": list(metrics)}
        self._file: IO[str] | None = None
        self._seen_header = False
        self.state = JournalState()

    def open(self) -> JournalState:
        """Lock the journal, read what is done, check the header (or write it for a new run)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held until close()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise EvalInputError(f"{self.path} is in use by another back-evaluation of the same run") from None
        self._file = handle
        handle.seek(0)
        text = handle.read()
        self._seen_header = False
        try:
            self.state = self._parse(text)
        except BaseException:
            self.close()  # a refused resume must not keep the run locked
            raise
        if text and not text.endswith("\n"):
            # A torn last line: end it, so the next record starts on a line of its own (the torn one is skipped).
            handle.write("\n")
            handle.flush()
        if not self._seen_header:
            self._write_line(self.header)
        return self.state

    def _parse(self, text: str) -> JournalState:
        state = JournalState()
        lines = text.splitlines()
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                state.torn_lines += 1  # only a crash mid-write makes one; the trace is simply not done
                continue
            kind = record.get("kind") if isinstance(record, dict) else None
            if kind == "header":
                self._check_header(record, number)
                self._seen_header = True
            elif kind == "trace":
                entry = JournalEntry(
                    key=str(record["key"]),
                    tenant=str(record["tenant"]),
                    trace_id=str(record["trace_id"]),
                    row_id=str(record.get("row_id") or ""),
                    cost_usd=float(record.get("cost_usd") or 0.0),
                    rows=tuple(record["rows"]),
                )
                state.entries.setdefault(entry.key, entry)
            elif kind == "spend":
                state.discarded_spend_usd += float(record.get("cost_usd") or 0.0)
        return state

    def _check_header(self, record: dict[str, Any], number: int) -> None:
        mine = self.header
        if record.get("judge_version") != mine["judge_version"] or record.get("metrics") != mine["metrics"]:
            raise EvalInputError(
                f"{self.path}:{number}: run {record.get('run')!r} was started with judge "
                f"{record.get('judge_version')!r} and metrics {record.get('metrics')!r}; this one uses "
                f"{mine['judge_version']!r} and {mine['metrics']!r}. Pick another --name for a new run."
            )

    def _write_line(self, record: dict[str, Any]) -> None:
        handle = self._file
        if handle is None:
            raise RuntimeError("the journal is not open")
        handle.write(json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())

    def record_trace(
        self, *, key: str, tenant: str, trace_id: str, row_id: str, cost_usd: float, rows: Sequence[dict[str, Any]]
    ) -> None:
        record = {
            "kind": "trace",
            "key": key,
            "tenant": tenant,
            "trace_id": trace_id,
            "row_id": row_id,
            "cost_usd": cost_usd,
            "rows": list(rows),
        }
        self._write_line(record)
        self.state.entries.setdefault(key, JournalEntry(key, tenant, trace_id, row_id, cost_usd, tuple(rows)))

    def record_discarded_spend(self, key: str, cost_usd: float) -> None:
        if cost_usd > 0:
            self._write_line({"kind": "spend", "key": key, "cost_usd": cost_usd})
            self.state.discarded_spend_usd += cost_usd

    def close(self) -> None:
        handle, self._file = self._file, None
        if handle is not None:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
