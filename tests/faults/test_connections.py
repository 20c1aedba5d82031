"""Slow-loris and connection floods against the OTLP/HTTP receiver: a normal request is still served within a
few seconds, and the read / idle timeouts close the slow and idle connections by themselves."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from ragmon.collectors import HttpReceiver

from tests.faults.faults_support import HOST, TALLY, Recorder, good_body, healthy, post, scaled

pytestmark = pytest.mark.faults

READ_TIMEOUT_S = 1.0
IDLE_TIMEOUT_S = 2.0


@pytest.fixture
def timed_http(recorder: Recorder) -> Iterator[HttpReceiver]:
    receiver = HttpReceiver(
        recorder, port=0, max_body_bytes=64 * 1024, idle_timeout_s=IDLE_TIMEOUT_S, read_timeout_s=READ_TIMEOUT_S
    ).start()
    yield receiver
    receiver.stop(timeout_s=2.0)


def _served_promptly(receiver: HttpReceiver, recorder: Recorder, within_s: float = 3.0) -> float:
    body, span_ids = good_body(2)
    before = recorder.count()
    started = time.monotonic()
    reply = post(receiver.port, body, timeout_s=within_s)
    elapsed = time.monotonic() - started
    TALLY.record(reply.status, fault=False)
    TALLY.good_sent += 1
    assert reply.status == 200 and elapsed < within_s
    assert recorder.since(before) == [("default", body, len(span_ids))]
    TALLY.good_delivered += 1
    return elapsed


def _closed_by_server(sock: socket.socket, wait_s: float) -> tuple[bool, bytes]:
    """Whether the server closed `sock` within `wait_s` (reading whatever it said first)."""
    sock.settimeout(wait_s)
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except TimeoutError:
        return False, received
    except (ConnectionResetError, BrokenPipeError):
        pass
    return True, received


def test_slow_loris_heads_time_out_and_others_are_served(timed_http: HttpReceiver, recorder: Recorder) -> None:
    clients = scaled(20, 200)
    head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 10\r\n"
    socks = [socket.create_connection((HOST, timed_http.port), timeout=5) for _ in range(clients)]
    TALLY.connections_held += clients
    stop = threading.Event()
    cut_off: set[int] = set()

    def dribble() -> None:  # one byte per socket every 50 ms, never finishing the head
        for i in range(len(head)):
            if stop.is_set():
                return
            for n, sock in enumerate(socks):
                if n in cut_off:
                    continue
                try:
                    sock.send(head[i : i + 1])
                except OSError:
                    cut_off.add(n)
            time.sleep(0.05)

    sender = threading.Thread(target=dribble, daemon=True)
    started = time.monotonic()
    sender.start()
    try:
        time.sleep(0.3)
        _served_promptly(timed_http, recorder)
        assert healthy(timed_http.port)
        closed = 0
        for sock in socks:
            remaining = READ_TIMEOUT_S + 3.0 - (time.monotonic() - started)
            was_closed, said = _closed_by_server(sock, max(0.1, remaining))
            if was_closed:
                closed += 1
                assert said == b"" or said.startswith(b"HTTP/1.1 408 "), said[:100]
        TALLY.connections_closed_by_server += closed
        assert closed == clients, f"only {closed} of {clients} slow clients were cut off by the read timeout"
    finally:
        stop.set()
        sender.join(5)
        for sock in socks:
            sock.close()
    _served_promptly(timed_http, recorder)


def test_many_idle_connections_are_held_then_closed(timed_http: HttpReceiver, recorder: Recorder) -> None:
    count = scaled(200, 1000)
    socks = [socket.create_connection((HOST, timed_http.port), timeout=5) for _ in range(count)]
    TALLY.connections_held += count
    started = time.monotonic()
    try:
        assert _served_promptly(timed_http, recorder) < 3.0  # while they are all held
        assert healthy(timed_http.port)
        closed = 0
        for sock in socks:
            remaining = IDLE_TIMEOUT_S + 4.0 - (time.monotonic() - started)
            closed += _closed_by_server(sock, max(0.1, remaining))[0]
        TALLY.connections_closed_by_server += closed
        assert closed == count, f"only {closed} of {count} idle connections were closed by the idle timeout"
        deadline = time.monotonic() + 2.0
        while timed_http.server.open_connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not timed_http.server.open_connections
    finally:
        for sock in socks:
            sock.close()
    _served_promptly(timed_http, recorder)


def test_concurrent_good_clients_alongside_a_flood(timed_http: HttpReceiver, recorder: Recorder) -> None:
    """Held half-open connections plus parallel good senders: every good request is delivered intact."""
    flood = [socket.create_connection((HOST, timed_http.port), timeout=5) for _ in range(scaled(100, 500))]
    TALLY.connections_held += len(flood)
    for sock in flood:
        sock.send(b"POST /v1/traces HTTP/1.1\r\n")
    errors: list[BaseException] = []
    sent: list[tuple[bytes, int]] = []
    before = recorder.count()

    def sender() -> None:
        try:
            for _ in range(scaled(10, 100)):
                body, span_ids = good_body(2)
                reply = post(timed_http.port, body, timeout_s=5.0)
                TALLY.record(reply.status, fault=False)
                assert reply.status == 200
                sent.append((body, len(span_ids)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=sender) for _ in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors[0]
        delivered = {(body, n) for _, body, n in recorder.since(before)}
        assert len(sent) == 8 * scaled(10, 100) and set(sent) == delivered  # each delivered intact, once
        assert recorder.count() - before == len(sent)
        TALLY.good_sent += len(sent)
        TALLY.good_delivered += len(sent)
        closed = sum(_closed_by_server(sock, READ_TIMEOUT_S + 3.0)[0] for sock in flood)
        TALLY.connections_closed_by_server += closed
        assert closed == len(flood), f"only {closed} of {len(flood)} half-open heads were cut off"
    finally:
        for sock in flood:
            sock.close()
