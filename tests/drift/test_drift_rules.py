"""Rule configuration: defaults on, errors that name the valid choices, overrides by name, settings-file shape."""

from __future__ import annotations

import tomllib

import pytest
from pydantic import ValidationError

from ragmon.drift import SIGNALS, AlertsConfig, CusumDetector, KsDetector, PsiDetector, ScopeKey
from ragmon.drift.rules import DETECTOR_KINDS, default_rules


def rule(**fields: object) -> dict[str, object]:
    return {"name": "r", "signal": "latency_p95_ms", "detector": {"type": "cusum"}, **fields}


def test_defaults_cover_every_signal_and_build() -> None:
    config = AlertsConfig()
    rules = config.effective_rules()
    assert {r.signal for r in rules} == set(SIGNALS)
    for r in rules:
        r.build_detector()  # every default rule yields a working detector
    assert next(r for r in rules if r.name == "embedding_norm_jump").severity == "critical"


def test_unknown_signal_names_the_valid_ones() -> None:
    with pytest.raises(ValidationError) as info:
        AlertsConfig.model_validate({"rules": [rule(signal="latency_p99")]})
    message = str(info.value)
    assert "unknown signal 'latency_p99'" in message
    assert all(name in message for name in SIGNALS)


def test_unknown_detector_names_the_valid_ones() -> None:
    with pytest.raises(ValidationError) as info:
        AlertsConfig.model_validate({"rules": [rule(detector={"type": "ewma"})]})
    message = str(info.value)
    assert "unknown detector 'ewma'" in message
    assert all(name in message for name in DETECTOR_KINDS)


def test_distribution_detector_on_a_series_only_signal_is_an_error() -> None:
    with pytest.raises(ValidationError, match="valid detectors for it: cusum, page_hinkley, threshold"):
        AlertsConfig.model_validate({"rules": [rule(signal="error_rate", detector={"type": "ks"})]})


def test_bad_detector_parameters_are_reported_with_the_rule() -> None:
    with pytest.raises(ValidationError, match=r"rule 'r'.*clear_h"):
        AlertsConfig.model_validate({"rules": [rule(detector={"type": "cusum", "h": 3, "clear_h": 4})]})
    with pytest.raises(ValidationError, match="extra"):
        AlertsConfig.model_validate({"rules": [rule(detector={"type": "cusum", "hh": 3})]})


def test_undefined_channel_and_duplicate_names() -> None:
    with pytest.raises(ValidationError, match=r"undefined channel.*pager.*defined channels: log"):
        AlertsConfig.model_validate({"rules": [rule(channels=["pager"])]})
    with pytest.raises(ValidationError, match="duplicate rule names: r"):
        AlertsConfig.model_validate({"rules": [rule(), rule()]})
    with pytest.raises(ValidationError, match="unknown type 'email'; valid types: webhook, log"):
        AlertsConfig.model_validate({"channels": {"mail": {"type": "email"}}})


def test_sla_share_needs_an_sla() -> None:
    with pytest.raises(ValidationError, match="needs sla_ms"):
        AlertsConfig.model_validate({"rules": [rule(signal="sla_share", scope={"stages": [""]})]})


def test_a_rule_with_a_default_name_replaces_it_and_defaults_can_be_off() -> None:
    mine = rule(name="latency_p95_up", detector={"type": "cusum", "h": 5})
    config = AlertsConfig.model_validate({"rules": [mine, rule(name="extra")]})
    names = [r.name for r in config.effective_rules()]
    assert names.count("latency_p95_up") == 1 and names[-1] == "extra"
    replaced = next(r for r in config.effective_rules() if r.name == "latency_p95_up")
    assert isinstance(replaced.detector, type(replaced.detector)) and replaced.detector.h == 5  # type: ignore[union-attr]
    only_mine = AlertsConfig.model_validate({"default_rules": False, "rules": [rule()]})
    assert [r.name for r in only_mine.effective_rules()] == ["r"]
    disabled = AlertsConfig.model_validate({"rules": [{**mine, "enabled": False}]})
    assert "latency_p95_up" not in [r.name for r in disabled.effective_rules()]


def test_signal_defaults_fill_direction_and_std_floor() -> None:
    faithfulness = next(r for r in default_rules() if r.signal == "faithfulness")
    detector = faithfulness.build_detector()
    assert isinstance(detector, CusumDetector)
    assert detector.direction == "down" and detector.min_std == SIGNALS["faithfulness"].min_std
    assert isinstance(next(r for r in default_rules() if r.signal == "top1_score").build_detector(), PsiDetector)
    assert isinstance(next(r for r in default_rules() if r.signal == "similarity_gap").build_detector(), KsDetector)


def test_scope_filter() -> None:
    config = AlertsConfig.model_validate({"rules": [rule(scope={"tenants": ["acme"], "stages": ["generate", ""]})]})
    scope = next(r for r in config.effective_rules() if r.name == "r").scope
    assert scope.matches(ScopeKey("acme", "qa", "generate"))
    assert scope.matches(ScopeKey("acme", "chat", ""))
    assert not scope.matches(ScopeKey("other", "qa", "generate"))
    assert not scope.matches(ScopeKey("acme", "qa", "retrieval"))


def test_the_settings_file_shape_validates() -> None:
    text = """
    [agent.alerts]
    settle_s = 90

    [[agent.alerts.rules]]
    name = "checkout_latency"
    signal = "latency_p95_ms"
    severity = "critical"
    channels = ["oncall", "log"]
    scope = { features = ["checkout"], stages = ["generate"] }
    detector = { type = "page_hinkley", lambda = 6 }

    [agent.alerts.channels.oncall]
    type = "webhook"
    url = "https://hooks.example.com/T000/B000"
    format = "slack"
    headers = { Authorization = "Bearer s3cret" }
    """
    config = AlertsConfig.model_validate(tomllib.loads(text)["agent"]["alerts"])
    checkout = next(r for r in config.effective_rules() if r.name == "checkout_latency")
    assert checkout.detector.type == "page_hinkley" and checkout.detector.lambda_ == 6  # type: ignore[union-attr]
    assert "s3cret" not in repr(config)  # headers are secrets


def test_every_detector_module_is_registered_with_its_settings() -> None:
    # A detector is its module (the detector and its settings) and one entry in DETECTOR_SETTINGS: a module left
    # out would be unreachable from any rule.
    from pathlib import Path

    from ragmon.drift import detectors

    folder = Path(detectors.__file__).parent
    modules = {path.stem for path in folder.glob("*.py")} - {"__init__", "base", "settings"}
    registered = {settings.__module__.rsplit(".", 1)[1] for settings in detectors.DETECTOR_SETTINGS}
    assert registered == modules
    assert set(detectors.DETECTORS) == set(DETECTOR_KINDS)
