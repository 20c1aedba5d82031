"""Past its memory cap the intake keeps accepting into the write-ahead log and the writer reads bodies back from
it: memory stays bounded while the store is slow or down, and every acknowledged request is stored, in order."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from ragmon.sinks.errors import PartlyStored, StoreError

from ragmon.pipeline.intake import WalIntake
from ragmon.pipeline.sampling_loop import SamplingLoop
from ragmon.pipeline.wal import WriteAheadLog
from ragmon.pipeline.writer import StoreWriter
from ragmon.sampling.trace import FRAGMENT_COLUMNS
from tests.agent.stages import store_and_sample


class RecordingStore:
    """Keeps what each insert carried; knows no traces (the sampler is not under test here)."""

    def __init__(self) -> None:
        self.envelopes: list[bytes] = []
        self.inserts = 0

    def insert_otlp(self, envelopes: list[bytes], dedup_token: str) -> None:
        self.envelopes.extend(envelopes)
        self.inserts += 1

    def trace_fragment_table(self, seq_from: int, seq_to: int) -> pa.Table:
        return pa.table({name: [] for name in FRAGMENT_COLUMNS})


def _bodies(n: int) -> list[bytes]:
    return [f"request-{i:03d}-".encode() * 4 for i in range(n)]  # 52 bytes each


def _stages(
    tmp_path: Path, wal: WriteAheadLog, intake: WalIntake, store: RecordingStore
) -> tuple[StoreWriter, SamplingLoop]:
    return store_and_sample(intake, wal, store, tmp_path / "state", batch_max_bytes=120)


def _drain(writer: StoreWriter, sampling: SamplingLoop) -> None:
    while writer.step():
        pass
    sampling.sample_stored()


def test_read_after_returns_the_following_records_across_segments(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path, fsync="never", segment_max_bytes=130)  # two 65-byte records per segment
    bodies = _bodies(7)
    positions = [wal.append(body, "t") for body in bodies]
    got = wal.read_after(positions[1], 4)
    assert [r.position for r in got] == positions[2:6]
    assert [r.body for r in got] == bodies[2:6] and {r.tenant for r in got} == {"t"}
    assert [r.body for r in wal.read_after(None, 2)] == bodies[:2]
    assert wal.read_after(positions[-1], 3) == []
    assert [r.body for r in wal.read_after(positions[4], 10)] == bodies[5:]  # the log ends first
    wal.close()


def test_requests_past_the_memory_cap_are_spilled_then_stored_in_order(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path / "wal", fsync="never", segment_max_bytes=200)
    intake = WalIntake(wal, max_backlog_bytes=110)  # room for two bodies in memory
    bodies = _bodies(9)
    for body in bodies:
        intake.consume("tenant-a", body, spans=1)  # never refused: the log has room
    requests, in_memory = intake.backlog
    assert requests == 9 and in_memory <= 110
    assert intake.spilled_requests == 7
    store = RecordingStore()
    writer, sampling = _stages(tmp_path, wal, intake, store)
    _drain(writer, sampling)
    assert [env[: len(body)] for env, body in zip(store.envelopes, bodies, strict=True)] == bodies
    assert store.inserts >= 4  # batches capped at 120 bytes: two requests each
    assert writer.counts["requests_read_back"] == 7 and writer.counts["requests_stored"] == 9
    assert intake.backlog == (0, 0)
    # where the writer's time went: inserting, the sampler's queries, handing (no) decisions on
    seconds = {**writer.seconds, **sampling.seconds}
    assert set(seconds) == {"insert", "sample", "decided"} and min(seconds.values()) > 0
    wal.close()


def test_recovery_streams_a_large_log_into_a_bounded_backlog(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path / "wal", fsync="never", segment_max_bytes=200)
    bodies = _bodies(12)
    for body in bodies:
        wal.append(body, "tenant-a")  # accepted before a crash, never stored
    wal.close()
    wal = WriteAheadLog(tmp_path / "wal", fsync="never", segment_max_bytes=200)
    intake = WalIntake(wal, max_backlog_bytes=110)
    store = RecordingStore()
    writer, sampling = _stages(tmp_path, wal, intake, store)
    writer.recover()
    assert intake.backlog[0] == 12 and intake.backlog[1] <= 110
    _drain(writer, sampling)
    assert [env[: len(body)] for env, body in zip(store.envelopes, bodies, strict=True)] == bodies
    wal.close()


class PartlyFailingStore(RecordingStore):
    """Stores a multi-request batch in two parts, the second of which fails for good; stored one by one, only the
    request carrying `poison` fails."""

    def __init__(self, poison: bytes) -> None:
        super().__init__()
        self.poison = poison

    def insert_otlp(self, envelopes: list[bytes], dedup_token: str) -> None:
        if len(envelopes) == 1:
            if envelopes[0].startswith(self.poison):
                raise StoreError("Code: 33. DB::Exception: Cannot read all data", retryable=False, code=33)
            super().insert_otlp(envelopes, dedup_token)
            return
        half = len(envelopes) // 2
        super().insert_otlp(envelopes[:half], dedup_token + "/1")
        cause = StoreError("Code: 33. DB::Exception: Cannot read all data", retryable=False, code=33)
        raise PartlyStored(cause, [(half, len(envelopes))])


def test_a_batch_partly_stored_before_a_permanent_error_stores_only_the_rest_one_by_one(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path / "wal", fsync="never")
    intake = WalIntake(wal, max_backlog_bytes=10_000)
    bodies = _bodies(4)
    for body in bodies:
        intake.consume("tenant-a", body, spans=1)
    store = PartlyFailingStore(poison=bodies[3])
    writer, sampling = store_and_sample(intake, wal, store, tmp_path / "state")
    _drain(writer, sampling)
    # the first part once (not again one by one), the rest one by one, the poisoned request quarantined
    assert [env[: len(bodies[0])] for env in store.envelopes] == bodies[:3]
    assert writer.counts["batches_rejected"] == 1 and writer.counts["requests_quarantined"] == 1
    assert [path.read_bytes() for path in (tmp_path / "state" / "quarantine").glob("*.otlp")] == [bodies[3]]
    wal.close()
