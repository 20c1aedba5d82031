"""The local judge's v2 features, computed by hand on constructed claims, and how the judge uses its models."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from judges import lexical, support_features, text
from judges.local_judge import DEFAULT_FAITHFULNESS_THRESHOLD, CachedEmbedder, LocalJudge
from judges.local_model import MODELS
from judges.support_features import FEATURE_SETS, Evidence
from judges.types import RagSample


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
    assert set(rows[0]) == set(FEATURE_SETS["lexical"])
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
    assert set(with_sim[0]) == set(FEATURE_SETS["minilm"])
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
    assert lexical_judge.faithfulness_threshold == DEFAULT_FAITHFULNESS_THRESHOLD == 1.0
    assert lexical_judge.claim_threshold == MODELS["lexical"].claim_threshold
    for model in MODELS.values():  # every weight names a feature of its set, and every feature has a weight
        assert set(model.weights) == set(FEATURE_SETS[model.feature_set])

    calls: list[int] = []

    def embed(texts: Sequence[str]) -> list[list[float]]:
        calls.append(len(texts))
        return [[1.0, 0.0] for _ in texts]

    judge = LocalJudge(embedder=(embed, "fake-embedder"))
    assert judge.support_model is MODELS["minilm"]
    assert judge.version == f"local:{MODELS['minilm'].version}:fake-embedder"
    sample = RagSample(answer="The tower opened in 1889.", passages=["The tower opened in 1889."])
    judge.prepare([sample])
    assert len(calls) == 1
    result = await judge.score("faithfulness", sample)
    assert len(calls) == 1  # everything was embedded ahead, in one batch
    assert result.value == 1.0 and result.judge_model == f"local-{MODELS['minilm'].version}"
