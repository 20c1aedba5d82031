"""The write-ahead log: replay, torn tails, segments, caps, group commit, and kill -9 of a writer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ragmon.pipeline.wal import Cursor, Position, WalFull, WriteAheadLog


def test_records_replay_in_order_with_their_tenant(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path, fsync="never")
    positions = [wal.append(f"body-{i}".encode(), tenant=f"t{i % 2}") for i in range(5)]
    assert positions == sorted(positions)
    records = list(wal.replay())
    assert [(r.tenant, r.body) for r in records] == [(f"t{i % 2}", f"body-{i}".encode()) for i in range(5)]
    assert [r.position for r in records] == positions
    assert [r.body for r in wal.replay(after=positions[2])] == [b"body-3", b"body-4"]
    wal.close()


def test_torn_tail_is_cut_at_recovery_and_later_records_stay_readable(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path, fsync="always")
    wal.append(b"complete")
    wal.close()
    segment = next(tmp_path.glob("wal-*.log"))
    with open(segment, "ab") as f:
        f.write(b"RW\x00\x00\xff\x00\x00\x00partial")  # a header promising 255 bytes, then a crash
    wal = WriteAheadLog(tmp_path, fsync="always")
    assert wal.torn_records == 1
    wal.append(b"after restart")
    assert [r.body for r in wal.replay()] == [b"complete", b"after restart"]
    wal.close()


def test_corrupt_record_is_never_replayed(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path, fsync="never")
    wal.append(b"good")
    wal.append(b"flipped")
    wal.close()
    segment = next(tmp_path.glob("wal-*.log"))
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0xFF
    segment.write_bytes(bytes(data))
    reopened = WriteAheadLog(tmp_path, fsync="never")
    assert [r.body for r in reopened.replay()] == [b"good"]
    reopened.close()


def test_segments_roll_and_trim_behind_the_cursor(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path, fsync="never", segment_max_bytes=110)  # two 52-byte records per segment
    positions = [wal.append(b"x" * 40) for _ in range(10)]
    assert len(list(tmp_path.glob("wal-*.log"))) == 5
    deleted = wal.trim(positions[5])
    assert deleted >= 2
    remaining = [r.position for r in wal.replay()]
    assert remaining[0] <= positions[6] and remaining[-1] == positions[-1]
    assert wal.bytes_total == sum(p.stat().st_size for p in tmp_path.glob("wal-*.log"))
    wal.close()


def test_full_log_refuses_and_counts(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path, fsync="never", max_bytes=200)
    wal.append(b"a" * 100)
    with pytest.raises(WalFull):
        wal.append(b"b" * 100)
    assert wal.refused_full == 1
    wal.close()


def test_concurrent_appends_with_fsync_always_all_survive(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path, fsync="always")

    def writer(n: int) -> None:
        for i in range(50):
            wal.append(f"{n}-{i}".encode())

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wal.close()
    reopened = WriteAheadLog(tmp_path, fsync="never")
    bodies = {r.body for r in reopened.replay()}
    reopened.close()
    assert bodies == {f"{n}-{i}".encode() for n in range(4) for i in range(50)}


def test_cursor_persists_atomically(tmp_path: Path) -> None:
    cursor = Cursor(tmp_path / "store.cursor")
    assert cursor.load() is None
    cursor.save(Position(3, 1234))
    assert Cursor(tmp_path / "store.cursor").load() == Position(3, 1234)


_WRITER = """
import sys
from pathlib import Path
from ragmon.pipeline.wal import WriteAheadLog
wal = WriteAheadLog(Path(sys.argv[1]), fsync=sys.argv[2], segment_max_bytes=4096)
i = 0
while True:
    wal.append(b"record-%d" % i)
    print(i, flush=True)  # acknowledged
    i += 1
"""


@pytest.mark.parametrize("policy", ["always", "interval", "never"])
def test_every_acknowledged_record_survives_kill_9(tmp_path: Path, policy: str) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path), policy],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parent.parent.parent,
        text=True,
    )
    assert process.stdout is not None
    acknowledged = -1
    for line in process.stdout:
        acknowledged = int(line)
        if acknowledged >= 300:
            break
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    process.stdout.close()
    reopened = WriteAheadLog(tmp_path, fsync="never")
    bodies = [r.body for r in reopened.replay()]
    reopened.close()
    assert len(bodies) >= acknowledged + 1  # nothing acknowledged is lost (a last unacknowledged one may be there)
    assert bodies[: acknowledged + 1] == [b"record-%d" % i for i in range(acknowledged + 1)]


def test_disk_full_refuses_the_record_and_keeps_the_log_readable(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path, fsync="never")
    wal.append(b"before")

    class FullDisk:
        """The log's file, once the disk is full: a write stores part of the record, then fails."""

        def __init__(self, real: object) -> None:
            self.real = real

        def write(self, data: bytes) -> int:
            self.real.write(data[:7])  # type: ignore[attr-defined]
            self.real.flush()  # type: ignore[attr-defined]
            raise OSError(28, "No space left on device")

        def __getattr__(self, name: str) -> object:
            return getattr(self.real, name)

    wal._file = FullDisk(wal._file)  # type: ignore[assignment]
    with pytest.raises(WalFull, match="disk full"):
        wal.append(b"refused")
    assert wal.refused_full == 1
    wal.append(b"after")  # space again: the torn bytes were cut, the log goes on
    assert [r.body for r in wal.replay()] == [b"before", b"after"]
    wal.close()
