"""The app's release and environment from the SDK: `ragmon.configure(release=, environment=)`, `RAGMON_SDK__*` or
the standard `OTEL_RESOURCE_ATTRIBUTES` put `service.version` and `deployment.environment.name` on the resource of
the provider ragmon creates; a provider ragmon joins keeps its resource, so there they ride on the request span."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import ragmon
from ragmon import attributes as attr
from tests.conftest import Captured, stage_of

# A fresh interpreter: the global TracerProvider can be set once per process, and this is the path where ragmon
# creates it (nobody installed one).
_OWN_PROVIDER = """
import json, ragmon
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
ragmon.configure(span_exporter=exporter, **json.loads(__import__("sys").argv[1]))
with ragmon.request("qa"):
    with ragmon.search():
        pass
ragmon.force_flush()
print(json.dumps([{"resource": dict(s.resource.attributes), "attributes": dict(s.attributes or {})}
                  for s in exporter.get_finished_spans()]))
"""


def _own_provider_spans(env: dict[str, str], **arguments: str) -> list[dict[str, dict[str, str]]]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RAGMON_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-c", _OWN_PROVIDER, json.dumps(arguments)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    spans: list[dict[str, dict[str, str]]] = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(spans) == 2
    return spans


def test_configure_puts_the_release_and_environment_on_the_resource_it_creates() -> None:
    for span in _own_provider_spans({}, release="2.3.1", environment="prod"):
        assert span["resource"][attr.SERVICE_VERSION] == "2.3.1"
        assert span["resource"][attr.DEPLOYMENT_ENVIRONMENT_NAME] == "prod"
        assert attr.SERVICE_VERSION not in span["attributes"]  # the resource says it once for every span


def test_the_release_comes_from_the_standard_variable_or_ragmons_and_the_argument_beats_both() -> None:
    standard = {"OTEL_RESOURCE_ATTRIBUTES": "service.version=2.3.1,deployment.environment.name=staging"}
    for span in _own_provider_spans(standard):
        assert span["resource"][attr.SERVICE_VERSION] == "2.3.1"
        assert span["resource"][attr.DEPLOYMENT_ENVIRONMENT_NAME] == "staging"
    ours = {**standard, "RAGMON_SDK__RELEASE": "2.4.0", "RAGMON_SDK__ENVIRONMENT": "prod"}
    for span in _own_provider_spans(ours):
        assert span["resource"][attr.SERVICE_VERSION] == "2.4.0"
        assert span["resource"][attr.DEPLOYMENT_ENVIRONMENT_NAME] == "prod"
    for span in _own_provider_spans(ours, release="2.5.0"):
        assert span["resource"][attr.SERVICE_VERSION] == "2.5.0"


def test_a_joined_provider_keeps_its_resource_and_the_request_span_carries_the_release(
    captured: Callable[..., Captured],
) -> None:
    capture = captured(release="2.3.1", environment="prod")
    with ragmon.request("qa"), ragmon.search():
        pass
    spans = {stage_of(s): s for s in capture.spans()}
    root = spans["request"].attributes or {}
    assert (root.get(attr.SERVICE_VERSION), root.get(attr.DEPLOYMENT_ENVIRONMENT_NAME)) == ("2.3.1", "prod")
    # the agent takes the trace's release from its outermost span that has one: the children need not repeat it
    assert attr.SERVICE_VERSION not in (spans["search"].attributes or {})


def test_a_joined_provider_whose_resource_says_the_release_is_not_repeated_on_spans() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider(resource=Resource.create({attr.SERVICE_VERSION: "2.3.1"}))
    exporter = InMemorySpanExporter()
    ragmon.configure(tracer_provider=provider, span_exporter=exporter, release="2.3.1")
    with ragmon.request("qa"):
        pass
    assert ragmon.force_flush(5.0)
    (root,) = exporter.get_finished_spans()
    assert attr.SERVICE_VERSION not in (root.attributes or {})
    assert root.resource.attributes[attr.SERVICE_VERSION] == "2.3.1"
