"""ragmon's OTLP/HTTP export path against a real receiver on loopback: delivery, retries, drops, headers."""

from __future__ import annotations

import socket
import time

import ragmon
from ragmon.retry import Outcome, RetryPolicy, classify_http_status, parse_retry_after
from tests.otlp_receiver import OtlpReceiver, Reply


def _spans(n: int) -> None:
    with ragmon.request("export-test"):
        for i in range(n - 1):
            with ragmon.search(data_source=f"s{i}") as s:
                s.record(documents=[("d", 0.5)])


def _configure(endpoint: str, **export: object) -> None:
    settings = {"export": {"flush_interval_ms": 20, "retry_deadline_s": 5.0, **export}}
    ragmon.configure(endpoint=endpoint, service_name="export-test", settings=settings)


def test_spans_arrive_with_resource_and_auth_header() -> None:
    with OtlpReceiver() as receiver:
        _configure(receiver.endpoint, api_key="k-123")
        _spans(3)
        assert ragmon.force_flush()
        assert sorted(receiver.span_names()) == ["request export-test", "retrieval s0", "retrieval s1"]
        headers, request = receiver.requests[0]
        assert headers["Authorization"] == "Bearer k-123"
        assert headers["Content-Type"] == "application/x-protobuf"
        resource = {kv.key: kv.value.string_value for kv in request.resource_spans[0].resource.attributes}
        assert resource["service.name"] == "export-test"
        assert ragmon.stats()["exported"] == 3 and ragmon.stats()["dropped_total"] == 0


def test_retryable_status_is_retried_honouring_retry_after() -> None:
    with OtlpReceiver() as receiver:
        receiver.script.extend([Reply(503, {"Retry-After": "0"}), Reply(429, {"Retry-After": "0"})])
        _configure(receiver.endpoint)
        _spans(2)
        assert ragmon.force_flush()
        assert len(receiver.requests) == 3
        assert sorted(receiver.span_names()) == ["request export-test", "retrieval s0"]
        stats = ragmon.stats()
        assert stats["retries"] == 2 and stats["exported"] == 2 and stats["dropped_total"] == 0


def test_permanent_error_is_not_retried_and_is_counted() -> None:
    with OtlpReceiver() as receiver:
        receiver.script.append(Reply(400))
        _configure(receiver.endpoint)
        _spans(4)
        assert ragmon.force_flush()
        assert len(receiver.requests) == 1
        assert ragmon.stats()["dropped"] == {"http_400": 4}


def test_partial_success_counts_rejected_spans() -> None:
    with OtlpReceiver() as receiver:
        receiver.script.append(Reply(200, rejected_spans=2))
        _configure(receiver.endpoint)
        _spans(5)
        assert ragmon.force_flush()
        stats = ragmon.stats()
        assert stats["exported"] == 3 and stats["dropped"] == {"rejected_by_receiver": 2}


def test_receiver_down_gives_up_within_the_deadline_and_counts() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    _configure(f"http://127.0.0.1:{port}", max_attempts=3, retry_deadline_s=2.0)
    _spans(2)
    assert ragmon.force_flush(10.0)
    assert ragmon.stats()["dropped"] == {"retries_exhausted:connection_error": 2}


def test_full_queue_drops_are_counted_and_reported_to_the_receiver() -> None:
    with OtlpReceiver() as receiver:
        # the export thread sleeps for a minute and batches are huge: only force_flush drains
        _configure(receiver.endpoint, queue_max_spans=3, batch_max_spans=1000, flush_interval_ms=60_000)
        _spans(10)
        assert ragmon.stats()["dropped"] == {"queue_full": 7}
        assert ragmon.force_flush()
        assert len(receiver.span_names()) == 3
        scope = receiver.requests[0][1].resource_spans[0].scope_spans[0].scope
        assert {kv.key: kv.value.int_value for kv in scope.attributes} == {"ragmon.sdk.dropped_spans": 7}


def test_full_batches_go_out_at_once_and_a_partial_one_waits_for_flush() -> None:
    # Every export request has a fixed cost; the few spans that trickle in while a full batch is exported must
    # not go out as their own tiny request. The timer is a minute here, so only the flush may send the rest.
    with OtlpReceiver() as receiver:
        _configure(receiver.endpoint, batch_max_spans=3, flush_interval_ms=60_000)
        _spans(7)
        deadline = time.monotonic() + 10.0
        while len(receiver.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        sizes = [len(r.resource_spans[0].scope_spans[0].spans) for _, r in receiver.requests]
        assert sizes == [3, 3]
        assert ragmon.stats()["queued"] == 1
        assert ragmon.force_flush()
        sizes = [len(r.resource_spans[0].scope_spans[0].spans) for _, r in receiver.requests]
        assert sizes == [3, 3, 1]
        assert ragmon.stats()["exported"] == 7 and ragmon.stats()["dropped_total"] == 0


def test_partial_batch_goes_out_when_the_flush_interval_passes() -> None:
    with OtlpReceiver() as receiver:
        _configure(receiver.endpoint, batch_max_spans=1000, flush_interval_ms=20)
        _spans(2)
        deadline = time.monotonic() + 10.0  # no flush call: only the interval timer can send these
        while not receiver.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(receiver.span_names()) == ["request export-test", "retrieval s0"]


def test_gzip_compression() -> None:
    with OtlpReceiver() as receiver:
        _configure(receiver.endpoint, compression="gzip")
        _spans(2)
        assert ragmon.force_flush()
        assert receiver.requests[0][0]["Content-Encoding"] == "gzip"
        assert len(receiver.span_names()) == 2


def test_retry_policy_classification_and_retry_after() -> None:
    assert classify_http_status(200) is Outcome.OK
    assert classify_http_status(429) is Outcome.THROTTLED
    assert {classify_http_status(s) for s in (502, 503, 504)} == {Outcome.RETRYABLE}
    assert {classify_http_status(s) for s in (400, 401, 404, 413, 500)} == {Outcome.PERMANENT}
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now_s=1445412480.0) == 10.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None
    policy = RetryPolicy(max_attempts=3, initial_backoff_s=1.0, deadline_s=10.0)
    assert policy.next_delay_s(1, 0.0, retry_after_s=4.0) == 4.0
    assert 0.0 <= policy.next_delay_s(2, 0.0) <= 2.0
    assert policy.next_delay_s(3, 0.0) is None  # attempts spent
    assert policy.next_delay_s(1, 9.5, retry_after_s=1.0) is None  # would pass the deadline
