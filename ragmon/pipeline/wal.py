"""The write-ahead log: an OTLP request is acknowledged only after its body is in this log.

Layout: numbered segment files `wal-00000001.log`, each a sequence of records

    magic (2 bytes "RW") | tenant length (u16) | body length (u32) | crc32 of tenant+body (u32) | tenant | body

A record's `Position` is (segment, offset of its end). Cursors — how far the store and the sampler have safely
consumed — live in small files replaced atomically; segments wholly behind every cursor are deleted.

Durability by `fsync` policy (what an acknowledged request survives):
- "always": fsync before acknowledging (group commit: concurrent appenders share one fsync) — survives process
  crash, kernel crash and power loss.
- "interval": written to the OS before acknowledging, fsynced every `fsync_interval_ms` — survives a process crash
  (kill -9); a power loss can lose up to the interval.
- "never": written to the OS before acknowledging; the OS flushes when it likes — survives a process crash.

A torn record at the tail (crash mid-write) is cut off at recovery and counted; the log never replays garbage.
When the log holds `max_bytes`, `append` raises `WalFull` and the receiver answers 503 with Retry-After.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal, NamedTuple

FsyncPolicy = Literal["always", "interval", "never"]

_MAGIC = b"RW"
_HEADER = struct.Struct("<2sHII")  # magic, tenant length, body length, crc32
_SEGMENT_NAME = re.compile(r"^wal-(\d{8})\.log$")


class WalError(Exception):
    """The log cannot take the record (I/O error): the request must not be acknowledged."""


class WalFull(WalError):
    """The log is at its size cap or the disk is full: back-pressure the sender."""


class Position(NamedTuple):
    segment: int
    offset: int  # byte offset just after the record

    def token(self) -> str:
        return f"{self.segment:08d}:{self.offset}"


@dataclass(frozen=True, slots=True)
class Record:
    position: Position
    tenant: str
    body: bytes


class WriteAheadLog:
    def __init__(
        self,
        directory: Path,
        *,
        fsync: FsyncPolicy = "interval",
        fsync_interval_ms: int = 50,
        segment_max_bytes: int = 64 * 1024 * 1024,
        max_bytes: int = 2 * 1024 * 1024 * 1024,
    ) -> None:
        if fsync not in ("always", "interval", "never"):
            raise ValueError(f"fsync must be always, interval or never; got {fsync!r}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.fsync_policy = fsync
        self._segment_max = segment_max_bytes
        self._max_bytes = max_bytes
        self._lock = threading.Lock()  # appends
        self._sync_lock = threading.Lock()  # fsyncs (group commit)
        self.torn_records = 0
        self.appended = 0
        self.refused_full = 0
        self._synced = Position(0, 0)
        self._recover()
        self._stop = threading.Event()
        self._syncer: threading.Thread | None = None
        if fsync == "interval":
            self._syncer = threading.Thread(
                target=self._sync_periodically, args=(fsync_interval_ms / 1000,), name="ragmon-wal-fsync", daemon=True
            )
            self._syncer.start()

    # -- recovery ------------------------------------------------------------------------------------------
    def _segments(self) -> list[int]:
        found = (_SEGMENT_NAME.match(p.name) for p in self.directory.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def _path(self, segment: int) -> Path:
        return self.directory / f"wal-{segment:08d}.log"

    def _recover(self) -> None:
        segments = self._segments()
        self._current = segments[-1] if segments else 1
        path = self._path(self._current)
        valid_end = self._valid_length(path) if path.exists() else 0
        if path.exists() and path.stat().st_size > valid_end:
            self.torn_records += 1
            with open(path, "r+b") as f:
                f.truncate(valid_end)
        self._file = open(path, "ab")  # noqa: SIM115 - held open for the log's lifetime
        self._size = valid_end
        self._bytes_total = sum(self._path(s).stat().st_size for s in self._segments())
        self._synced = Position(self._current, valid_end)

    @staticmethod
    def _valid_length(path: Path) -> int:
        end = 0
        for _, offset in _scan(path):
            end = offset
        return end

    # -- appending -----------------------------------------------------------------------------------------
    def append(self, body: bytes, tenant: str = "", on_written: Callable[[Position], None] | None = None) -> Position:
        """Write one record; return once it is as durable as the fsync policy promises.

        `on_written(position)` runs under the log's lock right after the write, so callers see records in log
        order even when appends race; whether the record is durable yet is `durable_end`'s business.
        """
        tenant_bytes = tenant.encode()
        crc = zlib.crc32(body, zlib.crc32(tenant_bytes))
        record = _HEADER.pack(_MAGIC, len(tenant_bytes), len(body), crc) + tenant_bytes + body
        with self._lock:
            if self._bytes_total + len(record) > self._max_bytes:
                self.refused_full += 1
                raise WalFull(f"write-ahead log is full ({self._bytes_total} of {self._max_bytes} bytes)")
            if self._size and self._size + len(record) > self._segment_max:
                self._roll()
            try:
                self._file.write(record)
                self._file.flush()  # into the OS: survives our own crash from here on
            except OSError as exc:
                self._repair_after_failed_write()
                if exc.errno == 28:  # ENOSPC
                    self.refused_full += 1
                    raise WalFull(f"disk full writing the write-ahead log: {exc}") from exc
                raise WalError(f"cannot write the write-ahead log: {exc}") from exc
            self._size += len(record)
            self._bytes_total += len(record)
            self.appended += 1
            position = Position(self._current, self._size)
            if on_written is not None:
                on_written(position)
        if self.fsync_policy == "always":
            self._sync_to(position)
        return position

    def _repair_after_failed_write(self) -> None:
        """A partial write leaves a torn record; cut it so later records stay readable."""
        with contextlib.suppress(OSError):
            self._file.close()
        with open(self._path(self._current), "r+b") as f:
            f.truncate(self._size)
        self._file = open(self._path(self._current), "ab")  # noqa: SIM115

    def _roll(self) -> None:
        self._fsync_file()
        self._file.close()
        self._current += 1
        self._file = open(self._path(self._current), "ab")  # noqa: SIM115
        self._size = 0

    def _sync_to(self, position: Position) -> None:
        with self._sync_lock:
            if self._synced >= position:
                return  # another appender's fsync covered us: group commit
            with self._lock:
                target = Position(self._current, self._size)
            self._fsync_file()
            self._synced = target

    def _fsync_file(self) -> None:
        try:
            os.fsync(self._file.fileno())
        except (OSError, ValueError) as exc:
            raise WalError(f"cannot fsync the write-ahead log: {exc}") from exc

    def _sync_periodically(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                with self._lock:
                    position = Position(self._current, self._size)
                if position > self._synced:
                    self._sync_to(position)
            except WalError:
                pass  # counted by the next append failing; the thread must keep running

    # -- reading and trimming ------------------------------------------------------------------------------
    def replay(self, after: Position | None = None) -> Iterator[Record]:
        """Every record after `after` (all records when None), oldest first."""
        for segment in self._segments():
            if after is not None and segment < after.segment:
                continue
            path = self._path(segment)
            for (tenant, body), offset in _scan(path):
                if after is not None and (segment, offset) <= after:
                    continue
                yield Record(Position(segment, offset), tenant, body)

    def read_after(self, after: Position | None, count: int) -> list[Record]:
        """The `count` intact records that follow `after` (from the first record when None), read from where
        `after` ends rather than by rescanning its segment: how the store writer gets back the bodies it did not
        keep in memory. Fewer come back only if the log ends first."""
        out: list[Record] = []
        for segment in self._segments():
            if after is not None and segment < after.segment:
                continue
            offset = after.offset if after is not None and segment == after.segment else 0
            with open(self._path(segment), "rb") as f:
                f.seek(offset)
                while len(out) < count:
                    record = _read_record(f)
                    if record is None:
                        break
                    (tenant, body), length = record
                    offset += length
                    out.append(Record(Position(segment, offset), tenant, body))
            if len(out) == count:
                break
        return out

    def trim(self, safe: Position) -> int:
        """Delete segments wholly at or before `safe` (every cursor is past them). Returns segments deleted."""
        deleted = 0
        for segment in self._segments():
            if segment >= self._current or segment > safe.segment:
                break
            if segment == safe.segment and safe.offset < self._path(segment).stat().st_size:
                break
            size = self._path(segment).stat().st_size
            self._path(segment).unlink()
            with self._lock:
                self._bytes_total -= size
            deleted += 1
        return deleted

    @property
    def durable_end(self) -> Position:
        """Everything up to here is as durable as the policy promises (fsynced, for "always")."""
        if self.fsync_policy == "always":
            return self._synced
        return self.end

    @property
    def end(self) -> Position:
        with self._lock:
            return Position(self._current, self._size)

    @property
    def bytes_total(self) -> int:
        return self._bytes_total

    def close(self) -> None:
        self._stop.set()
        if self._syncer is not None:
            self._syncer.join(timeout=2)
        with self._lock:
            with contextlib.suppress(WalError):
                self._fsync_file()
            self._file.close()


def _read_record(f: BinaryIO) -> tuple[tuple[str, bytes], int] | None:
    """((tenant, body), bytes read) for the intact record at the file's position; None at its end or a bad one."""
    header = f.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    magic, tenant_len, body_len, crc = _HEADER.unpack(header)
    payload = f.read(tenant_len + body_len) if magic == _MAGIC else b""
    if magic != _MAGIC or len(payload) < tenant_len + body_len:
        return None
    tenant_bytes, body = payload[:tenant_len], payload[tenant_len:]
    if zlib.crc32(body, zlib.crc32(tenant_bytes)) != crc:
        return None
    return (tenant_bytes.decode(), body), _HEADER.size + len(payload)


def _scan(path: Path) -> Iterator[tuple[tuple[str, bytes], int]]:
    """((tenant, body), end offset) for each intact record; stops at the first torn or corrupt one."""
    with open(path, "rb") as f:
        data = f.read()
    offset = 0
    while offset + _HEADER.size <= len(data):
        magic, tenant_len, body_len, crc = _HEADER.unpack_from(data, offset)
        start = offset + _HEADER.size
        end = start + tenant_len + body_len
        if magic != _MAGIC or end > len(data):
            return
        tenant_bytes = data[start : start + tenant_len]
        body = data[start + tenant_len : end]
        if zlib.crc32(body, zlib.crc32(tenant_bytes)) != crc:
            return
        yield (tenant_bytes.decode(), body), end
        offset = end


class Cursor:
    """A named position persisted atomically (write, fsync, rename): how far one consumer has safely got."""

    def __init__(self, path: Path) -> None:
        self._path = Path(path)

    def load(self) -> Position | None:
        try:
            segment, offset = self._path.read_text().split(":")
            return Position(int(segment), int(offset))
        except (OSError, ValueError):
            return None

    def clear(self) -> None:
        self._path.unlink(missing_ok=True)

    def save(self, position: Position) -> None:
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(position.token())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
