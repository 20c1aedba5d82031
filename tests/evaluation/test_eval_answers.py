"""Reference-based answer metrics and refusal correctness, on hand-checked strings and a fake embedder."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from ragmon.evaluation.answers import (
    Fact,
    check_facts,
    exact_match,
    normalise_answer,
    semantic_similarity,
    token_f1,
)
from ragmon.evaluation.refusal import (
    RefusalOutcome,
    is_refusal,
    refusal_outcome,
    summarise_refusals,
)


class BagOfWordsEmbedder:
    """A deterministic stand-in for MiniLM: counts of a fixed vocabulary, so cosines are hand-checkable."""

    def __init__(self, vocabulary: Sequence[str]) -> None:
        self.vocabulary = list(vocabulary)
        self.calls: list[list[str]] = []

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.array([[normalise_answer(t).split().count(w) for w in self.vocabulary] for t in texts], float)


def test_normalisation_is_squads() -> None:
    assert normalise_answer("  The Eiffel-Tower, in PARIS!  ") == "eiffeltower in paris"
    assert normalise_answer("An apple a day") == "apple day"


def test_exact_match_best_over_references() -> None:
    assert exact_match("The Paris.", "paris") == 1.0
    assert exact_match("Paris, France", ["Lyon", "paris france"]) == 1.0
    assert exact_match("Paris is the capital", "Paris") == 0.0
    with pytest.raises(ValueError):
        exact_match("x", [])


def test_token_f1_hand_computed() -> None:
    # prediction tokens: [eiffel, tower, is, in, paris]; reference: [in, paris]: common 2 → P 2/5, R 1 → F1 4/7.
    assert token_f1("The Eiffel Tower is in Paris", "in Paris") == pytest.approx(4 / 7)
    assert token_f1("Paris", ["Lyon", "Paris"]) == 1.0
    assert token_f1("", "") == 1.0
    assert token_f1("", "Paris") == 0.0
    assert token_f1("the a an", "Paris") == 0.0  # only articles: empty after normalisation


def test_fact_checks_need_every_fact_and_no_forbidden_phrase() -> None:
    facts = [Fact(("1889", "eighteen eighty-nine"), name="year"), Fact(("Gustave Eiffel", "Eiffel's company"))]
    good = check_facts("It opened in 1889, built by Gustave Eiffel's firm.", facts, must_not=["1887"])
    assert good.found == ("year",) and good.missing == ("Gustave Eiffel",)
    assert not good.passed and good.fact_recall == 0.5
    assert check_facts("Built by Gustave Eiffel, finished in eighteen eighty-nine.", facts).passed
    forbidden = check_facts("Finished in 1889 by Gustave Eiffel; started 1887.", facts, must_not=["1887"])
    assert forbidden.forbidden_found == ("1887",) and not forbidden.passed
    # Word boundaries: "Parisian" does not contain the fact "Paris".
    assert check_facts("A Parisian landmark", [Fact(("Paris",))]).missing == ("Paris",)
    assert check_facts("anything", []).fact_recall == 1.0
    with pytest.raises(ValueError):
        Fact(("the",))


def test_semantic_similarity_with_injected_embedder() -> None:
    embed = BagOfWordsEmbedder(["paris", "capital", "lyon"])
    assert semantic_similarity("Paris capital", "capital Paris", embed) == pytest.approx(1.0)
    assert semantic_similarity("Paris", "capital", embed) == pytest.approx(0.0)
    assert semantic_similarity("Paris capital", ["Lyon", "Paris"], embed) == pytest.approx(1 / math.sqrt(2))
    assert embed.calls[-1] == ["Paris capital", "Lyon", "Paris"]  # one batched call
    assert math.isnan(semantic_similarity("nothing known", "Paris", embed))  # zero vector: undefined, not 0


def test_semantic_similarity_rejects_wrong_shapes() -> None:
    with pytest.raises(ValueError, match="shape"):
        semantic_similarity("a", "b", lambda texts: np.zeros(3))


@pytest.mark.parametrize(
    "answer",
    ["I don't know.", "The context does not mention the launch date.", "Not enough information to answer.", ""],
)
def test_refusals_are_recognised(answer: str) -> None:
    assert is_refusal(answer)


@pytest.mark.parametrize("answer", ["The tower opened in 1889.", "I know the answer: 42."])
def test_answers_are_not_refusals(answer: str) -> None:
    assert not is_refusal(answer)


def test_both_refusal_errors_are_counted() -> None:
    outcomes = [
        refusal_outcome(answerable=False, refused=True),
        refusal_outcome(answerable=False, refused=False),
        refusal_outcome(answerable=True, refused=True),
        refusal_outcome(answerable=True, refused=False),
        refusal_outcome(answerable=True, refused=False),
    ]
    assert outcomes[:3] == [
        RefusalOutcome.CORRECT_REFUSAL,
        RefusalOutcome.MISSED_REFUSAL,
        RefusalOutcome.WRONG_REFUSAL,
    ]
    summary = summarise_refusals(outcomes)
    assert (summary.correct_refusals, summary.missed_refusals, summary.wrong_refusals, summary.answered) == (1, 1, 1, 2)
    assert summary.unanswerable_refusal_rate == 0.5
    assert summary.wrong_refusal_rate == pytest.approx(1 / 3)
    assert summary.accuracy == pytest.approx(3 / 5)
    assert summarise_refusals([]).accuracy is None
