"""Fault switches for the demo app: what a monitoring agent must notice, injected on purpose and seeded.

Each switch produces the symptom ragmon is built to catch:
- `slow_ms`:        extra latency inside a stage span (the tail sampler's slow policy, p95 alerts)
- `error_rate`:     a stage raises a realistic exception (ERROR spans, the error policy)
- `unfaithful_rate`: the answer gains a fabricated claim no passage supports (the faithfulness judge)
- `norm_bug`:       query vectors stop being unit length (norm-deviation attribute, drift alerts)
- `tool_calls`:     questions about defaults call the settings tool (tool spans)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ragmon.demo.errors import RateLimitError, ToolError

FAULT_STAGES = ("embed", "search", "rerank", "generate", "tool")

# The exception each stage's real dependency would raise.
STAGE_ERRORS: dict[str, Callable[[], Exception]] = {
    "embed": lambda: ConnectionError("embedding service refused the connection (127.0.0.1:8081)"),
    "search": lambda: TimeoutError("vector index did not answer within 2000 ms"),
    "rerank": lambda: ConnectionResetError("reranker connection reset by peer"),
    "generate": lambda: RateLimitError("429 Too Many Requests: rate limit reached for requests per minute"),
    "tool": lambda: ToolError("settings service returned 503"),
}

# Claims that sound like the docs and contradict them. None of them appears in the corpus (a test checks).
FABRICATED_CLAIMS = (
    "ragmon guarantees exactly-once delivery, so a duplicate span can never reach the store.",
    "By default the tail sampler keeps 45 % of all traces at random.",
    "The agent listens for OTLP over HTTP on port 9411 unless told otherwise.",
    "Content capture is switched on by default, so every question is stored in full.",
    "The SDK retries a failed export forever until the agent finally accepts it.",
    "Judges score every trace synchronously before the request returns to the user.",
    "ragmon stores the full query embedding vector on every embed span.",
)


@dataclass(frozen=True)
class Faults:
    slow_ms: Mapping[str, float] = field(default_factory=dict)  # stage -> extra milliseconds
    slow_rate: float = 1.0  # fraction of calls of a slow stage that are slowed
    error_rate: Mapping[str, float] = field(default_factory=dict)  # stage -> probability of raising
    unfaithful_rate: float = 0.0
    norm_bug: bool = False
    tool_calls: bool = True

    def __post_init__(self) -> None:
        for stage in (*self.slow_ms, *self.error_rate):
            if stage not in FAULT_STAGES:
                raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(FAULT_STAGES)}")
        for name, rate in (("slow_rate", self.slow_rate), ("unfaithful_rate", self.unfaithful_rate)):
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {rate}")
        for stage, rate in self.error_rate.items():
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"error rate for {stage} must be within [0, 1], got {rate}")
        for stage, extra_ms in self.slow_ms.items():
            if extra_ms < 0:
                raise ValueError(f"slow_ms for {stage} must be >= 0, got {extra_ms}")


def parse_stage_values(items: list[str] | None, what: str) -> dict[str, float]:
    """`["generate=30", "search=5"]` -> {"generate": 30.0, "search": 5.0}, for the CLI."""
    out: dict[str, float] = {}
    for item in items or []:
        stage, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"{what}: expected STAGE=NUMBER, got {item!r}")
        try:
            out[stage.strip()] = float(value)
        except ValueError as exc:
            raise ValueError(f"{what}: {value!r} is not a number") from exc
    return out


class FaultInjector:
    """Draws every fault from one seeded generator, so a run with the same seed injects the same faults."""

    def __init__(self, faults: Faults, seed: int = 0, sleep: Callable[[float], None] = time.sleep) -> None:
        self.faults = faults
        self._rng = random.Random(seed)
        self._sleep = sleep
        self.injected: list[str] = []  # what the current request got, for `Answer.injected`

    def start_request(self) -> None:
        self.injected = []

    def __call__(self, stage: str) -> None:
        """Runs inside the stage's span: sleep for a slow stage, raise for a failing one."""
        extra_ms = self.faults.slow_ms.get(stage, 0.0)
        if extra_ms > 0 and self._rng.random() < self.faults.slow_rate:
            self.injected.append(f"slow:{stage}")
            self._sleep(extra_ms / 1000.0)
        rate = self.faults.error_rate.get(stage, 0.0)
        if rate > 0 and self._rng.random() < rate:
            self.injected.append(f"error:{stage}")
            raise STAGE_ERRORS[stage]()

    def fabricated_claim(self) -> str | None:
        if self.faults.unfaithful_rate > 0 and self._rng.random() < self.faults.unfaithful_rate:
            self.injected.append("unfaithful")
            return self._rng.choice(FABRICATED_CLAIMS)
        return None

    def norm_bug(self) -> bool:
        if self.faults.norm_bug:
            self.injected.append("norm_bug")
        return self.faults.norm_bug
