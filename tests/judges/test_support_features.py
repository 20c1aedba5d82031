"""The local judge's v2 and v3 features, computed by hand on constructed claims, and how the judge uses its models."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from ragmon.judges import alignment, lexical, support_features, text
from ragmon.judges.local_judge import CachedEmbedder, LocalJudge
from ragmon.judges.local_model import MODELS
from ragmon.judges.support_features import FEATURE_SETS, Evidence
from ragmon.judges.types import RagSample


def test_novel_word_share_counts_every_word_the_passages_never_use() -> None:
    passage_words = frozenset(text.tokens("It is owned by Facebook."))
    # claim words: yes, the, pc, is, owned, by, facebook → yes, the, pc are new: 3 of 7
    assert support_features.novel_word_share("Yes, the PC is owned by Facebook.", passage_words) == 3 / 7
    assert support_features.novel_word_share("", passage_words) == 0.0


def test_long_word_coverage_only_looks_at_long_stems() -> None:
    stems = frozenset({"championship", "trophy"})
    # content stems: championship (12 letters), trophy, stolen → only "championship" is long, and it is found
    assert support_features.long_word_coverage("The championship trophy was stolen", stems) == 1.0
    assert support_features.long_word_coverage("The championship trophy was stolen", frozenset()) == 0.0
    assert support_features.long_word_coverage("The cat sat", frozenset()) == 1.0  # nothing long to miss


def test_opinion_and_question_cues() -> None:
    assert support_features.has_opinion("I think he was great") == 1.0
    assert support_features.has_opinion("I love that film") == 1.0
    assert support_features.has_opinion("It looks like rain") == 0.0  # "like" alone is a preposition
    assert support_features.is_question("Have you seen it?") == 1.0
    assert support_features.is_question("I have seen it.") == 0.0


def test_claim_features_by_hand_without_and_with_an_embedder() -> None:
    passages = ["The tower opened in 1889. It is 330 metres tall.", "Bananas are yellow."]
    evidence = Evidence.build(passages)
    answer = "The tower opened in 1889. I love it."
    claims = ["The tower opened in 1889.", "I love it."]
    rows = support_features.claim_features(claims, answer, evidence)
    # every feature computed, of which each model weighs its set (v6 weighs 19 of them)
    assert set(rows[0]) == set(support_features.COMPUTED_FEATURES) >= set(FEATURE_SETS["lexical"])
    assert rows[0]["answer_overlap"] == lexical.overlap_baseline(answer, passages)  # the baseline's cue, exactly
    assert rows[0]["answer_claims"] == math.log(2)
    assert (rows[0]["opinion"], rows[1]["opinion"]) == (0.0, 1.0)
    # "i" and "love" are new words; "it" is in the first passage
    assert rows[0]["novel_word_share"] == 0.0 and rows[1]["novel_word_share"] == 2 / 3

    # The claim is compared with the passage sentences sharing most stems with it: "The tower opened in 1889."
    # first, then "It is 330 metres tall." and "Bananas are yellow." (no shared stem, passage order).
    assert evidence.candidates(claims[0]) == [
        "The tower opened in 1889.",
        "It is 330 metres tall.",
        "Bananas are yellow.",
    ]
    vectors = {
        "The tower opened in 1889.": (1.0, 0.0),
        "It is 330 metres tall.": (0.6, 0.8),
        "Bananas are yellow.": (0.0, 1.0),
        "I love it.": (0.8, 0.6),
    }
    seen: list[list[str]] = []

    def embed(texts: Sequence[str]) -> list[tuple[float, float]]:
        seen.append(list(texts))
        return [vectors[t] for t in texts]

    with_sim = support_features.claim_features(claims, answer, evidence, embed)
    assert set(with_sim[0]) == {*support_features.COMPUTED_FEATURES, *support_features.SEMANTIC_FEATURES}
    assert with_sim[0]["sim_sentence"] == pytest.approx(1.0)  # itself
    assert with_sim[1]["sim_sentence"] == pytest.approx(0.96)  # best of 0.8, 0.96 (0.8·0.6 + 0.6·0.8), 0.6
    assert with_sim[1]["coverage"] == rows[1]["coverage"]  # the lexical part does not change


def test_cached_embedder_embeds_each_text_once() -> None:
    calls: list[list[str]] = []

    def embed(texts: Sequence[str]) -> list[list[float]]:
        calls.append(list(texts))
        return [[float(len(t))] for t in texts]

    cached = CachedEmbedder(embed, max_entries=3)
    assert cached(["a", "bb", "a"]) == [[1.0], [2.0], [1.0]]
    assert cached(["bb"]) == [[2.0]]
    assert calls == [["a", "bb"]]
    cached(["ccc", "dddd"])  # over the bound: the cache starts again rather than grow
    assert calls[-1] == ["ccc", "dddd"] and cached(["a"]) == [[1.0]] and calls[-1] == ["a"]


async def test_the_judge_records_its_model_and_uses_the_configured_thresholds() -> None:
    lexical_judge = LocalJudge(use_minilm=False)
    assert lexical_judge.support_model is MODELS["lexical"]
    assert lexical_judge.version == f"local:{MODELS['lexical'].version}:lexical"
    # one threshold for claims and answers: the answer's probability is on its claims' scale
    assert lexical_judge.faithfulness_threshold == lexical_judge.claim_threshold == MODELS["lexical"].claim_threshold
    assert LocalJudge(use_minilm=False, faithfulness_threshold=0.9).faithfulness_threshold == 0.9
    for model in MODELS.values():  # every weight names a feature of its set, and every feature has a weight
        assert set(model.weights) == set(FEATURE_SETS[model.feature_set])

    calls: list[int] = []

    def embed(texts: Sequence[str]) -> list[list[float]]:
        calls.append(len(texts))
        return [[1.0, 0.0] for _ in texts]

    # with an embedder, faithfulness still weighs the lexical set (v6: MiniLM's is behind it), embedding nothing
    lexical = LocalJudge(embedder=(embed, "fake-embedder"))
    assert lexical.support_model is MODELS["lexical"]
    assert lexical.version == f"local:{MODELS['lexical'].version}:fake-embedder"
    lexical.prepare([RagSample(answer="The tower opened in 1889.", passages=["The tower opened in 1889."])])
    assert calls == []
    judge = LocalJudge(embedder=(embed, "fake-embedder"), support_features="minilm")
    assert judge.support_model is MODELS["minilm"]
    assert judge.version == f"local:{MODELS['minilm'].version}:fake-embedder"
    sample = RagSample(answer="The tower opened in 1889.", passages=["The tower opened in 1889."])
    judge.prepare([sample])
    assert len(calls) == 1
    result = await judge.score("faithfulness", sample)
    assert len(calls) == 1  # everything was embedded ahead, in one batch
    assert (
        result.value is not None
        and result.value >= judge.faithfulness_threshold
        and result.judge_model == f"local-{MODELS['minilm'].version}"
    )


# -- v3: alignment with the closest passage sentence (judges/alignment.py) ---------------------------------------
TOWER = ["The tower opened in 1889. It is 330 metres tall.", "Bananas are yellow."]


def test_common_subsequence_and_order_swaps() -> None:
    assert alignment.common_subsequence(list("abcde"), list("ace")) == 3
    assert alignment.common_subsequence([], list("ace")) == 0
    sentence = alignment.SentenceIndex.build(["The tower opened in 1889."]).sentences[0]
    assert sentence.content == ("tower", "open", "1889")
    # claim stems 1889, open, tower sit at positions 2, 1, 0 of the sentence: both adjacent pairs run backwards
    assert alignment.order_swaps(["1889", "open", "tower"], sentence) == 1.0
    assert alignment.order_swaps(["tower", "open", "1889"], sentence) == 0.0
    assert alignment.order_swaps(["banana"], sentence) == 0.0  # no pair to compare


def test_a_fact_split_over_two_adjacent_sentences_is_covered_by_a_window() -> None:
    index = alignment.SentenceIndex.build(TOWER)
    answer = "The tower is 330 metres tall."
    row = alignment.alignment_features(answer, index, "", alignment.AnswerCues.of(answer, index))
    # stems tower, 330, metr, tall: no single sentence has all four, the first two sentences together do
    assert row["window_coverage"] == 1.0
    # the best sentence "It is 330 metres tall." lacks "tower"; its words it, is, 330, metr, tall follow the
    # claim's the, tower, is, 330, metr, tall for 4 of 6 words
    assert row["best_sentence_missing"] == pytest.approx(math.log(2))
    assert row["aligned_share"] == pytest.approx(4 / 6)
    assert row["answer_sentence_coverage"] == 0.75 and row["answer_novel_share"] == 0.0
    # stems of different passages never form a window
    apart = alignment.SentenceIndex.build(["The tower opened in 1889.", "It is 330 metres tall."])
    assert alignment.alignment_features(answer, apart, "", alignment.AnswerCues.of(answer, apart))[
        "window_coverage"
    ] == pytest.approx(3 / 4)


def test_a_changed_number_a_reordered_copy_and_words_from_the_question() -> None:
    index = alignment.SentenceIndex.build(TOWER)
    cues = alignment.AnswerCues.of("", index)

    def features(claim: str, question: str = "") -> dict[str, float]:
        return alignment.alignment_features(claim, index, question, cues)

    assert features("The tower opened in 1925.")["number_conflict"] == 1.0
    assert features("The tower opened in 1889.")["number_conflict"] == 0.0
    assert features("The tower opened.")["number_conflict"] == 0.0  # no number, nothing to conflict
    shuffled = features("1889 opened the tower")
    assert (shuffled["order_swaps"], shuffled["sentence_bigram_coverage"], shuffled["aligned_share"]) == (1.0, 0.0, 0.5)
    # "fireworks" comes from the question and from no passage: 1 of the claim's 3 stems
    assert features("The tower opened with fireworks", "Were there fireworks?")["question_share"] == pytest.approx(
        1 / 3
    )
    assert features("The tower opened with fireworks")["question_share"] == 0.0
    assert features("Yes, the tower opened in 1889")["reply_opener"] == 1.0
    assert features("The tower opened in 1889")["reply_opener"] == 0.0


def test_new_word_coverage_checks_what_the_claim_adds_to_the_question() -> None:
    index = alignment.SentenceIndex.build(TOWER)
    cues = alignment.AnswerCues.of("", index)

    def coverage(claim: str, question: str) -> float:
        return alignment.alignment_features(claim, index, question, cues)["new_word_coverage"]

    question = "Who designed the tower that opened in 1889?"
    # A QA answer that restates the question around an invented name: of what it adds (frank, lloyd, wright) the
    # passages have nothing, though most of its words are in them (from the question).
    assert coverage("The tower that opened in 1889 was designed by Frank Lloyd Wright.", question) == 0.0
    # metr, tall, 330 are new to the question, and all in the passages
    assert coverage("The tower is 330 metres tall.", question) == 1.0
    # no question: every stem is new (330, metr, tall, banana, tree; "like" is a stopword) and "tree" is in no passage
    assert coverage("It is 330 metres tall, like a banana tree.", "") == pytest.approx(4 / 5)
    assert coverage("The tower opened in 1889.", question) == 1.0  # adds nothing to the question: nothing to miss


def test_numbers_written_as_words_meet_digits() -> None:
    assert text.numbers("It is three hundred and thirty metres tall") == {"330"}
    assert text.numbers("twenty-five years, 1,889 visitors") == {"25", "1889"}
    assert text.numbers("one of the first towers") == set()  # "one" alone is a pronoun, not a count
    assert text.numbers("one hundred") == {"100"}
    index = alignment.SentenceIndex.build(TOWER)
    cues = alignment.AnswerCues.of("", index)
    assert (
        alignment.alignment_features("It is three hundred and thirty metres tall.", index, "", cues)["number_conflict"]
        == 0.0
    )
    assert alignment.alignment_features("It is three hundred metres tall.", index, "", cues)["number_conflict"] == 1.0


def test_both_sets_are_the_transfer_features() -> None:
    # v6: one list, chosen by leave-one-kind-out; none of the length features that mean opposite things per kind
    assert FEATURE_SETS["lexical"] == support_features.TRANSFER_FEATURES
    assert set(FEATURE_SETS["minilm"]) - set(FEATURE_SETS["lexical"]) == set(support_features.SEMANTIC_FEATURES)
    assert not {"content_len", "length_ratio", "answer_claims"} & set(FEATURE_SETS["minilm"])
    rows = support_features.claim_features(["The tower is 330 metres tall."], "x", Evidence.build(TOWER), question="")
    assert rows[0]["aligned_share_over_0.5"] == pytest.approx(4 / 6 - 0.5)  # the hinge of the v3 feature
