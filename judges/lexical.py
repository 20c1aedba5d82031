"""Lexical evidence that a claim is supported by passages: the features the local judge weighs.

Each feature is a cue measured on labelled data, not a proof: token containment (stemmed, stopwords out) over
all passages and over the best-matching passage sentence, content-bigram containment, numbers and capitalised
names the passages never mention, a negation present on one side only, and whether the claim speaks about the
speaker or the listener (such a claim cannot be attributed to a passage).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ragmon.judges import text

_MAX_RUN = 12  # runs longer than this count as this long: enough to tell a quote from a paraphrase
_NAME_STOP = frozenset({"the", "a", "an", "i", "it", "he", "she", "they", "we", "you", "this", "that", "yes", "no"})


@dataclass(frozen=True, slots=True)
class ClaimFeatures:
    coverage: float  # share of the claim's content stems found anywhere in the passages
    sentence_coverage: float  # the same, against the single best passage sentence
    bigram_coverage: float  # share of the claim's content bigrams found in the passages (1.0 when it has none)
    number_mismatch: float  # 1.0 when the claim has a number the passages never mention
    name_miss: float  # share of the claim's capitalised names missing from the passages
    negation_mismatch: float  # 1.0 when the claim and its best passage sentence disagree on negation
    first_person: float  # 1.0 when the claim speaks about the speaker ("I", "we")
    second_person: float  # 1.0 when it addresses the listener ("you")
    missing: float  # log(1 + content stems the passages never mention)
    content_len: float  # log(1 + content stems in the claim)
    longest_run: float  # longest run of the claim's words found verbatim in a passage, over the claim's words

    def vector(self) -> list[float]:
        return [
            self.coverage,
            self.sentence_coverage,
            self.bigram_coverage,
            self.number_mismatch,
            self.name_miss,
            self.negation_mismatch,
            self.first_person,
            self.second_person,
            self.missing,
            self.content_len,
            self.longest_run,
        ]


FEATURE_NAMES = tuple(ClaimFeatures.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class PassageIndex:
    """The passages, tokenised once and reused for every claim of an answer."""

    stems: frozenset[str]
    bigrams: frozenset[tuple[str, str]]
    sentences: tuple[tuple[frozenset[str], bool], ...]  # (stems, has negation) per passage sentence
    numbers: frozenset[str]
    words: frozenset[str]  # lower-cased raw tokens, for names
    ngrams: frozenset[tuple[str, ...]]  # every run of up to _MAX_RUN stemmed words, stopwords kept

    @classmethod
    def build(cls, passages: Sequence[str], split: Sequence[Sequence[str]] | None = None) -> PassageIndex:
        """`split`: each passage's sentences (text.passage_sentences), when the caller has them already."""
        split = [text.passage_sentences(p) for p in passages] if split is None else split
        stems: set[str] = set()
        bigrams: set[tuple[str, str]] = set()
        sentence_rows = []
        nums: set[str] = set()
        words: set[str] = set()
        ngrams: set[tuple[str, ...]] = set()
        for passage, passage_sentences in zip(passages, split, strict=True):
            seq = [text.stem(t) for t in text.tokens(passage)]
            for n in range(1, _MAX_RUN + 1):
                ngrams.update(tuple(seq[i : i + n]) for i in range(len(seq) - n + 1))
            content = text.content_tokens(passage)
            stems.update(content)
            bigrams.update(itertools.pairwise(content))
            nums.update(text.numbers(passage))
            words.update(text.tokens(passage))
            for sentence in passage_sentences:
                sentence_rows.append((frozenset(text.content_tokens(sentence)), text.has_negation(sentence)))
        return cls(
            frozenset(stems),
            frozenset(bigrams),
            tuple(sentence_rows),
            frozenset(nums),
            frozenset(words),
            frozenset(ngrams),
        )


def _names(claim: str) -> list[str]:
    """Capitalised words not at the start of the claim: a cheap stand-in for named entities."""
    out = []
    for i, word in enumerate(text.bare_words(claim)):
        if i > 0 and text.is_capitalised(word) and word.lower() not in _NAME_STOP:
            out.extend(text.tokens(word))
    return out


def claim_features(claim: str, index: PassageIndex) -> ClaimFeatures:
    content = text.content_tokens(claim)
    if not content:
        return ClaimFeatures(0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    unique = set(content)
    coverage = len(unique & index.stems) / len(unique)
    best_sentence, best_negated = 0.0, False
    for stems, negated in index.sentences:
        share = len(unique & stems) / len(unique)
        if share > best_sentence:
            best_sentence, best_negated = share, negated
    pairs = set(itertools.pairwise(content))
    bigram_coverage = len(pairs & index.bigrams) / len(pairs) if pairs else 1.0
    number_mismatch = 1.0 if text.numbers(claim) - index.numbers else 0.0
    names = _names(claim)
    name_miss = sum(1 for n in names if n not in index.words) / len(names) if names else 0.0
    negation_mismatch = 1.0 if best_sentence >= 0.5 and text.has_negation(claim) != best_negated else 0.0
    claim_tokens = set(text.tokens(claim))
    first_person = 1.0 if claim_tokens & text.FIRST_PERSON else 0.0
    second_person = 1.0 if claim_tokens & text.SECOND_PERSON else 0.0
    return ClaimFeatures(
        coverage=coverage,
        sentence_coverage=best_sentence,
        bigram_coverage=bigram_coverage,
        number_mismatch=number_mismatch,
        name_miss=name_miss,
        negation_mismatch=negation_mismatch,
        first_person=first_person,
        second_person=second_person,
        missing=math.log1p(len(unique - index.stems)),
        content_len=math.log1p(len(unique)),
        longest_run=_longest_run(claim, index),
    )


def _longest_run(claim: str, index: PassageIndex) -> float:
    seq = [text.stem(t) for t in text.tokens(claim)]
    if not seq:
        return 0.0
    best = 0
    for i in range(len(seq)):
        n = best + 1  # only a longer run than the best so far matters
        while n <= _MAX_RUN and i + n <= len(seq) and tuple(seq[i : i + n]) in index.ngrams:
            best = n
            n += 1
    return best / min(len(seq), _MAX_RUN)


def overlap_baseline(answer: str, passages: Sequence[str]) -> float:
    """The lexical-overlap baseline the local judge has to beat: the share of the answer's lower-cased word
    tokens (stopwords out, no stemming) that occur in the passages. Defined as 0.0 for an empty answer."""
    answer_tokens = {t for t in text.plain_tokens(answer) if t not in text.STOPWORDS}
    if not answer_tokens:
        return 0.0
    passage_tokens = {t for p in passages for t in text.plain_tokens(p)}
    return len(answer_tokens & passage_tokens) / len(answer_tokens)
