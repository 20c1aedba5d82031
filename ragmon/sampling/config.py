"""Sampler configuration: a typed list of policies (a union on `type`), validated at start-up.

An unknown policy type fails with a message naming the valid ones; units are in the field names.
"""

from __future__ import annotations

from typing import Annotated, Any, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ragmon.sampling.policies import AnyPolicy
from ragmon.sampling.policies.attribute_rule import AttributeRulePolicy
from ragmon.sampling.policies.error import ErrorPolicy
from ragmon.sampling.policies.probabilistic import ProbabilisticPolicy
from ragmon.sampling.policies.retrieval_health import RetrievalHealthPolicy
from ragmon.sampling.policies.slow import SlowPolicy


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# The registration of each policy: a policy module's class joins this union (its `type` is the discriminator).
PolicyConfig = Annotated[
    ErrorPolicy | SlowPolicy | RetrievalHealthPolicy | AttributeRulePolicy | ProbabilisticPolicy,
    Field(discriminator="type"),
]
POLICY_TYPES: tuple[str, ...] = tuple(
    policy.model_fields["type"].default for policy in get_args(get_args(PolicyConfig)[0])
)


def _default_policies() -> list[Any]:
    return [
        ErrorPolicy(),
        SlowPolicy(relative_to_p95=1.0, min_excess_ms=100.0),
        RetrievalHealthPolicy(),
        ProbabilisticPolicy(rate=0.05),
    ]


class BudgetConfig(_Strict):
    traces_per_s: float | None = Field(default=None, gt=0)
    bytes_per_s: float | None = Field(default=None, gt=0)
    exempt: list[str] = Field(default_factory=lambda: ["error"])


class SamplerConfig(_Strict):
    policies: list[PolicyConfig] = Field(default_factory=_default_policies)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    decision_grace_s: float = Field(default=1.0, ge=0)  # after the root span: wait this long for late children
    decision_timeout_s: float = Field(default=30.0, gt=0)  # a trace whose root never arrives is decided then
    # what "recent" means for a feature's request p95 (request_latency.py): its last requests, and how many it
    # needs before a p95 is trusted
    request_p95_window: int = Field(default=2000, ge=1)
    request_p95_min_requests: int = Field(default=50, ge=1)
    max_traces: int = Field(default=50_000, ge=1)
    max_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    decision_cache_size: int = Field(default=200_000, ge=0)

    @model_validator(mode="after")
    def _window_holds_the_minimum(self) -> SamplerConfig:
        if self.request_p95_min_requests > self.request_p95_window:
            raise ValueError(
                f"request_p95_min_requests ({self.request_p95_min_requests}) cannot exceed request_p95_window "
                f"({self.request_p95_window})"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _known_policy_types(cls, data: Any) -> Any:
        for entry in (data or {}).get("policies", []) if isinstance(data, dict) else []:
            kind = entry.get("type") if isinstance(entry, dict) else getattr(entry, "type", None)
            if kind not in POLICY_TYPES:
                raise ValueError(f"unknown sampling policy type {kind!r}; valid types: {', '.join(POLICY_TYPES)}")
        return data


def build_policies(config: SamplerConfig) -> list[AnyPolicy]:
    """The configured policies, in order: each entry is its policy (settings and rule in one class)."""
    return list(config.policies)
