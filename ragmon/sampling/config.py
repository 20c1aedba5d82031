"""Sampler configuration: a typed list of policies (a union on `type`), validated at start-up.

An unknown policy type fails with a message naming the valid ones; units are in the field names.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ragmon.sampling.policies import Policy
from ragmon.sampling.policies.attribute_rule import AttributeRulePolicy
from ragmon.sampling.policies.error import ErrorPolicy
from ragmon.sampling.policies.probabilistic import ProbabilisticPolicy
from ragmon.sampling.policies.retrieval_health import RetrievalHealthPolicy
from ragmon.sampling.policies.slow import SlowPolicy


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorConfig(_Strict):
    type: Literal["error"]
    name: str = "error"


class SlowConfig(_Strict):
    """The request against an SLA (`trace_threshold_ms`) or its feature's recent p95 (`relative_to_p95`, with the
    floor `min_excess_ms`); stage rules only when asked for (see policies/slow.py for why)."""

    type: Literal["slow"]
    name: str = "slow"
    trace_threshold_ms: float | None = Field(default=None, gt=0)
    relative_to_p95: float | None = Field(default=None, gt=0)
    min_excess_ms: float = Field(default=100.0, ge=0)
    stage_threshold_ms: dict[str, float] = Field(default_factory=dict)
    stage_relative_to_p95: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _stage_rules_have_a_floor(self) -> SlowConfig:
        # a 0.4 ms search span is 2x a 0.2 ms p95: per stage, a ratio alone calls noise slow
        if self.stage_relative_to_p95 is not None and self.min_excess_ms <= 0:
            raise ValueError("stage_relative_to_p95 needs a floor: set min_excess_ms above 0 (e.g. 100)")
        return self


class RetrievalHealthConfig(_Strict):
    type: Literal["retrieval_health"]
    name: str = "retrieval_health"
    min_top1_score: float | None = None
    min_similarity_gap: float | None = None
    max_norm_deviation: float | None = Field(default=0.05, ge=0)


class AttributeRuleConfig(_Strict):
    type: Literal["attribute"]
    name: str
    field: Literal["feature", "user", "tenant"]
    values: list[str] = Field(min_length=1)
    action: Literal["keep", "drop"] = "keep"


class ProbabilisticConfig(_Strict):
    type: Literal["baseline"]
    name: str = "baseline"
    rate: float = Field(ge=0, le=1)


PolicyConfig = Annotated[
    ErrorConfig | SlowConfig | RetrievalHealthConfig | AttributeRuleConfig | ProbabilisticConfig,
    Field(discriminator="type"),
]
POLICY_TYPES = ("error", "slow", "retrieval_health", "attribute", "baseline")


def _default_policies() -> list[Any]:
    return [
        ErrorConfig(type="error"),
        SlowConfig(type="slow", relative_to_p95=1.0, min_excess_ms=100.0),
        RetrievalHealthConfig(type="retrieval_health"),
        ProbabilisticConfig(type="baseline", rate=0.05),
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


def build_policies(config: SamplerConfig) -> list[Policy]:
    policies: list[Policy] = []
    for entry in config.policies:
        if isinstance(entry, ErrorConfig):
            policies.append(ErrorPolicy(entry.name))
        elif isinstance(entry, SlowConfig):
            policies.append(
                SlowPolicy(
                    entry.name,
                    entry.trace_threshold_ms,
                    entry.relative_to_p95,
                    entry.min_excess_ms,
                    dict(entry.stage_threshold_ms),
                    entry.stage_relative_to_p95,
                )
            )
        elif isinstance(entry, RetrievalHealthConfig):
            policies.append(
                RetrievalHealthPolicy(
                    entry.name, entry.min_top1_score, entry.min_similarity_gap, entry.max_norm_deviation
                )
            )
        elif isinstance(entry, AttributeRuleConfig):
            policies.append(AttributeRulePolicy(entry.name, entry.field, frozenset(entry.values), entry.action))
        else:
            policies.append(ProbabilisticPolicy(entry.rate, entry.name))
    return policies
