"""The SDK's one piece of global state: None until `ragmon.configure`, which makes every API live."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from opentelemetry.trace import Tracer

from ragmon.pricing import PriceTable

Redactor = Callable[[str, str], str]  # (attribute name, text) -> text to send


@dataclass
class State:
    tracer: Tracer
    prices: PriceTable
    capture_content: bool
    redact: Redactor | None
    max_attribute_chars: int
    index_vector_sample: int
    # Set on each request (root) span: the configured release and environment where the provider's resource lacks
    # them (a provider ragmon joined); empty when the resource says them, as it does on ragmon's own provider.
    request_attributes: dict[str, str] = field(default_factory=dict)
    problems: dict[str, int] = field(default_factory=dict)  # instrumentation_errors, redaction_errors, ...
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, problem: str) -> None:
        with self._lock:
            self.problems[problem] = self.problems.get(problem, 0) + 1


current: State | None = None
