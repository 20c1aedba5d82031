"""The settings tree: RAGMON_* nesting, OTEL_* variables, precedence, secrets, fail-fast validation."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from ragmon.settings import load_settings, parse_key_values


def test_defaults_without_environment() -> None:
    settings = load_settings(env={})
    assert settings.export.endpoint == "http://127.0.0.1:4318"
    assert settings.sdk.capture_content is False
    assert settings.agent.otlp_grpc == "127.0.0.1:4317"


def test_otel_variables_are_honoured() -> None:
    env = {
        "OTEL_SERVICE_NAME": "docs-bot",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,team=search%20quality,broken",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=s3cret",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "True",
    }
    settings = load_settings(env=env)
    assert settings.sdk.service_name == "docs-bot"
    assert settings.sdk.resource_attributes == {"deployment.environment": "prod", "team": "search quality"}
    assert settings.export.endpoint == "http://collector:4318"
    assert settings.export.headers["x-api-key"].get_secret_value() == "s3cret"
    assert settings.export.timeout_s == 2.5
    assert settings.sdk.capture_content is True


@pytest.mark.parametrize(
    ("mode", "on"),
    [("span_only", True), ("SPAN_AND_EVENT", True), ("event_only", False), ("no_content", False), ("false", False)],
)
def test_genai_capture_modes_turn_content_on_when_text_goes_on_spans(mode: str, on: bool) -> None:
    # newer GenAI instrumentations take a mode instead of a boolean (with OTEL_SEMCONV_STABILITY_OPT_IN)
    env = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": mode}
    assert load_settings(env=env).sdk.capture_content is on


def test_traces_endpoint_variable_wins_and_loses_its_path() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/v1/traces",
    }
    assert load_settings(env=env).export.endpoint == "http://b:4318"


def test_ragmon_variables_nest_and_beat_otel_and_arguments_beat_both() -> None:
    env = {
        "OTEL_SERVICE_NAME": "from-otel",
        "RAGMON_SDK__SERVICE_NAME": "from-ragmon",
        "RAGMON_EXPORT__QUEUE_MAX_SPANS": "1000",
        "RAGMON_AGENT__API_KEYS": '{"tenant-a": "key-a"}',
        "RAGMON_JUDGE__API_KEY": "sk-test",
    }
    settings = load_settings(env=env)
    assert settings.sdk.service_name == "from-ragmon"
    assert settings.export.queue_max_spans == 1000
    assert settings.agent.api_keys["tenant-a"].get_secret_value() == "key-a"
    assert isinstance(settings.judge.api_key, SecretStr)
    assert "sk-test" not in repr(settings)  # secrets never print
    assert load_settings({"sdk": {"service_name": "from-arg"}}, env=env).sdk.service_name == "from-arg"


def test_invalid_values_fail_fast_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="queue_max_spans"):
        load_settings(env={"RAGMON_EXPORT__QUEUE_MAX_SPANS": "lots"})
    with pytest.raises(ValidationError, match="no_such_field"):
        load_settings(env={"RAGMON_SDK__NO_SUCH_FIELD": "1"})


def test_parse_key_values_skips_malformed_members() -> None:
    assert parse_key_values("a=1, b = two ,=x,c") == {"a": "1", "b": "two"}
