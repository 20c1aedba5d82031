"""Feedback settings fail fast: a feedback key must be nobody else's key, an origin is scheme://host[:port]."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ragmon.settings import load_settings


@pytest.mark.parametrize(
    "agent",
    [
        {"api_keys": {"acme": "same"}, "feedback_keys": {"acme": ["same"]}},
        {"reviewer_keys": {"acme": {"ann": "same"}}, "feedback_keys": {"globex": ["same"]}},
        {"feedback_keys": {"acme": ["same"], "globex": ["same"]}},
        {"feedback_keys": {"acme": [""]}},
        {"feedback_origins": ["*"]},
        {"feedback_origins": ["https://*.example.com"]},
        {"feedback_origins": ["https://app.example.com/path"]},
        {"feedback_origins": ["app.example.com"]},
    ],
)
def test_bad_feedback_settings_are_refused_at_start(agent: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        load_settings({"agent": agent}, env={})


def test_good_feedback_settings() -> None:
    settings = load_settings(
        {"agent": {"feedback_keys": {"acme": ["fb1", "fb2"]}, "feedback_origins": ["http://localhost:3000/"]}},
        env={},
    )
    assert settings.agent.feedback_origins == ["http://localhost:3000"]
    assert [k.get_secret_value() for k in settings.agent.feedback_keys["acme"]] == ["fb1", "fb2"]


def test_feedback_settings_from_the_environment() -> None:
    """The way a container is configured: a table and a list, each as JSON in its variable; a value that only starts
    with a bracket (an IPv6 listen address) stays text."""
    settings = load_settings(
        env={
            "RAGMON_AGENT__FEEDBACK_KEYS": '{"acme": ["fb1"]}',
            "RAGMON_AGENT__FEEDBACK_ORIGINS": '["https://app.example.com", "http://localhost:3000"]',
            "RAGMON_AGENT__OTLP_HTTP": "[::1]:4318",
        }
    )
    assert settings.agent.feedback_origins == ["https://app.example.com", "http://localhost:3000"]
    assert [k.get_secret_value() for k in settings.agent.feedback_keys["acme"]] == ["fb1"]
    assert settings.agent.otlp_http == "[::1]:4318"
