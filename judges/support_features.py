"""The named features the local judge's claim-support model weighs (judges/local_model.py).

Three groups, each a cue measured on labelled data rather than a proof of support:

- lexical, per claim (judges/lexical.py): stem coverage over all passages and over the best passage sentence,
  bigram coverage, the longest verbatim run, numbers and capitalised names the passages never mention, a negation
  present on one side only, first/second person;
- dialogue and answer cues, added in v2: the share of *all* the claim's words (stopwords kept, no stemming) that the
  passages never use — chit-chat and hedges the content-word features cannot see —, a length-weighted coverage (long
  words carry most of the content, a cheap stand-in for IDF), opinion and question cues (neither can be attributed
  to a passage), and the whole answer's token overlap (the baseline's own cue, so the model starts from it);
- semantic, only when an embedder is given (MiniLM): the best cosine between the claim and the passage sentences
  that share the most stems with it — paraphrases ("vary from" / "range from") that share few stems;
- alignment, added in v3 (judges/alignment.py): how the claim lines up with its closest passage sentence
  (reordered, inserted or changed words, a conflicting number), two-sentence windows, words taken from the question
  rather than a passage, and (v6) the coverage of the words the claim adds to the question.

Every feature is computed (`COMPUTED_FEATURES`); since v6 a model weighs only `TRANSFER_FEATURES`, the 19 that hold
from QA to dialogue, and the MiniLM set is those plus the similarity. `FEATURE_SETS` names the feature list of each
model variant; the judge records which one it used in its version, since changing it re-scales the metric.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ragmon.judges import alignment, lexical, text

SentenceEmbedder = Callable[[Sequence[str]], Sequence[Sequence[float]]]

LEXICAL_FEATURES = lexical.FEATURE_NAMES
CUE_FEATURES = (
    "novel_word_share",
    "long_word_coverage",
    "opinion",
    "question",
    "answer_overlap",
    "answer_claims",
)
SEMANTIC_FEATURES = ("sim_sentence",)
SEMANTIC_CANDIDATES = 3  # passage sentences per claim compared by embedding (the lexically closest)
# Hinges max(0, x − knot) on the shares that matter most: a linear model over them is piecewise linear in each
# share, so "all but one word found" and "every word found" can weigh differently (k-fold κ on the fitting split
# rose on both kinds: docs/design/local-judge.md, v2).
HINGE_KNOTS = (0.5, 0.8, 0.95)
_HINGED = ("coverage", "sentence_coverage", "longest_run", "novel_word_share", "bigram_coverage", "answer_overlap")
# v3, lexical set: a copied sentence with one word changed and a paraphrase differ most near aligned_share 1
# (docs/design/local-judge.md, v3).
_HINGED_ALIGNMENT = ("aligned_share",)


def hinge_name(feature: str, knot: float) -> str:
    return f"{feature}_over_{knot}"


def _hinges(features: Sequence[str]) -> tuple[str, ...]:
    return tuple(hinge_name(f, k) for f in features for k in HINGE_KNOTS)


ALIGNMENT_FEATURES = alignment.ALIGNMENT_FEATURES
# Every feature `claim_features` computes (the semantic one only with an embedder); a model weighs a subset of them.
COMPUTED_FEATURES = (
    *LEXICAL_FEATURES,
    *CUE_FEATURES,
    *ALIGNMENT_FEATURES,
    *_hinges((*_HINGED, *_HINGED_ALIGNMENT)),
)
# v6: the features chosen by the transfer table of benchmarks/fit_local_judge.py (docs/design/local-judge.md) rather
# than by k-fold on the pooled kinds: each is a share or a cue that keeps its meaning from QA to dialogue. Left out: the
# length features (claim length, its ratio to the closest sentence, the claim count: in HaluEval a faithful answer is a
# short span and a hallucinated one a sentence, in BEGIN the reverse), verbatim-copy measures and the hinges that place
# a kind's cut-off (longest run, bigram coverage and their hinges: a model fitted on QA learns "copied whole, so
# faithful" and fails every dialogue paraphrase). Fitted on QA alone it scores dialogue above the overlap baseline, and
# fitted on dialogue alone QA too; v5 lost both ways.
TRANSFER_FEATURES = (
    "answer_overlap",
    "answer_sentence_coverage",
    "sentence_coverage",
    "long_word_coverage",
    "aligned_share",
    "novel_word_share",
    "new_word_coverage",
    "best_sentence_missing",
    "order_swaps",
    "question_share",
    "name_miss",
    "number_conflict",
    "negation_mismatch",
    "opinion",
    "first_person",
    "second_person",
    "question",
    "reply_opener",
    hinge_name("coverage", 0.8),  # the one hinge that helps QA without costing dialogue's transfer
    "sentence_root_coverage",  # v7
)
# The MiniLM set (v7 on): the lexical set plus the claim-to-sentence similarity (docs/design/local-judge.md).
MINILM_FEATURES = (*TRANSFER_FEATURES, *SEMANTIC_FEATURES)
FEATURE_SETS: dict[str, tuple[str, ...]] = {
    "lexical": TRANSFER_FEATURES,
    "minilm": MINILM_FEATURES,
}

_LONG_WORD = 7  # characters: a stem this long is usually a content word that names something specific
# Words that mark an opinion or a feeling: a claim about the speaker's taste is not attributable to a passage.
OPINION_WORDS = frozenset(
    {
        "love",
        "loved",
        "favorite",
        "favourite",
        "believe",
        "feel",
        "fun",
        "cool",
        "awesome",
        "amazing",
        "enjoy",
        "enjoyed",
        "hope",
        "wish",
        "prefer",
        "guess",
        "wow",
        "interesting",
        "sounds",
        "hate",
        "agree",
        "probably",
        "maybe",
    }
)


@dataclass(frozen=True, slots=True)
class Evidence:
    """The passages prepared once per answer: the lexical index, the raw word set, every passage sentence with
    its content stems (the candidates for the semantic feature), and the sentence index of the alignment
    features."""

    index: lexical.PassageIndex
    passage_words: frozenset[str]
    sentences: tuple[tuple[str, frozenset[str]], ...]
    aligned: alignment.SentenceIndex

    @classmethod
    def build(cls, passages: Sequence[str]) -> Evidence:
        split = [text.passage_sentences(p) for p in passages]  # once: both indexes read the same sentences
        aligned = alignment.SentenceIndex.build(passages, split)
        sentences = tuple((s.text, s.stems) for s in aligned.sentences)
        return cls(lexical.PassageIndex.build(passages, split), aligned.passage_words, sentences, aligned)

    def candidates(self, claim: str) -> list[str]:
        """The passage sentences sharing the most content stems with the claim (ties: passage order): the only ones
        embedded, which bounds the embedding cost per claim whatever the passages' length."""
        stems = set(text.content_tokens(claim))
        ranked = sorted(range(len(self.sentences)), key=lambda i: (-len(stems & self.sentences[i][1]), i))
        return [self.sentences[i][0] for i in ranked[:SEMANTIC_CANDIDATES]]


def texts_to_embed(claims: Sequence[str], evidence: Evidence) -> list[str]:
    """Every text `claim_features` will ask the embedder for, so a caller can embed many answers in one batch."""
    out = list(claims)
    for claim in claims:
        out.extend(evidence.candidates(claim))
    return out


def novel_word_share(claim: str, passage_words: frozenset[str]) -> float:
    """Share of the claim's distinct word tokens (stopwords kept, no stemming) that no passage uses."""
    words = set(text.tokens(claim))
    if not words:
        return 0.0
    return len(words - passage_words) / len(words)


def long_word_coverage(claim: str, passage_stems: frozenset[str]) -> float:
    """Coverage of the claim's long content stems (≥ 7 characters); 1.0 when it has none (nothing to miss)."""
    long_stems = {s for s in text.content_tokens(claim) if len(s) >= _LONG_WORD}
    if not long_stems:
        return 1.0
    return len(long_stems & passage_stems) / len(long_stems)


def has_opinion(claim: str) -> float:
    tokens = text.tokens(claim)
    if any(t in OPINION_WORDS for t in tokens):
        return 1.0
    # "I think", "I like": the speaker's view; "like" alone is too often a preposition to count.
    pairs = set(itertools.pairwise(tokens))
    return 1.0 if pairs & {("i", "think"), ("i", "like"), ("i", "liked"), ("we", "think")} else 0.0


def is_question(claim: str) -> float:
    return 1.0 if claim.rstrip().endswith("?") else 0.0


def _best_cosine(vector: Sequence[float], candidates: Sequence[Sequence[float]]) -> float:
    """Max dot product: the embedder returns unit vectors, so this is the best cosine similarity."""
    return max((sum(a * b for a, b in zip(vector, c, strict=True)) for c in candidates), default=0.0)


def claim_features(
    claims: Sequence[str],
    answer: str,
    evidence: Evidence,
    embedder: SentenceEmbedder | None = None,
    question: str = "",
) -> list[dict[str, float]]:
    """Every feature of every claim of one answer, as name → value: the lexical set's, plus the semantic one with an
    embedder (the MiniLM set)."""
    # The baseline's own cue (lexical.overlap_baseline), on the word set already built; since v6 with numbers written
    # in words read as digits, as every judge feature reads them (the baseline keeps its plain tokens).
    answer_tokens = {t for t in text.tokens(answer) if t not in text.STOPWORDS}
    answer_overlap = len(answer_tokens & evidence.passage_words) / len(answer_tokens) if answer_tokens else 0.0
    answer_cues = alignment.AnswerCues.of(answer, evidence.aligned)
    out = []
    for claim in claims:
        row = dict(zip(LEXICAL_FEATURES, lexical.claim_features(claim, evidence.index).vector(), strict=True))
        row["novel_word_share"] = novel_word_share(claim, evidence.passage_words)
        row["long_word_coverage"] = long_word_coverage(claim, evidence.index.stems)
        row["opinion"] = has_opinion(claim)
        row["question"] = is_question(claim)
        row["answer_overlap"] = answer_overlap
        row["answer_claims"] = math.log(len(claims))
        if embedder is not None:
            candidates = evidence.candidates(claim)
            vectors = embedder([claim, *candidates])
            row["sim_sentence"] = _best_cosine(vectors[0], vectors[1:])
        row.update(alignment.alignment_features(claim, evidence.aligned, question, answer_cues))
        add_hinges(row)
        out.append(row)
    return out


def add_hinges(row: dict[str, float]) -> None:
    """The hinge features of whichever hinged features `row` has."""
    for feature in (*_HINGED, *_HINGED_ALIGNMENT):
        if feature in row:
            for knot in HINGE_KNOTS:
                row[hinge_name(feature, knot)] = max(0.0, row[feature] - knot)
