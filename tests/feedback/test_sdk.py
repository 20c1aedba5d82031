"""ragmon.feedback against a real agent: the SDK's spans and feedback go to the same receiver with the same key;
feedback names its request by trace id (hex text, OpenTelemetry's int, the current span's) or by the app's own
request id; bad arguments are counted and never raise; shutdown flushes what is queued."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider

import ragmon
from ragmon.agent.agent import Agent
from tests.feedback.conftest import API_KEYS, by_feature, poll, receiver_url


def _configure(agent: Agent, provider: TracerProvider) -> None:
    ragmon.configure(
        service_name="feedback-sdk-test",
        endpoint=receiver_url(agent),
        api_key=API_KEYS["acme"],
        tracer_provider=provider,
    )


def test_feedback_by_every_form_of_naming_the_request_reaches_its_trace(agent: Agent) -> None:
    _configure(agent, TracerProvider())
    with ragmon.request("sdk-hex") as req:
        hex_id = req.trace_id
    with ragmon.request("sdk-int") as req:
        int_id = int(req.trace_id or "0", 16)
    with ragmon.request("sdk-current"):
        assert ragmon.feedback(thumbs="down", comment="wrong plan", user="u1")  # the current span's trace
    with ragmon.request("sdk-request-id", request_id="order-sdk-1"):
        pass
    assert ragmon.feedback(trace_id=hex_id, thumbs="up", user="u1")
    assert ragmon.feedback(trace_id=int_id, rating=2, user="u1")
    assert ragmon.feedback(trace_id=hex_id, name="copied", score=1.0)
    assert ragmon.feedback(request_id="order-sdk-1", rating=5)
    ragmon.shutdown()  # flushes spans and feedback

    wanted = {"sdk-hex", "sdk-int", "sdk-current", "sdk-request-id"}
    rows = poll(
        lambda: by_feature(agent.store.feedback_summary(3600, tenant="acme")),
        lambda got: wanted <= set(got) and got["sdk-hex"]["feedback"] == 2,
    )
    assert (rows["sdk-hex"]["thumbs_up"], rows["sdk-hex"]["scores"]) == (1, 1)
    assert (rows["sdk-int"]["ratings"], rows["sdk-int"]["negative_share"]) == (1, 1.0)
    assert rows["sdk-current"]["thumbs_down"] == 1
    assert rows["sdk-request-id"]["mean_rating"] == 5.0
    sources = agent.store.query("SELECT DISTINCT source FROM feedback_writes WHERE comment = 'wrong plan'")
    assert sources == [{"source": "api"}]


def test_bad_arguments_are_counted_and_logged_never_raised(agent: Agent, caplog: pytest.LogCaptureFixture) -> None:
    _configure(agent, TracerProvider())
    bad = [
        {"thumbs": "up"},  # no span is current and nothing names the request
        {"trace_id": "not-hex", "thumbs": "up"},
        {"trace_id": 0, "thumbs": "up"},
        {"trace_id": "a" * 32, "rating": 7},
        {"trace_id": "a" * 32, "rating": True},
        {"trace_id": "a" * 32, "thumbs": "up", "rating": 3},
        {"trace_id": "a" * 32, "score": 1.0},  # a score needs a name
        {"trace_id": "a" * 32, "score": float("nan"), "name": "x"},
        {"trace_id": "a" * 32, "request_id": "r", "thumbs": "up"},
        {"trace_id": "a" * 32, "thumbs": "up", "comment": "c" * 5000},
        {"trace_id": "a" * 32, "thumbs": "up", "name": "stray"},
    ]
    with caplog.at_level(logging.WARNING, logger="ragmon"):
        for arguments in bad:
            assert ragmon.feedback(**arguments) is False  # type: ignore[arg-type]
    assert ragmon.stats()["problems"]["feedback_invalid"] == len(bad)
    assert any("ragmon.feedback" in record.getMessage() for record in caplog.records)
    assert ragmon.stats()["feedback"]["sent"] == 0


def test_not_configured_it_is_a_no_op() -> None:
    assert ragmon.feedback(trace_id="a" * 32, thumbs="up") is False


def test_an_unreachable_agent_costs_the_app_nothing_and_is_counted() -> None:
    ragmon.configure(
        endpoint="http://127.0.0.1:9",
        api_key="k",
        tracer_provider=TracerProvider(),
        settings={"export": {"max_attempts": 2, "retry_deadline_s": 1.0}},
    )
    assert ragmon.feedback(trace_id="b" * 32, thumbs="down")
    assert ragmon.force_flush(30.0)
    dropped = ragmon.stats()["feedback"]["dropped"]
    assert sum(dropped.values()) == 1 and next(iter(dropped)).startswith("retries_exhausted")


def test_the_readme_feedback_settings_are_valid() -> None:
    import re
    from pathlib import Path

    from ragmon.settings import load_settings

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```toml\n(.*?)```", readme, flags=re.S) if "feedback_keys" in b]
    settings = load_settings(__import__("tomllib").loads(block), env={})
    assert list(settings.agent.feedback_keys) == ["acme"] and settings.agent.feedback_origins == [
        "https://app.example.com"
    ]
