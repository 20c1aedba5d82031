"""Who owns a data directory: the running agent holds an exclusive lock on its lock file and says where its API
listens beside it, so a command that reads the directory (report, query, alerts, judge, backeval) either takes the
lock and opens the embedded store itself, or asks that agent (an embedded store has one owner).
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import IO, Any

from ragmon.data_dir import AGENT_FILE, AGENT_LOCK_FILE, embedded_store


class DataDirInUse(RuntimeError):
    """Another process owns the data directory."""


class DataDirLock:
    """An exclusive, process-lifetime lock on a data directory, with the owner's API address beside it."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        handle = open(self.data_dir / AGENT_LOCK_FILE, "a+")  # noqa: SIM115 - held for the process lifetime
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise DataDirInUse(f"{self.data_dir} is in use by {describe_owner(read_owner(self.data_dir))}") from None
        self._file = handle

    def publish(self, info: dict[str, Any]) -> None:
        tmp = self.data_dir / f"{AGENT_FILE}.tmp"
        tmp.write_text(json.dumps({"pid": os.getpid(), **info}))
        os.replace(tmp, self.data_dir / AGENT_FILE)

    def release(self) -> None:
        if self._file is not None:
            (self.data_dir / AGENT_FILE).unlink(missing_ok=True)
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def read_owner(data_dir: Path) -> dict[str, Any] | None:
    try:
        loaded = json.loads((data_dir / AGENT_FILE).read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def describe_owner(owner: dict[str, Any] | None) -> str:
    """'ragmon process 1234 (dashboard and API at http://…)', for messages about a taken data directory."""
    if not owner:
        return "another ragmon process (it has not said where its API listens yet)"
    described = f"ragmon process {owner.get('pid', '?')}"
    if owner.get("api"):
        described += f" (dashboard and API at {owner['api']})"
    return described + "; stop it or pass another --data-dir"


class DataDirUnavailable(RuntimeError):
    """A data directory with no store in it, or owned by an agent that cannot be asked."""


def claim_or_find_agent(data_dir: Path) -> DataDirLock | str:
    """For commands that read a data directory (report, query, alerts, backeval): its lock when no agent runs
    there — read the store directly, then release it — or else the running agent's API address, to ask instead
    (an embedded store has one owner)."""
    if not embedded_store(data_dir).exists() and read_owner(data_dir) is None:
        raise DataDirUnavailable(f"no ragmon store in {data_dir} (run `ragmon serve` or `ragmon demo` first)")
    lock = DataDirLock(data_dir)
    try:
        lock.acquire()
    except DataDirInUse:
        owner = read_owner(data_dir)
        if not owner or "api" not in owner:
            raise DataDirUnavailable(f"{data_dir} is owned by a running agent that published no API address") from None
        return str(owner["api"])
    return lock
