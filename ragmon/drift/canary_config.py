"""`[agent.alerts.canary]`: the canary analysis of new releases (`ragmon.drift.canary`), apart from it so the rules'
configuration loads without the store."""

from __future__ import annotations

from pydantic import Field

from ragmon.drift.detectors import Strict


class CanaryConfig(Strict):
    """`[agent.alerts.canary]`: the canary analysis of new releases."""

    enabled: bool = True
    min_requests: int = Field(default=200, ge=20)  # the candidate's requests before the first look
    min_judged: int = Field(default=10, ge=2)  # judged traces per release for a quality or refusal test
    alpha: float = Field(default=0.05, gt=0, lt=1)  # family-wise false-alarm rate per release that changes nothing
    max_looks: int = Field(default=6, ge=1)  # looks at min_requests × 1, 2, 4 …
    channels: list[str] = Field(default_factory=lambda: ["log"])
    severity: str = "warning"
