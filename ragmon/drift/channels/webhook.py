"""The webhook channel: POST one JSON body per alert state change, with bounded retries.

Each outcome is classified once (`ragmon.retry`): 2xx delivered; 429 throttled and 502/503/504 or a transport error
retryable — retried with jittered exponential backoff, honouring `Retry-After`, within `RetryPolicy.max_attempts` and
`deadline_s`; any other status permanent (no retry). Failures come back as a `Delivery`, never as an exception.
Each request carries `Idempotency-Key: <alert id>:<state>` so a receiver can drop the duplicate a retry after a lost
response produces. The HTTP client (and so its transport) and the sleep function are injectable: tests count delays
instead of sleeping through a real `Retry-After`.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from typing import Literal

import httpx

from ragmon.drift.channels.base import Delivery
from ragmon.drift.channels.payloads import json_payload, slack_payload
from ragmon.drift.record import AlertRecord
from ragmon.retry import Outcome, RetryPolicy, classify_http_status, parse_retry_after
from ragmon.version import __version__


class WebhookChannel:
    def __init__(
        self,
        url: str,
        *,
        name: str = "webhook",
        payload_format: Literal["json", "slack"] = "json",
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
        retry: RetryPolicy | None = None,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._name = name
        self.url = url
        self.payload_format = payload_format
        self.headers = {"Content-Type": "application/json", "User-Agent": f"ragmon/{__version__}", **(headers or {})}
        self.retry = retry or RetryPolicy(max_attempts=5, initial_backoff_s=0.5, max_backoff_s=10.0, deadline_s=30.0)
        self.client = client or httpx.Client(timeout=timeout_s)
        self._owns_client = client is None
        self.sleep = sleep
        self.monotonic = monotonic
        self.rng = rng or random.Random()
        self.delays_s: list[float] = []  # every backoff taken, for tests and metrics

    @property
    def name(self) -> str:
        return self._name

    def body(self, record: AlertRecord) -> bytes:
        payload = slack_payload(record) if self.payload_format == "slack" else json_payload(record)
        return json.dumps(payload, allow_nan=False).encode()

    def send(self, record: AlertRecord) -> Delivery:
        body = self.body(record)
        headers = {**self.headers, "Idempotency-Key": f"{record.alert_id}:{record.state}"}
        started_s = self.monotonic()
        attempt = 0
        while True:
            attempt += 1
            retry_after_s: float | None = None
            try:
                response = self.client.post(self.url, content=body, headers=headers)
            except httpx.HTTPError as exc:  # connect, read, timeout, protocol: all worth another try
                outcome, reason = Outcome.RETRYABLE, type(exc).__name__
            else:
                outcome, reason = classify_http_status(response.status_code), f"http {response.status_code}"
                if outcome in (Outcome.THROTTLED, Outcome.RETRYABLE):
                    retry_after_s = parse_retry_after(response.headers.get("Retry-After"))
            if outcome is Outcome.OK:
                return Delivery(True, attempt)
            if outcome is Outcome.PERMANENT:
                return Delivery(False, attempt, reason)
            delay_s = self.retry.next_delay_s(attempt, self.monotonic() - started_s, retry_after_s, self.rng)
            if delay_s is None:
                return Delivery(False, attempt, f"retries exhausted ({reason})")
            self.delays_s.append(delay_s)
            self.sleep(delay_s)

    def close(self) -> None:
        if self._owns_client:
            self.client.close()
