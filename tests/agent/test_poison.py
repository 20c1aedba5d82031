"""A request the store rejects for good costs O(log n) inserts, not n: the writer finds it by halves, quarantines it
with the store's reason and stores the rest of its batch — once, even across a crash in the middle of the search
(each slice's deduplication token). Through the real embedded store, its inserts counted.

Three kinds of poison reach a log:
- bodies upb reads and the engine's Protobuf reader refuses ("Protobuf messages are corrupted"; a non-empty group,
  see ragmon.collectors.validate), logged by an agent before the receivers re-encoded such bodies: the writer
  re-encodes them as a receiver now would and stores the batch in one more insert;
- bodies neither can read (a record damaged on disk): set aside and tried alone, then quarantined;
- bodies the store refuses by a rule the agent cannot know in advance (here `CountingStore.refuse`, over the real
  store): the search by halves.
"""

from __future__ import annotations

import logging
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

from ragmon.pipeline.intake import WalIntake
from ragmon.pipeline.wal import WriteAheadLog
from ragmon.pipeline.writer import StoreWriter
from ragmon.sampling.trace import FRAGMENT_COLUMNS

SPANS_PER_REQUEST = 2
# An unknown field 7 sent as a group holding one varint: upb skips it, the engine's reader refuses the body.
GROUP_TAIL = b"\x3b\x08\x01\x3c"
# Field 7 with wire type 6, which does not exist: upb and the engine both refuse the body.
DAMAGED_TAIL = b"\x3e\x01"
REFUSED = "Code: 999001. DB::Exception: refused by the test's rule"  # permanent: not a retryable code


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


class Crash(BaseException):
    """Stands for kill -9: nothing after it runs (not an Exception, so no handler of the writer catches it)."""


class CountingStore:
    """The real store, counting the OTLP inserts the writer sends.

    `refuse`: bodies whose inserts fail for good, as under an engine rule the agent cannot check in advance.
    `crash_after`: once that many inserts were sent, the next one that succeeds lands and then raises `Crash` (an
    agent killed between the engine's commit and the writer seeing it)."""

    def __init__(self, store: Store, *, refuse: set[bytes] | None = None, crash_after: int | None = None) -> None:
        self.store = store
        self.refuse = refuse or set()
        self.crash_after = crash_after
        self.inserts = 0

    def insert_otlp(self, envelopes: Sequence[bytes], dedup_token: str) -> None:
        self.inserts += 1
        if any(envelope.startswith(body) for envelope in envelopes for body in self.refuse):
            raise StoreError(REFUSED, retryable=False)
        self.store.insert_otlp(envelopes, dedup_token)
        if self.crash_after is not None and self.inserts > self.crash_after:
            raise Crash

    def trace_fragment_table(self, seq_from: int, seq_to: int) -> pa.Table:
        return self.store.trace_fragment_table(seq_from, seq_to)

    def roll_up(
        self, seq_from: int, seq_to: int, dedup_token: str | None = None, *, context_to: int | None = None
    ) -> None:
        self.store.roll_up(seq_from, seq_to, dedup_token, context_to=context_to)


@pytest.fixture
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    opened = open_store(str(chdb_engine_dir), database=f"poison_{uuid.uuid4().hex[:10]}")
    otlp_views.install(opened)
    yield opened
    opened.close()


def _writer(state: Path, wal: WriteAheadLog, intake: WalIntake, store: CountingStore) -> StoreWriter:
    return StoreWriter(intake, wal, store, state)


def _log_requests(tmp_path: Path, bodies: list[bytes]) -> tuple[WriteAheadLog, WalIntake]:
    wal = WriteAheadLog(tmp_path / "wal", fsync="never")
    intake = WalIntake(wal)
    for body in bodies:
        intake.consume("tenant-a", body, SPANS_PER_REQUEST)
    return wal, intake


def _stored_spans(store: Store) -> int:
    return int(store.read("SELECT count() AS n FROM spans")[0]["n"])  # count(), not FINAL: repeats would show


def _quarantined(state: Path) -> list[tuple[bytes, str, str]]:
    """(body, tenant, reason) of each quarantined request."""
    out = []
    for body in sorted((state / "quarantine").glob("*.otlp")):
        tenant, reason = body.with_suffix(".why").read_text().split("\n", 1)
        out.append((body.read_bytes(), tenant, reason))
    return out


@pytest.mark.parametrize(("requests", "poison_at"), [(64, 37), (64, 0), (64, 63), (33, 16)])
def test_one_poison_request_costs_logarithmic_inserts_and_the_rest_is_stored(
    tmp_path: Path, store: Store, requests: int, poison_at: int
) -> None:
    rng = random.Random(requests * 100 + poison_at)
    bodies = [otlp_request(rng) for _ in range(requests)]
    wal, intake = _log_requests(tmp_path, bodies)
    counting = CountingStore(store, refuse={bodies[poison_at]})
    writer = _writer(tmp_path / "state", wal, intake, counting)
    assert writer.step() == requests  # one batch: every request fits
    assert counting.inserts <= 2 * math.ceil(math.log2(requests)) + 1  # one by one was requests + 1
    assert writer.counts["isolation_inserts"] == counting.inserts - 1
    assert _stored_spans(store) == (requests - 1) * SPANS_PER_REQUEST
    assert writer.counts["requests_stored"] == requests - 1
    assert writer.counts["requests_quarantined"] == 1 and writer.counts["spans_quarantined"] == SPANS_PER_REQUEST
    assert _quarantined(tmp_path / "state") == [(bodies[poison_at], "tenant-a", REFUSED + "\n")]
    assert intake.backlog == (0, 0)
    wal.close()


def test_a_damaged_record_is_tried_alone_and_quarantined_with_the_engines_reason(tmp_path: Path, store: Store) -> None:
    rng = random.Random(7)
    bodies = [otlp_request(rng) for _ in range(64)]
    bodies[41] += DAMAGED_TAIL
    wal, intake = _log_requests(tmp_path, bodies)
    counting = CountingStore(store)
    writer = _writer(tmp_path / "state", wal, intake, counting)
    assert writer.step() == 64
    assert counting.inserts == 3  # the batch (refused), the 63 others, the damaged one alone (refused)
    assert _stored_spans(store) == 63 * SPANS_PER_REQUEST
    [(body, tenant, reason)] = _quarantined(tmp_path / "state")
    assert body == bodies[41] and tenant == "tenant-a" and "Protobuf messages are corrupted" in reason
    wal.close()


def test_bodies_upb_reads_and_the_engine_refuses_are_re_encoded_and_stored_in_one_more_insert(
    tmp_path: Path, store: Store
) -> None:
    rng = random.Random(5)
    bodies = [otlp_request(rng) for _ in range(100)]
    for index in range(19, 100, 20):  # one every 20
        bodies[index] += GROUP_TAIL
    wal, intake = _log_requests(tmp_path, bodies)
    counting = CountingStore(store)
    writer = _writer(tmp_path / "state", wal, intake, counting)
    assert writer.step() == 100
    assert counting.inserts == 2  # the batch as logged (refused by the engine), then re-encoded
    assert writer.counts["requests_reencoded"] == 5 and writer.counts["requests_quarantined"] == 0
    assert _stored_spans(store) == 100 * SPANS_PER_REQUEST
    wal.close()


def _crash_then_recover(tmp_path: Path, store: Store, bodies: list[bytes], crashing: CountingStore) -> StoreWriter:
    """Log `bodies`, store them until `crashing` crashes, then start again on the same log and state."""
    wal, intake = _log_requests(tmp_path, bodies)
    with pytest.raises(Crash):
        _writer(tmp_path / "state", wal, intake, crashing).step()
    wal.close()
    wal = WriteAheadLog(tmp_path / "wal", fsync="never")  # the next start: same log, same journal
    intake = WalIntake(wal)
    writer = _writer(tmp_path / "state", wal, intake, CountingStore(store, refuse=crashing.refuse))
    writer.recover()
    while writer.step():
        pass
    assert intake.backlog == (0, 0)
    wal.close()
    return writer


@pytest.mark.parametrize("crash_after", [1, 3, 5])
def test_a_crash_in_the_middle_of_the_search_stores_every_good_request_once(
    tmp_path: Path, store: Store, crash_after: int
) -> None:
    rng = random.Random(crash_after)
    bodies = [otlp_request(rng) for _ in range(40)]
    crashing = CountingStore(store, refuse={bodies[29]}, crash_after=crash_after)
    writer = _crash_then_recover(tmp_path, store, bodies, crashing)
    assert 0 < crashing.inserts - 1 < 2 * math.ceil(math.log2(40))  # killed in the middle of the search
    assert _stored_spans(store) == 39 * SPANS_PER_REQUEST  # the slices stored before the crash: not again
    assert writer.counts["requests_quarantined"] == 1
    assert [body for body, _, _ in _quarantined(tmp_path / "state")] == [bodies[29]]


def test_a_crash_after_the_re_encoded_requests_landed_stores_them_once(tmp_path: Path, store: Store) -> None:
    rng = random.Random(11)
    bodies = [otlp_request(rng) for _ in range(40)]
    bodies[7] += GROUP_TAIL
    bodies[29] += DAMAGED_TAIL
    writer = _crash_then_recover(tmp_path, store, bodies, CountingStore(store, crash_after=1))
    assert _stored_spans(store) == 39 * SPANS_PER_REQUEST  # the re-encoded slice's token dropped its repeat
    assert [body for body, _, _ in _quarantined(tmp_path / "state")] == [bodies[29]]
    assert writer.counts["requests_reencoded"] == 1


class RefusingStore:
    """A store that refuses, for good, any insert carrying one of `bad` bodies, and keeps the rest in memory:
    the search alone, with many requests at fault."""

    def __init__(self, bad: set[bytes]) -> None:
        self.bad = bad
        self.inserts = 0
        self.stored: list[bytes] = []
        self.tokens: set[str] = set()

    def insert_otlp(self, envelopes: Sequence[bytes], dedup_token: str) -> None:
        self.inserts += 1
        if any(envelope.startswith(body) for envelope in envelopes for body in self.bad):
            raise StoreError(REFUSED, retryable=False)
        assert dedup_token not in self.tokens  # a token names one slice, stored once
        self.tokens.add(dedup_token)
        self.stored.extend(envelopes)

    def trace_fragment_table(self, seq_from: int, seq_to: int) -> pa.Table:
        return pa.table({name: [] for name in FRAGMENT_COLUMNS})

    def roll_up(
        self, seq_from: int, seq_to: int, dedup_token: str | None = None, *, context_to: int | None = None
    ) -> None:
        return None


def test_several_poison_requests_are_all_found_and_only_they_are_quarantined(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "ragmon.agent")
    rng = random.Random(3)
    bodies = [otlp_request(rng) for _ in range(100)]
    bad = {bodies[3], bodies[4], bodies[50], bodies[99]}
    wal, intake = _log_requests(tmp_path, bodies)
    refusing = RefusingStore(bad)
    writer = StoreWriter(intake, wal, refusing, tmp_path / "state")
    assert writer.step() == 100
    assert sorted(body for body, _, _ in _quarantined(tmp_path / "state")) == sorted(bad)
    good = [body for body in bodies if body not in bad]
    assert [envelope[: len(body)] for envelope, body in zip(refusing.stored, good, strict=True)] == good  # in order
    assert refusing.inserts <= 4 * (2 * math.ceil(math.log2(100)) + 1)
    # four quarantined, one line said: a stream of poison is not a stream of log lines (each is counted)
    assert [r.getMessage().startswith("store rejected a request") for r in caplog.records] == [True]
    wal.close()
