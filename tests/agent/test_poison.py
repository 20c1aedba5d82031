"""A request the engine rejects ("Protobuf messages are corrupted") costs O(log n) inserts, not n: the writer finds
it by halves, quarantines it with the engine's reason and stores the rest of its batch — once, even across a crash
in the middle of the search (each slice's deduplication token). Through the real embedded store: the poison is a
body upb accepts and ClickHouse's Protobuf format refuses (a non-empty group, see ragmon.collectors.validate)."""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from ragmon.sinks import Store, open_store, otlp_views
from ragmon.sinks.errors import StoreError

from ragmon.agent.intake import WalIntake
from ragmon.agent.sampling import Sampler
from ragmon.agent.wal import WriteAheadLog
from ragmon.agent.writer import StoreWriter

SPANS_PER_REQUEST = 2
# An unknown field 7 sent as a group holding one varint: upb skips it, the engine's reader cannot.
POISON_TAIL = b"\x3b\x08\x01\x3c"


def otlp_request(rng: random.Random, spans: int = SPANS_PER_REQUEST) -> bytes:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    service = resource_spans.resource.attributes.add()
    service.key, service.value.string_value = "service.name", "poison-test"
    scope = resource_spans.scope_spans.add()
    trace_id = rng.randbytes(16)
    now_ns = time.time_ns()  # inside the spans table's retention, or its TTL drops the rows
    for index in range(spans):
        span = scope.spans.add()
        span.trace_id, span.span_id, span.name = trace_id, rng.randbytes(8), f"step-{index}"
        span.start_time_unix_nano, span.end_time_unix_nano = now_ns, now_ns + 1_000_000
    return bytes(request.SerializeToString())


class CountingStore:
    """The real store, counting the OTLP inserts the writer sends; `crash_after` inserts, it lands the next one
    and then raises `Crash` (an agent killed between the engine's commit and the writer seeing it)."""

    def __init__(self, store: Store, crash_after: int | None = None) -> None:
        self.store = store
        self.inserts = 0
        self.crash_after = crash_after

    def insert_otlp(self, envelopes: Sequence[bytes], dedup_token: str) -> None:
        self.inserts += 1
        self.store.insert_otlp(envelopes, dedup_token)
        if self.crash_after is not None and self.inserts > self.crash_after:
            raise Crash

    def trace_fragment_table(self, seq_from: int, seq_to: int) -> pa.Table:
        return self.store.trace_fragment_table(seq_from, seq_to)

    def roll_up(
        self, seq_from: int, seq_to: int, dedup_token: str | None = None, *, context_to: int | None = None
    ) -> None:
        self.store.roll_up(seq_from, seq_to, dedup_token, context_to=context_to)


class Crash(BaseException):
    """Stands for kill -9: nothing after it runs (not an Exception, so no handler of the writer catches it)."""


@pytest.fixture
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    opened = open_store(str(chdb_engine_dir), database=f"poison_{uuid.uuid4().hex[:10]}")
    otlp_views.install(opened)
    yield opened
    opened.close()


def _writer(state: Path, wal: WriteAheadLog, intake: WalIntake, store: CountingStore) -> StoreWriter:
    return StoreWriter(intake, wal, store, Sampler(), lambda decided: None, state)


def _log_requests(tmp_path: Path, bodies: list[bytes]) -> tuple[WriteAheadLog, WalIntake]:
    wal = WriteAheadLog(tmp_path / "wal", fsync="never")
    intake = WalIntake(wal)
    for body in bodies:
        intake.consume("tenant-a", body, SPANS_PER_REQUEST)
    return wal, intake


def _stored_spans(store: Store) -> int:
    return int(store.read("SELECT count() AS n FROM spans")[0]["n"])


@pytest.mark.parametrize(("requests", "poison_at"), [(64, 37), (64, 0), (64, 63), (33, 16)])
def test_one_poison_request_costs_logarithmic_inserts_and_the_rest_is_stored(
    tmp_path: Path, store: Store, requests: int, poison_at: int
) -> None:
    rng = random.Random(requests * 100 + poison_at)
    bodies = [otlp_request(rng) for _ in range(requests)]
    bodies[poison_at] += POISON_TAIL
    wal, intake = _log_requests(tmp_path, bodies)
    counting = CountingStore(store)
    writer = _writer(tmp_path / "state", wal, intake, counting)
    assert writer.step() == requests  # one batch: every request fits
    assert counting.inserts <= 2 * math.ceil(math.log2(requests)) + 1  # one by one was requests + 1
    assert writer.counts["isolation_inserts"] == counting.inserts - 1
    assert _stored_spans(store) == (requests - 1) * SPANS_PER_REQUEST  # count(), not FINAL: none stored twice
    assert writer.counts["requests_stored"] == requests - 1
    assert writer.counts["requests_quarantined"] == 1 and writer.counts["spans_quarantined"] == SPANS_PER_REQUEST
    quarantined = sorted((tmp_path / "state" / "quarantine").iterdir())
    assert [path.suffix for path in quarantined] == [".otlp", ".why"]
    assert quarantined[0].read_bytes() == bodies[poison_at]
    tenant, reason = quarantined[1].read_text().split("\n", 1)
    assert tenant == "tenant-a" and "Protobuf messages are corrupted" in reason
    assert intake.backlog == (0, 0)
    wal.close()


@pytest.mark.parametrize("crash_after", [1, 3, 5])
def test_a_crash_in_the_middle_of_the_search_stores_every_good_request_once(
    tmp_path: Path, store: Store, crash_after: int
) -> None:
    rng = random.Random(crash_after)
    bodies = [otlp_request(rng) for _ in range(40)]
    bodies[29] += POISON_TAIL
    wal, intake = _log_requests(tmp_path, bodies)
    crashing = CountingStore(store, crash_after=crash_after)
    with pytest.raises(Crash):
        _writer(tmp_path / "state", wal, intake, crashing).step()
    assert 0 < _stored_spans(store) < 39 * SPANS_PER_REQUEST  # killed with part of the batch stored
    wal.close()

    wal = WriteAheadLog(tmp_path / "wal", fsync="never")  # the next start: same log, same journal
    intake = WalIntake(wal)
    writer = _writer(tmp_path / "state", wal, intake, CountingStore(store))
    writer.recover()
    while writer.step():
        pass
    assert _stored_spans(store) == 39 * SPANS_PER_REQUEST  # the slices stored before the crash: not again
    assert writer.counts["requests_quarantined"] == 1
    assert [p.read_bytes() for p in (tmp_path / "state" / "quarantine").glob("*.otlp")] == [bodies[29]]
    assert intake.backlog == (0, 0)
    wal.close()


class RefusingStore:
    """A store that refuses, for good, any insert carrying one of `bad` bodies (tests the search alone)."""

    def __init__(self, bad: set[bytes]) -> None:
        self.bad = bad
        self.inserts = 0
        self.stored: list[bytes] = []
        self.tokens: set[str] = set()

    def insert_otlp(self, envelopes: Sequence[bytes], dedup_token: str) -> None:
        self.inserts += 1
        if any(envelope.startswith(body) for envelope in envelopes for body in self.bad):
            raise StoreError("Code: 444. DB::Exception: Protobuf messages are corrupted", retryable=False, code=444)
        assert dedup_token not in self.tokens  # a token names one slice, stored once
        self.tokens.add(dedup_token)
        self.stored.extend(envelopes)

    def trace_fragment_table(self, seq_from: int, seq_to: int) -> pa.Table:
        from ragmon.agent.sampling.trace import FRAGMENT_COLUMNS

        return pa.table({name: [] for name in FRAGMENT_COLUMNS})

    def roll_up(
        self, seq_from: int, seq_to: int, dedup_token: str | None = None, *, context_to: int | None = None
    ) -> None:
        return None


def test_several_poison_requests_are_all_found_and_only_they_are_quarantined(tmp_path: Path) -> None:
    bodies = [f"request-{i:03d}".encode() for i in range(100)]
    bad = {bodies[3], bodies[4], bodies[50], bodies[99]}
    wal, intake = _log_requests(tmp_path, bodies)
    refusing = RefusingStore(bad)
    writer = StoreWriter(intake, wal, refusing, Sampler(), lambda decided: None, tmp_path / "state")
    assert writer.step() == 100
    assert sorted(p.read_bytes() for p in (tmp_path / "state" / "quarantine").glob("*.otlp")) == sorted(bad)
    assert [e[:11] for e in refusing.stored] == [b for b in bodies if b not in bad]  # in order, each once
    assert refusing.inserts <= 4 * (2 * math.ceil(math.log2(100)) + 1)
    wal.close()
