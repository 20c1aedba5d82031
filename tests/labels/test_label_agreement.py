"""The agreement figures' pure parts: which threshold a judge version decides with, and the confusion matrix."""

from __future__ import annotations

from ragmon.judges.label_agreement import agreement_by_version, confusion, default_threshold
from ragmon.judges.local_judge import expected_version
from ragmon.judges.local_model import MODELS


def test_a_local_judge_version_decides_faithfulness_with_its_models_threshold() -> None:
    version = expected_version(use_minilm=False)  # local:lexical-lr-v9.1:lexical
    assert default_threshold("faithfulness", version) == MODELS["lexical"].claim_threshold != 0.5
    assert default_threshold("answer_relevance", version) == 0.5
    assert default_threshold("faithfulness", "llm:gpt-4o-mini:p3") == 0.5
    assert default_threshold("faithfulness", "local:some-future-model:lexical") == 0.5
    # scores kept from an earlier version are read at that version's threshold, not the current one's
    assert default_threshold("faithfulness", "local:lexical-lr-v5:lexical") == 0.5314
    assert default_threshold("faithfulness", "local:minilm-lr-v3.1:all-MiniLM-L6-v2") == 0.4832
    # a threshold set in the judge's settings is in its version, and its verdicts are read at it
    custom = expected_version(use_minilm=False, threshold=0.6)
    assert custom == f"local:{MODELS['lexical'].version}@0.6:lexical"
    assert default_threshold("faithfulness", custom) == 0.6
    assert expected_version(use_minilm=False, threshold=MODELS["lexical"].claim_threshold) == version  # no change
    assert default_threshold("faithfulness", "local:lexical-lr-v9.1@bad:lexical") == 0.5


def test_confusion_and_the_threshold_in_use() -> None:
    assert confusion([True, True, False, False], [True, False, True, False]) == {"tp": 1, "fn": 1, "fp": 1, "tn": 1}
    rows = [
        {"metric": "faithfulness", "judge_version": "v", "trace_id": str(i), "reviewer": "r", "label": y, "score": s}
        for i, (y, s) in enumerate([(True, 0.6), (False, 0.55), (False, None)])
    ]
    (at_default,) = agreement_by_version(rows)
    assert at_default["confusion"] == {"tp": 1, "fn": 0, "fp": 1, "tn": 1} and at_default["unscored"] == 1
    (strict,) = agreement_by_version(rows, threshold=0.58)
    assert strict["confusion"] == {"tp": 1, "fn": 0, "fp": 0, "tn": 2} and strict["kappa"] == 1.0
