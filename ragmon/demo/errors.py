"""Exceptions the demo app raises, real or injected by a fault switch.

    DemoError
    ├── GeneratorError              the LLM call failed (bad status, malformed reply, transport)
    │   └── RateLimitError          the LLM endpoint answered 429
    └── ToolError                   a tool could not produce a result

Injected faults also use built-in exceptions where a real client would raise them (ConnectionError from an
embedding service, TimeoutError from a vector index), so error.type on the spans looks like production.
"""

from __future__ import annotations


class DemoError(Exception):
    """Base of the demo app's own exceptions."""


class GeneratorError(DemoError):
    """The answer could not be generated."""


class RateLimitError(GeneratorError):
    """The LLM endpoint refused the call for rate limiting (HTTP 429)."""


class ToolError(DemoError):
    """A tool call failed."""
