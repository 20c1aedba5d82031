"""Alert rules in the config file: which signal, which detector with which parameters, which scope, severity, channels.

    [agent.alerts]
    default_rules = true          # each signal's rule in `signals.SIGNALS`; a rule of yours with its name replaces it

    [[agent.alerts.rules]]
    name = "checkout_latency"
    signal = "latency_p95_ms"
    severity = "critical"
    channels = ["oncall"]
    scope = { features = ["checkout"], stages = ["generate"] }
    detector = { type = "cusum", h = 6 }

    [agent.alerts.channels.oncall]
    type = "webhook"
    url = "https://hooks.slack.com/services/..."
    format = "slack"

Validated at start-up (fail fast): an unknown signal or detector names the valid ones; a distribution detector on a
series-only signal, a rule naming an undefined channel, or parameters a detector rejects are errors too. The "log"
channel always exists. Parameters a rule leaves out fall back to the detector's documented defaults, and the
direction and std floors to the signal's (`signals.SIGNALS`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, cast

from pydantic import Field, SecretStr, field_validator, model_validator

from ragmon.drift.canary_config import CanaryConfig
from ragmon.drift.detectors import (
    DETECTOR_SETTINGS,
    DETECTORS,
    DetectorSettings,
    SampleDetector,
    SeriesDetector,
    Strict,
)
from ragmon.drift.signals import SIGNALS, ScopeKey, SignalKind, SignalSpec

Severity = Literal["info", "warning", "critical"]
LOG_CHANNEL = "log"


# Which detector settings a rule may give: the union of every detector's, told apart by `type`. mypy reads it as
# the base class all of them share.
if TYPE_CHECKING:
    DetectorConfig = DetectorSettings
else:
    DetectorConfig = Annotated[Union[DETECTOR_SETTINGS], Field(discriminator="type")]  # noqa: UP007 - built from a tuple
# detector type -> what it reads: one value per window, or the per-request values of two windows
DETECTOR_KINDS: dict[str, SignalKind] = {name: cast(SignalKind, cls.kind) for name, cls in DETECTORS.items()}


class ScopeFilter(Strict):
    """Which scopes a rule watches; an empty list means every value. Each matching scope gets its own detector."""

    tenants: list[str] = Field(default_factory=list)
    features: list[str] = Field(default_factory=list)
    stages: list[str] = Field(default_factory=list)  # "" is the request as a whole

    def matches(self, key: ScopeKey) -> bool:
        return (
            (not self.tenants or key.tenant in self.tenants)
            and (not self.features or key.feature in self.features)
            and (not self.stages or key.stage in self.stages)
        )


class RuleConfig(Strict):
    name: str = Field(min_length=1)
    signal: str
    detector: DetectorConfig
    scope: ScopeFilter = Field(default_factory=ScopeFilter)
    severity: Severity = "warning"
    channels: list[str] = Field(default_factory=lambda: [LOG_CHANNEL])
    enabled: bool = True
    window_minutes: int = Field(default=1, ge=1, le=1440)  # series: one value per this many minutes
    baseline_minutes: int = Field(default=1440, ge=1)  # how much history the baseline covers
    baseline_lag_minutes: int = Field(default=60, ge=0)  # the baseline ends this long before the data it judges
    baseline_refresh_minutes: int = Field(default=60, ge=1)  # re-read the baseline this often (never while firing)
    current_minutes: int = Field(default=30, ge=1)  # sample detectors: the current window
    warmup_windows: int = Field(default=60, ge=0)  # series: windows replayed when a scope is first seen
    sla_ms: float | None = Field(default=None, gt=0)  # sla_share: the latency SLA

    @model_validator(mode="before")
    @classmethod
    def _known_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        signal = data.get("signal")
        if signal is not None and signal not in SIGNALS:
            raise ValueError(f"unknown signal {signal!r}; valid signals: {', '.join(SIGNALS)}")
        detector = data.get("detector")
        kind = detector.get("type") if isinstance(detector, dict) else getattr(detector, "type", None)
        if kind not in DETECTOR_KINDS:
            raise ValueError(f"unknown detector {kind!r}; valid detectors: {', '.join(DETECTOR_KINDS)}")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> RuleConfig:
        spec = self.spec
        kind = DETECTOR_KINDS[self.detector.type]
        if kind not in spec.kinds:
            valid = [name for name, k in DETECTOR_KINDS.items() if k in spec.kinds]
            raise ValueError(
                f"rule {self.name!r}: detector {self.detector.type!r} needs a {kind} signal and {self.signal!r} has"
                f" none; valid detectors for it: {', '.join(valid)}"
            )
        if self.spec.needs_sla_ms and self.sla_ms is None:
            raise ValueError(f"rule {self.name!r}: signal {self.signal!r} needs sla_ms")
        try:
            self.build_detector()
        except ValueError as exc:
            raise ValueError(f"rule {self.name!r}: {exc}") from exc
        return self

    @property
    def spec(self) -> SignalSpec:
        return SIGNALS[self.signal]

    @property
    def kind(self) -> SignalKind:
        return DETECTOR_KINDS[self.detector.type]

    def build_series_detector(self) -> SeriesDetector:
        detector = self.build_detector()
        if self.kind != "series":
            raise TypeError(f"rule {self.name!r}: {self.detector.type} is not a series detector")
        return cast(SeriesDetector, detector)

    def build_sample_detector(self) -> SampleDetector:
        detector = self.build_detector()
        if self.kind != "sample":
            raise TypeError(f"rule {self.name!r}: {self.detector.type} is not a sample detector")
        return cast(SampleDetector, detector)

    def build_detector(self) -> SeriesDetector | SampleDetector:
        return self.detector.build(self.spec)


class WebhookChannelConfig(Strict):
    type: Literal["webhook"]
    url: str
    format: Literal["json", "slack"] = "json"  # slack: {"text": ..., "blocks": [...]}
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    timeout_s: float = Field(default=10.0, gt=0)
    max_attempts: int = Field(default=5, ge=1)
    initial_backoff_s: float = Field(default=0.5, ge=0)
    max_backoff_s: float = Field(default=10.0, ge=0)
    deadline_s: float = Field(default=30.0, gt=0)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"webhook url must start with http:// or https://, got {url!r}")
        return url


class LogChannelConfig(Strict):
    type: Literal["log"]
    logger: str = "ragmon.alerts"


ChannelConfig = Annotated[WebhookChannelConfig | LogChannelConfig, Field(discriminator="type")]
CHANNEL_TYPES = ("webhook", "log")


class AlertsConfig(Strict):
    """`[agent.alerts]`: the evaluator, its rules and where alerts go."""

    enabled: bool = True
    interval_s: float = Field(default=60.0, gt=0)  # how often the agent runs the evaluator
    settle_s: float = Field(default=120.0, ge=0)  # a window is judged only this long after it ends (late spans)
    max_catchup_windows: int = Field(default=1440, ge=1)  # after a pause, at most this many windows per scope
    default_rules: bool = True
    rules: list[RuleConfig] = Field(default_factory=list)
    channels: dict[str, ChannelConfig] = Field(default_factory=dict)
    dedup_entries: int = Field(default=10_000, ge=1)  # (alert id, state, channel) deliveries remembered
    canary: CanaryConfig = Field(default_factory=CanaryConfig)  # new releases compared with the one before

    @model_validator(mode="before")
    @classmethod
    def _known_channel_types(cls, data: Any) -> Any:
        channels = data.get("channels") if isinstance(data, dict) else None
        for name, entry in (channels or {}).items():
            kind = entry.get("type") if isinstance(entry, dict) else getattr(entry, "type", None)
            if kind not in CHANNEL_TYPES:
                raise ValueError(f"channel {name!r}: unknown type {kind!r}; valid types: {', '.join(CHANNEL_TYPES)}")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> AlertsConfig:
        names = [rule.name for rule in self.rules]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate rule names: {', '.join(duplicates)}")
        defined = {LOG_CHANNEL, *self.channels}
        missing_canary = [c for c in self.canary.channels if c not in defined]
        if missing_canary:
            raise ValueError(
                f"canary names undefined channel(s) {', '.join(missing_canary)}; defined: {', '.join(sorted(defined))}"
            )
        for rule in self.effective_rules():
            missing = [c for c in rule.channels if c not in defined]
            if missing:
                raise ValueError(
                    f"rule {rule.name!r} names undefined channel(s) {', '.join(missing)};"
                    f" defined channels: {', '.join(sorted(defined))}"
                )
        return self

    def effective_rules(self) -> list[RuleConfig]:
        """The default rules (unless turned off) with same-named rules of the config replacing them, then the rest."""
        mine = {rule.name: rule for rule in self.rules}
        base = default_rules() if self.default_rules else []
        merged = [mine.pop(rule.name, rule) for rule in base]
        merged.extend(mine.values())
        return [rule for rule in merged if rule.enabled]


def default_rules() -> list[RuleConfig]:
    """The rules that are on unless `default_rules = false`: each signal's `default_rule`, validated."""
    return [RuleConfig.model_validate({**spec.default_rule, "signal": name}) for name, spec in SIGNALS.items()]
