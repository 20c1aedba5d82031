"""Webhook and log channels against a real HTTP receiver on 127.0.0.1: payloads, retries (503 then recovery,
429 with Retry-After), permanent failures, dedup in the dispatcher. Failures are counted, never raised."""

from __future__ import annotations

import logging
import random
import socket
from typing import Any

import httpx
import pytest

from ragmon.drift import AlertRecord, AlertsConfig, Dispatcher, LogChannel, WebhookChannel, build_channels
from ragmon.retry import RetryPolicy

# Tiny real delays: the 503 test really sleeps, for a few milliseconds.
FAST = RetryPolicy(max_attempts=4, initial_backoff_s=0.01, max_backoff_s=0.02, deadline_s=5.0)


def record(state: str = "firing", alert_id: str = "a1b2c3") -> AlertRecord:
    return AlertRecord(
        alert_id=alert_id,
        state=state,  # type: ignore[arg-type]
        rule="latency_p95_up",
        severity="critical",
        tenant="acme",
        feature="qa",
        stage="generate",
        metric="latency_p95_ms",
        detector="cusum",
        fired_at_s=1_767_571_200.0,
        resolved_at_s=1_767_572_400.0 if state == "resolved" else None,
        detected_at_s=1_767_571_320.0,
        value=9.5,
        threshold=8.0,
        message="[critical] latency_p95_up: p95 span latency changed: 1950 ms now vs 640 ms baseline",
        baseline_value=640.0,
        current_value=1950.0,
        evidence={"baseline_mean": 640.0, "z": 4.0, "detector": "cusum"},
        trace_ids=("t-1", "t-2"),
        channels=("hook",),
    )


def channel(url: str, **kwargs: Any) -> WebhookChannel:
    kwargs.setdefault("retry", FAST)
    return WebhookChannel(url, name="hook", rng=random.Random(1), **kwargs)


def test_json_payload_and_idempotency_key(receiver: Any) -> None:
    hook = channel(receiver.url)
    result = hook.send(record())
    assert result.ok and result.attempts == 1
    [got] = receiver.requests
    assert got.path == "/hook"
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["Idempotency-Key"] == "a1b2c3:firing"
    alert = got.body["alert"]
    assert got.body["type"] == "ragmon.alert"
    assert alert["alert_id"] == "a1b2c3" and alert["state"] == "firing" and alert["severity"] == "critical"
    assert alert["fired_at"] == "2026-01-05T00:00:00+00:00"
    assert alert["evidence"]["baseline_mean"] == 640.0 and alert["trace_ids"] == ["t-1", "t-2"]
    assert alert["baseline_value"] == 640.0 and alert["current_value"] == 1950.0


def test_slack_compatible_payload(receiver: Any) -> None:
    hook = channel(receiver.url, payload_format="slack")
    assert hook.send(record()).ok
    body = receiver.requests[0].body
    assert set(body) == {"text", "blocks"}
    assert "latency_p95_up" in body["text"]
    kinds = [block["type"] for block in body["blocks"]]
    assert kinds == ["header", "section", "section", "context"]
    assert len(body["blocks"][0]["text"]["text"]) <= 150
    assert len(body["blocks"][2]["fields"]) <= 10
    assert "`t-1`" in body["blocks"][3]["elements"][0]["text"]


def test_a_receiver_that_fails_with_503_then_recovers(receiver: Any) -> None:
    receiver.script.extend([(503, {}), (503, {})])
    hook = channel(receiver.url)
    result = hook.send(record())
    assert result.ok and result.attempts == 3
    assert len(receiver.requests) == 3
    assert len(hook.delays_s) == 2 and all(0 <= d <= 0.02 for d in hook.delays_s)
    # Every attempt is the same delivery: same body, same idempotency key.
    keys = {r.headers["Idempotency-Key"] for r in receiver.requests}
    assert keys == {"a1b2c3:firing"}


def test_429_retry_after_is_honoured(receiver: Any) -> None:
    receiver.script.append((429, {"Retry-After": "3"}))
    slept: list[float] = []
    policy = RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=1.0, deadline_s=30.0)
    # The wait is recorded instead of slept: the receiver is real, the 3 seconds are not.
    hook = channel(receiver.url, retry=policy, sleep=slept.append)
    result = hook.send(record())
    assert result.ok and result.attempts == 2
    assert slept == [3.0]


def test_retry_after_beyond_the_deadline_gives_up(receiver: Any) -> None:
    receiver.script.append((429, {"Retry-After": "120"}))
    slept: list[float] = []
    policy = RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=30.0, deadline_s=10.0)
    hook = channel(receiver.url, retry=policy, sleep=slept.append)
    result = hook.send(record())
    assert not result.ok and result.reason == "retries exhausted (http 429)"
    assert slept == [] and len(receiver.requests) == 1


def test_permanent_error_is_not_retried(receiver: Any) -> None:
    receiver.script.append((400, {}))
    hook = channel(receiver.url)
    result = hook.send(record())
    assert not result.ok and result.attempts == 1 and result.reason == "http 400"


def test_attempts_are_bounded(receiver: Any) -> None:
    receiver.script.extend([(503, {})] * 10)
    hook = channel(receiver.url)
    result = hook.send(record())
    assert not result.ok and result.attempts == FAST.max_attempts
    assert result.reason == "retries exhausted (http 503)"


def test_unreachable_receiver_is_a_counted_failure() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    hook = channel(f"http://127.0.0.1:{port}/hook")
    dispatcher = Dispatcher({"hook": hook})
    dispatcher.deliver(record())  # must not raise
    stats = dispatcher.stats["hook"]
    assert stats.failed == 1 and stats.delivered == 0 and stats.attempts == FAST.max_attempts
    assert stats.failure_reasons == {"retries exhausted (ConnectError)": 1}


def test_dispatcher_delivers_each_id_and_state_once(receiver: Any) -> None:
    dispatcher = Dispatcher({"hook": channel(receiver.url)})
    for _ in range(3):  # the evaluator re-emits the same firing record (restart, replay)
        dispatcher.deliver(record())
    dispatcher.deliver(record(state="resolved"))
    dispatcher.deliver(record(state="resolved"))
    states = [r.body["alert"]["state"] for r in receiver.requests]
    assert states == ["firing", "resolved"]
    assert dispatcher.stats["hook"].delivered == 2 and dispatcher.stats["hook"].deduplicated == 3


def test_a_failed_delivery_is_retried_on_re_emission(receiver: Any) -> None:
    receiver.script.extend([(503, {})] * FAST.max_attempts)
    dispatcher = Dispatcher({"hook": channel(receiver.url)})
    dispatcher.deliver(record())
    assert dispatcher.stats["hook"].failed == 1
    dispatcher.deliver(record())  # the receiver has recovered
    assert dispatcher.stats["hook"].delivered == 1 and dispatcher.stats["hook"].deduplicated == 0


def test_dedup_memory_is_bounded(receiver: Any) -> None:
    dispatcher = Dispatcher({"hook": channel(receiver.url)}, dedup_entries=2)
    for alert_id in ("a", "b", "c"):
        dispatcher.deliver(record(alert_id=alert_id))
    dispatcher.deliver(record(alert_id="a"))  # forgotten: delivered again (at-least-once, bounded memory)
    dispatcher.deliver(record(alert_id="c"))  # remembered
    assert [r.body["alert"]["alert_id"] for r in receiver.requests] == ["a", "b", "c", "a"]


def test_a_channel_that_raises_is_counted() -> None:
    class Exploding:
        name = "hook"

        def send(self, record: AlertRecord) -> object:
            raise RuntimeError("bug")

    dispatcher = Dispatcher({"hook": Exploding()})  # type: ignore[dict-item]
    dispatcher.deliver(record())
    assert dispatcher.stats["hook"].failure_reasons == {"channel raised RuntimeError": 1}


def test_mock_transport_is_injectable() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    hook = WebhookChannel("http://hooks.invalid/x", client=httpx.Client(transport=httpx.MockTransport(handler)))
    assert hook.send(record()).ok and seen[0].headers["Idempotency-Key"] == "a1b2c3:firing"


def test_log_channel(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ragmon.alerts")
    log = LogChannel()
    assert log.send(record()).ok and log.send(record(state="resolved")).ok
    firing, resolved = caplog.records
    assert firing.levelno == logging.ERROR and "alert_id=a1b2c3" in firing.getMessage()
    assert "traces=t-1,t-2" in firing.getMessage()
    assert resolved.levelno == logging.INFO


def test_channels_from_config(receiver: Any) -> None:
    config = AlertsConfig.model_validate(
        {
            "channels": {
                "hook": {
                    "type": "webhook",
                    "url": receiver.url,
                    "format": "slack",
                    "headers": {"Authorization": "Bearer k"},
                }
            }
        }
    )
    channels = build_channels(config)
    assert set(channels) == {"log", "hook"}
    assert channels["hook"].send(record()).ok
    assert receiver.requests[0].headers["Authorization"] == "Bearer k"
