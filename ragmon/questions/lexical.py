"""The lexical grouper's vectors: no model, no dependency — a question as its content words, lightly stemmed, and
the character trigrams of those words, weighted so that sharing the words counts most and the trigrams catch
spelling variants and word forms the stemmer misses ("log in" / "login", "reimburse" / "reimbursement").

Two questions are alike by the cosine of their vectors. It groups near-duplicates and paraphrases that reuse the
same words; a paraphrase in other words ("cancel my plan" / "stop my subscription") needs the MiniLM grouper.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

# Function words and the words every question has ("how", "can", "please"): they say how it is asked, not what.
STOPWORDS = frozenset(
    """
    a about above after again all am an and any are as at be been being before below between both but by can
    could did do does doing done down during each few for from further had has have having he her here hers him
    his how i if in into is it its itself just me might more most must my myself no nor not now of off on once
    only or other our ours out over own please same shall she should so some such than that the their theirs them
    then there these they this those through to too under until up very was we were what when where which while
    who whom why will with would you your yours yourself hi hello hey thanks thank tell know want need get got
    let us way able any anyone someone something there's what's how's i'm i've im ive pls plz
    """.split()  # noqa: SIM905 (a word list reads better as text)
)

# Weight of one word against all of a question's trigrams taken together: the words decide, trigrams break ties.
WORD_WEIGHT = 1.0
TRIGRAM_WEIGHT = 0.35

_SUFFIXES = ("ements", "ement", "ations", "ation", "ings", "ing", "ies", "ied", "ers", "er", "ed", "es", "ly", "s")

Vector = dict[str, float]


def stem(word: str) -> str:
    """A light suffix strip (not Porter): enough to meet plural, gerund and past forms of one word."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if suffix in ("ies", "ied"):
                word += "y"
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiou":
        word = word[:-1]  # "stopp(ed)" → "stop"
    return word


def content_words(normalised: str) -> list[str]:
    words = [w for w in normalised.split() if w not in STOPWORDS]
    return [stem(w) for w in words] or [stem(w) for w in normalised.split()]  # a question of stop words only


def vector(normalised: str) -> Vector:
    """The unit vector of a normalised question: its stems (`w:` terms) and their trigrams (`t:` terms)."""
    out: Vector = {}
    words = content_words(normalised)
    for word in words:
        out["w:" + word] = out.get("w:" + word, 0.0) + WORD_WEIGHT
    grams = [g for word in words for g in _trigrams(word)]
    if grams:
        each = TRIGRAM_WEIGHT * len(words) / len(grams)
        for gram in grams:
            out["t:" + gram] = out.get("t:" + gram, 0.0) + each
    norm = math.sqrt(sum(v * v for v in out.values()))
    return {k: v / norm for k, v in out.items()} if norm else out


def words_of(v: Vector) -> Iterable[str]:
    """The word terms of a vector: what the grouper's inverted index finds candidate groups by."""
    return (term for term in v if term.startswith("w:"))


def cosine(a: Vector, b: Vector) -> float:
    if len(a) > len(b):
        a, b = b, a
    return sum(v * b.get(k, 0.0) for k, v in a.items())


def _trigrams(word: str) -> list[str]:
    padded = f"<{word}>"
    return [padded[i : i + 3] for i in range(len(padded) - 2)]
