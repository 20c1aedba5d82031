"""The metrics' pure scoring functions, on hand-computed cases."""

from __future__ import annotations

import math

import pytest
from ragmon.judges.metrics import AnswerRelevance, ContextPrecision, ContextRecall, ContextRelevance, Faithfulness
from ragmon.judges.metrics.context_precision import ranking_metrics
from ragmon.judges.metrics.faithfulness import RawVerdict, VerdictsOutput, _to_verdicts
from ragmon.judges.types import ClaimVerdict, Status, Verdict

S, U, C = Verdict.SUPPORTED, Verdict.UNSUPPORTED, Verdict.CONTRADICTED


def verdicts(*kinds: Verdict) -> list[ClaimVerdict]:
    return [ClaimVerdict(claim=f"c{i}", verdict=k) for i, k in enumerate(kinds)]


def test_faithfulness_is_supported_over_claims() -> None:
    assert Faithfulness._compute_score(verdicts(S, S, U, C)) == (0.5, Status.OK, [])
    assert Faithfulness._compute_score(verdicts(S)) == (1.0, Status.OK, [])
    assert Faithfulness._compute_score(verdicts(C, U)) == (0.0, Status.OK, [])


def test_faithfulness_refusal_scores_one_flagged_and_no_claims_is_undefined() -> None:
    assert Faithfulness._compute_score([], refusal=True) == (1.0, Status.OK, ["refusal"])
    assert Faithfulness._compute_score([]) == (None, Status.UNSCORABLE, [])


def test_unparseable_verdicts_count_as_unsupported_and_are_flagged() -> None:
    claims = ["a", "b", "c", "d"]
    output = VerdictsOutput(
        verdicts=[
            RawVerdict(claim=0, verdict="Supported"),  # case and spaces are tolerated
            RawVerdict(claim=1, verdict="probably"),  # not one of the three
            RawVerdict(claim="x", verdict="supported"),  # no usable index
            RawVerdict(claim=3, verdict="contradicted"),
        ]
    )
    out = _to_verdicts(claims, output)
    assert [v.verdict for v in out] == [S, U, U, C]
    assert [v.flag for v in out] == ["", "unparseable", "unparseable", ""]
    assert Faithfulness._compute_score(out) == (0.25, Status.OK, ["unparseable_verdicts"])


def test_context_precision_is_rank_weighted() -> None:
    # relevant at ranks 1 and 3: (1/1 + 2/3) / 2
    value, status = ContextPrecision._compute_score([True, False, True])
    assert status is Status.OK and value == pytest.approx((1 + 2 / 3) / 2)
    # the same relevant passages ranked lower score lower
    assert ContextPrecision._compute_score([False, True, True])[0] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert ContextPrecision._compute_score([False, False]) == (0.0, Status.OK)
    assert ContextPrecision._compute_score([]) == (None, Status.UNSCORABLE)


def test_ranking_metrics() -> None:
    m = ranking_metrics([False, True, False, True], k=3)
    assert m["precision_at_k"] == pytest.approx(1 / 3)
    assert m["mrr"] == pytest.approx(0.5)
    ideal = 1 + 1 / math.log2(3)
    assert m["ndcg_at_k"] == pytest.approx((1 / math.log2(3)) / ideal)
    assert ranking_metrics([False, False])["ndcg_at_k"] is None
    assert ranking_metrics([])["mrr"] is None


def test_context_relevance_and_recall() -> None:
    assert ContextRelevance._compute_score([1.0, 0.5, 0.0]) == (0.5, Status.OK)
    assert ContextRelevance._compute_score([]) == (None, Status.UNSCORABLE)
    assert ContextRecall._compute_score([True, True, False, True]) == (0.75, Status.OK)
    assert ContextRecall._compute_score([]) == (None, Status.UNSCORABLE)


def test_answer_relevance_mean_cosine_and_noncommittal() -> None:
    value, status = AnswerRelevance._compute_score([1.0, 0.0], [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert status is Status.OK and value == pytest.approx((1 + 0 + 1 / math.sqrt(2)) / 3)
    assert AnswerRelevance._compute_score([1.0, 0.0], [[1.0, 0.0]], noncommittal=True) == (0.0, Status.OK)
    assert AnswerRelevance._compute_score([1.0, 0.0], []) == (None, Status.UNSCORABLE)
    assert AnswerRelevance._compute_score([0.0, 0.0], [[1.0, 0.0]]) == (None, Status.UNSCORABLE)
