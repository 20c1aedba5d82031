"""Shared fakes for the worker tests: payload sources, score sinks and a scripted-server responder.

They are real classes (not mocks) so the kill -9 subprocess (`worker_proc.py`) uses the same ones: `JsonlSink`
appends each written row to a file, which survives the writer's death.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragmon.judges.queue import JudgeQueue, Kept
from ragmon.judges.types import RagSample

from ragmon.testing import Completion

CLAIMS = {"refusal": False, "claims": ["The Eiffel Tower was completed in 1889.", "The Eiffel Tower is 300 m tall."]}
VERDICTS = {
    "verdicts": [
        {"claim": 0, "verdict": "supported", "reason": "1889"},
        {"claim": 1, "verdict": "contradicted", "reason": "330 m"},
    ]
}
CLAIMS_TOKENS = (300, 40)
VERDICTS_TOKENS = (500, 60)


def sample(i: int = 0) -> RagSample:
    return RagSample(
        question=f"When was the Eiffel Tower completed and how tall is it? ({i})",
        answer="It was completed in 1889 [1]. It is 300 metres tall.",
        passages=[f"The Eiffel Tower, completed in 1889, is 330 metres tall. (source {i})"],
    )


def trace_id(i: int) -> str:
    return f"{i + 1:032x}"


def faithfulness_responder(body: Any, *, delay_s: float = 0.0) -> Completion:
    """Answers each faithfulness step by what it asks (claims or verdicts), so concurrent traces cannot take
    each other's scripted replies."""
    asks_verdicts = '"verdicts"' in body["messages"][0]["content"]
    document, (prompt_tokens, completion_tokens) = (
        (VERDICTS, VERDICTS_TOKENS) if asks_verdicts else (CLAIMS, CLAIMS_TOKENS)
    )
    return Completion(
        json.dumps(document), prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, delay_s=delay_s
    )


class DictPayloads:
    """`PayloadSource` over a dict; a trace not in it has no payload. `fail_times` makes the first N calls raise
    `error` (by default a connection refused: the store down, a fault that passes)."""

    def __init__(
        self,
        payloads: Mapping[tuple[str, str], RagSample],
        *,
        fail_times: int = 0,
        error: Exception | None = None,
    ) -> None:
        self.payloads = dict(payloads)
        self.fail_times = fail_times
        self.error = error or ConnectionRefusedError("store unavailable")
        self.calls = 0

    async def payload(self, tenant: str, trace_id: str) -> RagSample | None:
        self.calls += 1
        if self.calls <= self.fail_times:
            raise self.error
        return self.payloads.get((tenant, trace_id))


class ListSink:
    """`ScoreSink` keeping rows in memory; `fail_times` makes the first N writes raise."""

    def __init__(self, *, fail_times: int = 0) -> None:
        self.rows: list[dict[str, Any]] = []
        self.writes = 0
        self.fail_times = fail_times
        self._lock = threading.Lock()

    def write(self, rows: list[dict[str, Any]]) -> None:
        with self._lock:
            self.writes += 1
            if self.writes <= self.fail_times:
                raise ConnectionError("store unavailable")
            self.rows.extend(json.loads(json.dumps(rows)))


class JsonlSink:
    """`ScoreSink` appending one JSON line per row (flushed: the page cache outlives a kill -9)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, rows: list[dict[str, Any]]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, sort_keys=True) + "\n")
            f.flush()

    @staticmethod
    def read(path: Path) -> list[dict[str, Any]]:
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class FullDiskQueue(JudgeQueue):
    """A JudgeQueue whose file can be made full: `fill()` caps it at its current size (`PRAGMA max_page_count`, per
    connection) and fills what room is left, after which SQLite answers writes that need a page with the real
    SQLITE_FULL, "database or disk is full" — what a full disk gives. `make_room()` lifts the cap."""

    def fill(self) -> None:
        with self._lock:
            pages = self._db.execute("PRAGMA page_count").fetchone()[0]
            self._db.execute(f"PRAGMA max_page_count = {int(pages)}")
        filler = itertools.count()
        try:
            while True:  # items of a judge version no worker takes: they only take room
                self.enqueue([Kept("filler", f"{next(filler):032x}", feature="f" * 200)], "filler")
        except sqlite3.OperationalError as exc:
            assert "database or disk is full" in str(exc), exc

    def make_room(self) -> None:
        with self._lock:
            self._db.execute("PRAGMA max_page_count = 1073741823")
