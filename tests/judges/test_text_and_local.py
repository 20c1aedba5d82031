"""Text handling and the local judge on constructed rows."""

from __future__ import annotations

from collections.abc import Sequence

from ragmon.judges import text
from ragmon.judges.local_judge import LocalJudge
from ragmon.judges.local_model import MODELS
from ragmon.judges.support_features import FEATURE_SETS, SEMANTIC_FEATURES
from ragmon.judges.types import RagSample, Status, Verdict

PASSAGES = [
    "The Eiffel Tower was completed in 1889. It is 330 metres tall and stands in Paris.",
    "Gustave Eiffel's company designed and built the tower.",
]


def test_citations_are_stripped_and_answers_split_into_claims() -> None:
    assert text.strip_citations("Paris is the capital [1]. It is big [2, 3].") == "Paris is the capital. It is big."
    claims = text.split_claims("The tower is in Paris [1]. It was finished in 1889; it is 330 metres tall.")
    assert claims == ["The tower is in Paris.", "It was finished in 1889", "it is 330 metres tall."]
    assert text.split_claims("Dr. Smith lives in the U.S. and works there.") == [
        "Dr. Smith lives in the U.S. and works there."
    ]


def test_claims_are_split_the_same_whatever_the_case() -> None:
    """v7: chat replies are often all lower case; their sentences are claims as a capitalised reply's are."""
    reply = "Yes. The tower was completed in 1889!  Wow, it is tall."
    assert (
        text.split_claims(reply.lower())
        == [c.lower() for c in text.split_claims(reply)]
        == [
            "the tower was completed in 1889!",
            "wow, it is tall.",
        ]
    )  # the lone "yes." asserts nothing, in either case
    # a stop after a single letter, inside a dotted abbreviation or after a listed abbreviation ends no sentence
    assert text.split_claims("he left the u.s. in may. it was approx. five weeks") == [
        "he left the u.s. in may.",
        "it was approx. five weeks",
    ]
    assert text.split_claims("plan b. was chosen, etc. and so on") == ["plan b. was chosen, etc. and so on"]
    # passages keep the old rule: only claims are split before a lower-case word
    assert text.sentences("it is tall. it is old.") == ["it is tall. it is old."]


def test_stemming_lite_and_negation() -> None:
    assert text.stem("winning") == text.stem("wins") == "win"
    assert text.stem("studies") == "study"
    assert text.tokens("Presley's songs") == ["presley", "songs"]
    assert text.has_negation("It wasn't built") and not text.has_negation("It was built")


async def test_local_judge_supports_a_faithful_answer() -> None:
    judge = LocalJudge(use_minilm=False)
    result = await judge.score(
        "faithfulness",
        RagSample(question="When?", answer="The Eiffel Tower was completed in 1889 [1].", passages=PASSAGES),
    )
    # graded: the probability the answer is faithful, at or above the judge's threshold (the claim's own support,
    # since the answer is one claim)
    assert result.status is Status.OK and result.value is not None and result.value >= judge.faithfulness_threshold
    assert [c.verdict for c in result.claims] == [Verdict.SUPPORTED]
    assert result.value == result.claims[0].support


async def test_local_judge_rejects_a_wrong_number_and_an_invented_name() -> None:
    judge = LocalJudge(use_minilm=False)
    sample = RagSample(
        answer="The Eiffel Tower was completed in 1889. It was designed by Frank Lloyd Wright.", passages=PASSAGES
    )
    result = await judge.score("faithfulness", sample)
    assert result.value is not None and result.value < judge.faithfulness_threshold  # one invented clause fails it
    assert [c.verdict for c in result.claims] == [Verdict.SUPPORTED, Verdict.UNSUPPORTED]
    # A wrong number in an otherwise copied sentence: v2 only lowered the support; v3's number_conflict (the claim's
    # number against the closest sentence's) flips the verdict, and v6 names it a contradiction.
    right = await judge.score("faithfulness", RagSample(answer="The tower was completed in 1889.", passages=PASSAGES))
    wrong = await judge.score("faithfulness", RagSample(answer="The tower was completed in 1925.", passages=PASSAGES))
    assert [c.verdict for c in right.claims] == [Verdict.SUPPORTED]
    assert [c.verdict for c in wrong.claims] == [Verdict.CONTRADICTED]


def test_a_refusal_declines_and_asserts_nothing_else() -> None:
    assert text.is_refusal("I'm sorry, the documents do not say.")
    assert text.is_refusal("I don't know.") and text.is_refusal("I cannot answer that from the context [1].")
    # "I don't …" is often an opinion, not a refusal, and an answer that declines and then asserts is judged
    assert not text.is_refusal("I don't like PlayStation 2 but it is fun to play.")
    assert not text.is_refusal("I don't really know but Presley was born in Tupelo.")
    assert not text.is_refusal("Sorry, I don't know. The tower is in Paris.")


async def test_local_judge_refusal_and_undefined_cases() -> None:
    judge = LocalJudge(use_minilm=False)
    refusal = await judge.score(
        "faithfulness", RagSample(answer="I'm sorry, the documents do not say.", passages=PASSAGES)
    )
    assert (refusal.value, refusal.status, refusal.flags) == (1.0, Status.OK, ["refusal"])
    no_passages = await judge.score("faithfulness", RagSample(answer="Paris.", passages=[]))
    assert (no_passages.value, no_passages.status) == (None, Status.UNSCORABLE)
    recall = await judge.score("context_recall", RagSample(answer="x", passages=PASSAGES))
    assert (recall.value, recall.status) == (None, Status.SKIPPED)


async def test_local_context_and_answer_relevance() -> None:
    judge = LocalJudge(use_minilm=False)
    sample = RagSample(
        question="How tall is the Eiffel Tower?",
        answer="The Eiffel Tower is 330 metres tall.",
        passages=["Bananas are yellow.", *PASSAGES],
        reference="The Eiffel Tower is 330 metres tall.",
    )
    precision = await judge.score("context_precision", sample)
    assert precision.value == 0.5  # the only useful passage is ranked 2nd: (1/2) / 1
    relevance = await judge.score("context_relevance", sample)
    assert relevance.status is Status.OK and relevance.value is not None and 0 < relevance.value < 1
    # Recall: each reference statement checked like a claim. "Gustave Eiffel's company built the tower" is in one
    # passage sentence; "The Eiffel Tower is 330 metres tall" is in the sentence after "The Eiffel Tower was
    # completed in 1889.", as "It is 330 metres tall …": v8 reads that "It" as the sentence before's first names
    # (text.passage_sentences); v7 could not, and found the statement unsupported.
    reference = "Gustave Eiffel's company built the tower. The Eiffel Tower is 330 metres tall."
    recall = await judge.score("context_recall", sample.model_copy(update={"reference": reference}))
    assert recall.value == 1.0
    assert [c.verdict for c in recall.claims] == [Verdict.SUPPORTED, Verdict.SUPPORTED]
    # a statement the passages do not make stays unsupported, named subject or not
    invented = "The Eiffel Tower is 500 metres tall."
    recall = await judge.score("context_recall", sample.model_copy(update={"reference": invented}))
    assert [c.verdict for c in recall.claims] != [Verdict.SUPPORTED]
    answer = await judge.score("answer_relevance", sample)
    assert answer.status is Status.OK and answer.value is not None and answer.value > 0.3
    dunno = await judge.score("answer_relevance", sample.model_copy(update={"answer": "I don't know."}))
    assert (dunno.value, dunno.flags) == (0.0, ["noncommittal"])


# -- the MiniLM set (v7): the lexical set plus claim-to-sentence similarity --------------------------------------


def test_the_minilm_set_is_the_lexical_set_plus_the_similarity() -> None:
    # v7 of both: the transfer features, and the similarity for the MiniLM model
    assert set(FEATURE_SETS["minilm"]) == set(FEATURE_SETS["lexical"]) | set(SEMANTIC_FEATURES)
    # each model's version names its feature set, and no two models share one (stored scores group by version)
    assert all(m.version.startswith(f"{m.feature_set}-") for m in MODELS.values())
    assert len({m.version for m in MODELS.values()}) == len(MODELS)
    assert set(MODELS["minilm"].weights) == set(FEATURE_SETS["minilm"])


def _same_vector(texts: Sequence[str]) -> list[list[float]]:
    """Every text embeds alike: every claim is as similar to the passages as can be (cosine 1)."""
    return [[1.0, 0.0] for _ in texts]


async def test_the_minilm_model_still_rejects_what_the_words_contradict() -> None:
    """Similarity is one cue among the v3 features: even at cosine 1 for every claim, an invented name, a changed
    number and an opinion stay unsupported, and a copied sentence stays supported."""
    judge = LocalJudge(embedder=(_same_vector, "same-vector"), support_features="minilm")
    assert judge.support_model is MODELS["minilm"]
    mixed = await judge.score(
        "faithfulness",
        RagSample(
            answer="The Eiffel Tower was completed in 1889. It was designed by Frank Lloyd Wright.", passages=PASSAGES
        ),
    )
    assert [c.verdict for c in mixed.claims] == [Verdict.SUPPORTED, Verdict.UNSUPPORTED]
    wrong = await judge.score("faithfulness", RagSample(answer="The tower was completed in 1925.", passages=PASSAGES))
    assert [c.verdict for c in wrong.claims] == [Verdict.CONTRADICTED]
    opinion = await judge.score("faithfulness", RagSample(answer="I love the tower, it is so cool!", passages=PASSAGES))
    assert opinion.value is not None and opinion.value < judge.faithfulness_threshold
