"""Alert rules in the config file: which signal, which detector with which parameters, which scope, severity, channels.

    [agent.alerts]
    default_rules = true          # the rule set in `default_rules.py`; a rule of yours with the same name replaces one

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

from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from ragmon.drift.default_rules import DEFAULT_RULES
from ragmon.drift.detectors import (
    CusumDetector,
    KsDetector,
    PageHinkleyDetector,
    PsiDetector,
    SampleDetector,
    SeriesDetector,
    ThresholdDetector,
)
from ragmon.drift.detectors.base import Direction
from ragmon.drift.signals import SIGNALS, ScopeKey, SignalKind, SignalSpec

Severity = Literal["info", "warning", "critical"]
LOG_CHANNEL = "log"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Gated(_Strict):
    cooldown_s: float = Field(default=600.0, ge=0)  # no re-fire this soon after a resolve (data time)
    fire_after: int = Field(default=1, ge=1)
    clear_after: int = Field(default=1, ge=1)


class _Standardised(_Gated):
    direction: Direction | None = None  # None: the signal's bad direction
    z_clip: float = Field(default=4.0, gt=0)
    cap_factor: float = Field(default=2.0, ge=1)
    min_count: float = Field(default=1.0, ge=0)  # samples behind a window's value
    min_std: float | None = Field(default=None, ge=0)  # None: the signal's floor
    min_std_rel: float | None = Field(default=None, ge=0)


class CusumConfig(_Standardised):
    type: Literal["cusum"]
    k: float = Field(default=0.5, ge=0)
    h: float = Field(default=8.0, gt=0)
    clear_h: float = Field(default=2.0, ge=0)
    min_baseline_windows: int = Field(default=60, ge=2)


class PageHinkleyConfig(_Standardised):
    type: Literal["page_hinkley"]
    delta: float = Field(default=0.5, ge=0)
    lambda_: float = Field(default=8.0, gt=0, alias="lambda")
    clear_lambda: float = Field(default=2.0, ge=0)
    memory_windows: int = Field(default=1440, ge=1)
    min_windows: int = Field(default=30, ge=1)


class ThresholdConfig(_Gated):
    type: Literal["threshold"]
    fire: float
    clear: float
    direction: Literal["up", "down"] | None = None
    min_count: float = Field(default=1.0, ge=0)
    fire_after: int = Field(default=2, ge=1)
    clear_after: int = Field(default=2, ge=1)


class PsiConfig(_Gated):
    type: Literal["psi"]
    bins: int = Field(default=10, ge=2, le=100)
    epsilon: float = Field(default=1e-4, gt=0)
    watch: float = Field(default=0.1, ge=0)
    alert: float = Field(default=0.25, gt=0)
    min_baseline: int = Field(default=2000, ge=1)
    min_current: int = Field(default=200, ge=1)


class KsConfig(_Gated):
    type: Literal["ks"]
    alpha_fire: float = Field(default=1e-4, gt=0, lt=1)
    alpha_clear: float = Field(default=0.05, gt=0, lt=1)
    min_effect: float = Field(default=0.1, ge=0, lt=1)
    min_baseline: int = Field(default=1000, ge=1)
    min_current: int = Field(default=100, ge=1)


DetectorConfig = Annotated[
    CusumConfig | PageHinkleyConfig | ThresholdConfig | PsiConfig | KsConfig, Field(discriminator="type")
]
# detector type -> what it reads: one value per window, or the per-request values of two windows
DETECTOR_KINDS: dict[str, SignalKind] = {
    "cusum": "series",
    "page_hinkley": "series",
    "threshold": "series",
    "psi": "sample",
    "ks": "sample",
}


class ScopeFilter(_Strict):
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


class RuleConfig(_Strict):
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
        if self.signal == "sla_share" and self.sla_ms is None:
            raise ValueError(f"rule {self.name!r}: signal 'sla_share' needs sla_ms")
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
        spec, d = self.spec, self.detector
        gated: dict[str, Any] = {"cooldown_s": d.cooldown_s, "fire_after": d.fire_after, "clear_after": d.clear_after}
        if isinstance(d, CusumConfig | PageHinkleyConfig):
            standard: dict[str, Any] = {
                "direction": d.direction or spec.bad_direction,
                "z_clip": d.z_clip,
                "cap_factor": d.cap_factor,
                "min_count": d.min_count,
                "min_std": spec.min_std if d.min_std is None else d.min_std,
                "min_std_rel": spec.min_std_rel if d.min_std_rel is None else d.min_std_rel,
                **gated,
            }
            if isinstance(d, CusumConfig):
                return CusumDetector(
                    k=d.k, h=d.h, clear_h=d.clear_h, min_baseline_windows=d.min_baseline_windows, **standard
                )
            return PageHinkleyDetector(
                delta=d.delta,
                lambda_=d.lambda_,
                clear_lambda=d.clear_lambda,
                memory_windows=d.memory_windows,
                min_windows=d.min_windows,
                **standard,
            )
        if isinstance(d, ThresholdConfig):
            direction = d.direction or ("down" if spec.bad_direction == "down" else "up")
            return ThresholdDetector(fire=d.fire, clear=d.clear, direction=direction, min_count=d.min_count, **gated)
        if isinstance(d, PsiConfig):
            return PsiDetector(
                bins=d.bins,
                epsilon=d.epsilon,
                watch=d.watch,
                alert=d.alert,
                min_baseline=d.min_baseline,
                min_current=d.min_current,
                **gated,
            )
        return KsDetector(
            alpha_fire=d.alpha_fire,
            alpha_clear=d.alpha_clear,
            min_effect=d.min_effect,
            min_baseline=d.min_baseline,
            min_current=d.min_current,
            **gated,
        )


class WebhookChannelConfig(_Strict):
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


class LogChannelConfig(_Strict):
    type: Literal["log"]
    logger: str = "ragmon.alerts"


ChannelConfig = Annotated[WebhookChannelConfig | LogChannelConfig, Field(discriminator="type")]
CHANNEL_TYPES = ("webhook", "log")


class AlertsConfig(_Strict):
    """`[agent.alerts]`: the evaluator, its rules and where alerts go."""

    enabled: bool = True
    interval_s: float = Field(default=60.0, gt=0)  # how often the agent runs the evaluator
    settle_s: float = Field(default=120.0, ge=0)  # a window is judged only this long after it ends (late spans)
    max_catchup_windows: int = Field(default=1440, ge=1)  # after a pause, at most this many windows per scope
    default_rules: bool = True
    rules: list[RuleConfig] = Field(default_factory=list)
    channels: dict[str, ChannelConfig] = Field(default_factory=dict)
    dedup_entries: int = Field(default=10_000, ge=1)  # (alert id, state, channel) deliveries remembered

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
    """The rules that are on unless `default_rules = false` (`default_rules.DEFAULT_RULES`), validated."""
    return [RuleConfig.model_validate(entry) for entry in DEFAULT_RULES]
