"""How a claim lines up with the passage sentence closest to it: the local judge's v3 "alignment" features.

v2 looked at a claim's words as a bag; most unfaithful answers in the dev data copy a passage sentence and change
it — words reordered ("a hot dog with a corn dog"), words inserted, a number swapped — or lean on the dialogue
instead of the passage. Each feature here is a cue measured by k-fold on the fitting split
(docs/design/local-judge.md), not a proof:

- window coverage: stem coverage over one passage sentence or two adjacent ones ("The tower … It is 330 m tall");
- against the best sentence (most shared content stems, first on ties): stems it lacks, bigram coverage, a
  number that conflicts with one of its numbers, the claim's length relative to it, and how many adjacent claim
  stems appear in reverse order in it;
- the longest common subsequence of the claim's words with a passage sentence, over the claim's words (a copied
  sentence scores near 1 even with a word changed; a shuffled one does not);
- the share of the claim's stems that the question (the dialogue so far) has and no passage has;
- v6: of the stems the claim adds to the question, the share some passage has ("new word coverage"): what an
  answer is accountable for is what it adds. A QA answer that restates the question around an invented name
  ("… was directed by Stephen Spielberg") keeps high overlap from the question's words; a dialogue reply that
  paraphrases the passage keeps its new words in the passage. 1.0 when the claim adds nothing to the question;
- whether the claim opens like a chat reply ("yes", "oh", "well", "I", "that");
- v7: the best share of the claim's content words whose root — first ROOT_LENGTH letters — one passage sentence
  has: the stemmer joins inflections ("wins", "winning"), roots also derivations ("populous" / "populated",
  "competitive" / "competition");
- v6.1: whether the claim copies its closest sentence with a negation put into it ("was not completed" where the
  sentence says "was completed"): the passage states the opposite. Not weighed — one claim of the fitting split has
  it — but a rule (judges/local_model.negated_copy);
- the whole answer's novel-word share and best-sentence coverage (a claim of an answer that strays is suspect).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ragmon.judges import text

ALIGNMENT_FEATURES = (
    "window_coverage",
    "question_share",
    "best_sentence_missing",
    "sentence_bigram_coverage",
    "number_conflict",
    "reply_opener",
    "length_ratio",
    "aligned_share",
    "order_swaps",
    "answer_novel_share",
    "answer_sentence_coverage",
    "new_word_coverage",
    "negated_copy",
    "sentence_root_coverage",
)
# First words of a chat reply rather than of a statement taken from a passage (measured as one cue; "I" and "that"
# open most dialogue replies in BEGIN: "that is great!", "I think …").
REPLY_OPENERS = frozenset({"yes", "yeah", "yea", "oh", "wow", "well", "sure", "haha", "lol", "no", "that", "i"})
_ALIGNED_CANDIDATES = 5  # sentences compared word by word per claim (the lexically closest): bounds the cost
ROOT_LENGTH = 5  # letters: k-fold on the fitting split, 4 / 5 / 6 (docs/design/local-judge.md)


@dataclass(frozen=True, slots=True)
class Sentence:
    text: str
    words: tuple[str, ...]  # stemmed, stopwords kept: for the common subsequence
    content: tuple[str, ...]  # content stems in order
    stems: frozenset[str]
    numbers: frozenset[str]
    roots: frozenset[str]


@dataclass(frozen=True, slots=True)
class SentenceIndex:
    """Every passage sentence, prepared once per answer, and the windows of two adjacent sentences."""

    sentences: tuple[Sentence, ...]
    windows: tuple[frozenset[str], ...]  # stems of one sentence or two adjacent ones of the same passage
    passage_stems: frozenset[str]
    passage_words: frozenset[str]
    passage_numbers: frozenset[str]

    @classmethod
    def build(cls, passages: Sequence[str], split: Sequence[Sequence[str]] | None = None) -> SentenceIndex:
        """`split`: each passage's sentences (text.passage_sentences), when the caller has them already."""
        split = [text.passage_sentences(p) for p in passages] if split is None else split
        sentences: list[Sentence] = []
        windows: list[frozenset[str]] = []
        for passage_sentences in split:
            own = []
            for sentence in passage_sentences:
                content = tuple(text.content_tokens(sentence))
                words = tuple(text.stem(t) for t in text.tokens(sentence))
                numbers = frozenset(text.numbers(sentence))
                own.append(Sentence(sentence, words, content, frozenset(content), numbers, roots(content)))
            sentences.extend(own)
            windows.extend(s.stems for s in own)
            windows.extend(a.stems | b.stems for a, b in itertools.pairwise(own))
        return cls(
            tuple(sentences),
            tuple(windows),
            frozenset(s for p in passages for s in text.content_tokens(p)),
            frozenset(t for p in passages for t in text.tokens(p)),
            frozenset(n for s in sentences for n in s.numbers),
        )

    def best(self, stems: set[str]) -> Sentence | None:
        """The sentence sharing the most content stems with the claim; the first one on ties."""
        best, shared = None, -1
        for sentence in self.sentences:
            n = len(stems & sentence.stems)
            if n > shared:
                best, shared = sentence, n
        return best


def roots(stems: Sequence[str]) -> frozenset[str]:
    return frozenset(s[:ROOT_LENGTH] for s in stems)


def common_subsequence(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two word sequences (dynamic programming, O(len a · len b))."""
    if not a or not b:
        return 0
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


# Contractions whose base is not the word before "n't".
_CONTRACTION_BASES = {"can't": "can", "won't": "will", "shan't": "shall", "ain't": "is"}
# The share of a claim's content stems its closest sentence must hold for the claim to copy it: a negated copy here,
# and a copy that disagrees on a negation or number in local_model.contradicts.
COPY_COVERAGE = 0.8


def negated_copy(claim_tokens: Sequence[str], sentence: Sentence) -> bool:
    """A negation put between two words that stand side by side in a sentence with no negation of its own ("was
    not completed", "wasn't completed", "is not 330" against "was completed", "is 330"): the claim copies the
    sentence and says the opposite. A negation that opens the claim ("No, it was completed") is a reply's, not the
    statement's, and is not counted."""
    if text.has_negation(sentence.text):
        return False
    pairs = set(itertools.pairwise(sentence.words))
    for i, token in enumerate(claim_tokens[1:-1], start=1):
        if token in text.NEGATIONS:
            before = claim_tokens[i - 1]
        elif token.endswith("n't"):
            before = _CONTRACTION_BASES.get(token, token.removesuffix("n't"))
        else:
            continue
        if (text.stem(before), text.stem(claim_tokens[i + 1])) in pairs:
            return True
    return False


def _copies(stems: set[str], sentence: Sentence) -> bool:
    """The sentence holds COPY_COVERAGE of the claim's content stems."""
    return bool(stems) and len(stems & sentence.stems) >= COPY_COVERAGE * len(stems)


def order_swaps(claim_content: Sequence[str], sentence: Sentence) -> float:
    """Share of the claim's adjacent content stems (both in the sentence) that the sentence has the other way round."""
    first_position: dict[str, int] = {}
    for position, stem in enumerate(sentence.content):
        first_position.setdefault(stem, position)
    positions = [first_position[s] for s in claim_content if s in first_position]
    pairs = list(itertools.pairwise(positions))
    return sum(a > b for a, b in pairs) / len(pairs) if pairs else 0.0


@dataclass(frozen=True, slots=True)
class AnswerCues:
    """The whole answer's cues, computed once and shared by its claims."""

    novel_share: float
    sentence_coverage: float

    @classmethod
    def of(cls, answer: str, index: SentenceIndex) -> AnswerCues:
        words = set(text.tokens(answer))
        novel = len(words - index.passage_words) / len(words) if words else 0.0
        stems = set(text.content_tokens(answer))
        best = index.best(stems) if stems else None
        coverage = len(stems & best.stems) / len(stems) if best is not None and stems else 0.0
        return cls(novel, coverage)


def new_word_coverage(stems: set[str], question_stems: set[str], passage_stems: frozenset[str]) -> float:
    """Of the claim's content stems the question lacks, the share the passages have; 1.0 when there are none (the
    claim adds nothing to check)."""
    new = stems - question_stems
    return len(new & passage_stems) / len(new) if new else 1.0


def alignment_features(claim: str, index: SentenceIndex, question: str, answer: AnswerCues) -> dict[str, float]:
    content = text.content_tokens(claim)
    stems = set(content)
    raw = text.tokens(claim)
    words = [text.stem(t) for t in raw]
    question_stems = set(text.content_tokens(question))
    row = {
        "answer_novel_share": answer.novel_share,
        "answer_sentence_coverage": answer.sentence_coverage,
        "reply_opener": 1.0 if raw and raw[0] in REPLY_OPENERS else 0.0,
        "new_word_coverage": new_word_coverage(stems, question_stems, index.passage_stems),
    }
    best = index.best(stems)
    if not stems or best is None:
        row.update(
            window_coverage=0.0,
            question_share=0.0,
            best_sentence_missing=0.0,
            sentence_bigram_coverage=0.0,
            number_conflict=0.0,
            length_ratio=0.0,
            aligned_share=0.0,
            order_swaps=0.0,
            negated_copy=0.0,
            sentence_root_coverage=1.0,  # nothing to miss, as long_word_coverage has it
        )
        return row
    pairs = set(itertools.pairwise(content))
    claim_numbers = text.numbers(claim)
    claim_roots = roots(content)
    closest = sorted(index.sentences, key=lambda s: -len(stems & s.stems))[:_ALIGNED_CANDIDATES]
    row.update(
        window_coverage=max(len(stems & w) for w in index.windows) / len(stems),
        question_share=len((stems & question_stems) - index.passage_stems) / len(stems),
        best_sentence_missing=math.log1p(len(stems - best.stems)),
        sentence_bigram_coverage=(len(pairs & set(itertools.pairwise(best.content))) / len(pairs) if pairs else 1.0),
        # v6: a number no passage states, where the closest sentence states one (v3 counted any number the closest
        # sentence lacks, so a fact fused from two sentences, "completed in 1889 and 330 metres tall", conflicted)
        number_conflict=1.0 if best.numbers and claim_numbers - index.passage_numbers else 0.0,
        length_ratio=len(words) / (1 + len(best.words)),
        aligned_share=max(common_subsequence(words, s.words) for s in closest) / max(len(words), 1),
        order_swaps=order_swaps(content, best),
        negated_copy=1.0 if _copies(stems, best) and negated_copy(raw, best) else 0.0,
        sentence_root_coverage=max(len(claim_roots & s.roots) for s in index.sentences) / len(claim_roots),
    )
    return row
