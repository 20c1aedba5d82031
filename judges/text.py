"""Text handling for judges that read without a model: citation stripping, sentence and clause splitting,
tokens with a light stemmer, numbers, negations, refusals.

Deliberately small and rule-based: the local judge must run anywhere, and every rule here is a cue that can be
measured on labelled data (see judges/calibration.py), not a claim to understand language.
"""

from __future__ import annotations

import re

# [1], [1, 2], [1-3], [doc1], 【1】, ^1^ — markers an answer uses to cite passages. They assert nothing.
_CITATION = re.compile(r"\s*(\[(?:\d+(?:\s*[,\-–]\s*\d+)*|doc\s*\d+|source\s*\d+)\]|【\d+】|\^\d+\^)", re.IGNORECASE)
# A sentence ends at . ! ? followed by space and a capital/digit/quote, or at a newline. Abbreviations such as
# "U.S." or "Dr." are protected below, since a wrong split makes two half-claims that both look unsupported.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'“(\[]?[A-Z0-9])|\n+")
_ABBREVIATIONS = ("Mr.", "Mrs.", "Ms.", "Dr.", "St.", "Jr.", "Sr.", "vs.", "e.g.", "i.e.", "etc.", "No.", "Inc.")
# v7: a stop before a lower-case word (chat text), for claims; the word before it decides (_split_lowercase_starts).
_LOWERCASE_START = re.compile(r"[.!?](?=\s+[\"'“(\[]?[a-z])")
_LOWERCASE_ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "etc", "inc", "approx", "ca", "cf", "al", "fig", "vol", "pp"}
)
# Clause boundaries for atomic claims: "; " and ", and/but/while/whereas " joining two assertions.
_CLAUSE_SPLIT = re.compile(r";\s+|,\s+(?:and|but|while|whereas|although)\s+(?=\w+\s+\w+)", re.IGNORECASE)
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_NUMBER = re.compile(r"\b\d+(?:[.,]\d+)*\b")
# Number words, so "three hundred" and "300" compare equal (v6). "one" alone is left out: it is a pronoun far more
# often than a count ("one of the first"); it still counts inside a compound ("one hundred").
_UNITS = {
    word: value
    for value, word in enumerate(
        (
            *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"),
            *("eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"),
        )
    )
}
_TENS = {
    word: 10 * value
    for value, word in enumerate(("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"), 2)
}
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_NUMBER_WORDS = frozenset((*_UNITS, *_TENS, *_SCALES))

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "of",
        "at",
        "by",
        "for",
        "with",
        "about",
        "against",
        "between",
        "into",
        "through",
        "during",
        "before",
        "after",
        "above",
        "below",
        "to",
        "from",
        "up",
        "down",
        "in",
        "out",
        "on",
        "off",
        "over",
        "under",
        "again",
        "further",
        "then",
        "once",
        "here",
        "there",
        "when",
        "where",
        "why",
        "how",
        "all",
        "any",
        "both",
        "each",
        "few",
        "more",
        "most",
        "other",
        "some",
        "such",
        "only",
        "own",
        "same",
        "so",
        "than",
        "too",
        "very",
        "can",
        "will",
        "just",
        "should",
        "now",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "have",
        "has",
        "had",
        "having",
        "do",
        "does",
        "did",
        "doing",
        "would",
        "could",
        "might",
        "must",
        "shall",
        "may",
        "i",
        "me",
        "my",
        "myself",
        "we",
        "our",
        "ours",
        "you",
        "your",
        "yours",
        "he",
        "him",
        "his",
        "she",
        "her",
        "hers",
        "it",
        "its",
        "they",
        "them",
        "their",
        "theirs",
        "what",
        "which",
        "who",
        "whom",
        "this",
        "that",
        "these",
        "those",
        "am",
        "as",
        "until",
        "while",
        "also",
        "s",
        "t",
        "don't",
        "it's",
        "i'm",
        "that's",
        "there's",
        "yes",
        "yeah",
        "oh",
        "well",
        "like",
        "really",
        "think",
        "know",
        "one",
        "get",
        "got",
    ]
)
NEGATIONS = frozenset({"not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "cannot", "without"})
_NEGATION_SUFFIX = "n't"
FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself", "i'm", "i've", "i'd", "i'll", "we", "us", "our"})
SECOND_PERSON = frozenset({"you", "your", "yours", "you're", "you've"})

# A refusal declines to answer: "I'm sorry", "I don't know", "I cannot answer", "the context does not say". Not
# any "I don't …": "I don't like PlayStation 2 but it is fun" is an opinion plus a claim (v2 waved 11 such BEGIN
# answers of the fitting split through as refusals; 10 were labelled unfaithful).
_REFUSAL = re.compile(
    r"^\s*(?:i'?m sorry|sorry|i (?:do not|don't|cannot|can't|am unable to|couldn't) (?:really )?"
    r"(?:know|find|answer|help|say|tell|provide|determine|access|have (?:any |enough |that )?information)|"
    r"unfortunately,? i|"
    r"(?:the )?(?:provided |given )?(?:context|passages?|documents?|sources?) (?:does|do) not (?:contain|mention|say)|"
    r"i have no information|there is no information|no information (?:is )?(?:available|provided))",
    re.IGNORECASE,
)
# Where an assertion can start after a refusal: "but", a clause break, or the next sentence.
_ASSERTION_FOLLOWS = re.compile(r"\bbut\b|;|[.!?]\s+(?=\S)", re.IGNORECASE)
# What an assistant says to the user rather than about the world: an offer, a closing, a pleasantry ("Would you like
# to know more?", "Let me know if you need anything else.", "Great question!"). Such a clause asserts nothing the
# passages could support, so it is not a claim: v7 judged it as one, and a faithful answer that ended with "Would you
# like to know more?" scored 0.002. Anchored at the clause's start and kept to these phrasings, so a question about
# the subject ("Do you like comedies?", which BEGIN labels unattributable) is still judged.
_OFFERING = (
    r"(?:(?:would|do|did) you (?:like|want|need) "
    r"(?:me to|to (?:know|hear|learn|see)|more|any(?:thing)? (?:more|else))|"
    r"(?:is there )?any(?:thing)? else (?:i can|you(?:'d| would)? (?:like|want|need))|"
    r"(?:any|do you have any) (?:other|more|further) questions|how (?:else )?can i help|can i help (?:you )?with|"
    r"shall i|should i (?:tell|explain|go on|continue)|(?:please )?let me know (?:if|whether|what|how)|"
    r"feel free to|(?:i )?hope (?:this|that) (?:helps|answers))\b"
)
_OFFER = re.compile(r"^\s*" + _OFFERING, re.IGNORECASE)
# A pleasantry is one only when it is the whole clause, or opens one before a comma or dash (`_OPENING_REMARK`):
# "Good question, the tower was built in 1889" holds the claim "the tower was built in 1889".
_PLEASANT = (
    r"(?:(?:i'?m )?(?:happy|glad) to (?:help|assist)|(?:that'?s a |what a )?(?:great|good|excellent) question|"
    r"thanks? (?:you )?for (?:asking|your question)|you'?re welcome)"
)
_PLEASANTRY = re.compile(r"^\s*" + _PLEASANT + r"[\s.!]*$", re.IGNORECASE)
# An affirmation agrees with what the user just said ("I agree.", "That's true!", "Exactly.", "You're right.") and
# states nothing of its own the passages could support: v9 makes it no claim. v8 judged it as an unsupported one, so
# "I agree. He's been the Patriots' most indispensable player …" scored 0.14 beside a passage stating it (a reply's
# lone "Yes" was already no claim, having no content word). Only when it is the whole clause, after any interjections:
# "I agree that the tower is 330 metres tall" is a claim. A reaction ("That's cool!", "Wow, amazing") stays a claim,
# an opinion the dev data's labels call unattributable.
_AFFIRMING = (
    r"(?:(?:yes|yeah|yea|yep|oh|well|haha|lol|ok|okay|so)[\s,!.]*)*"
    r"(?:i (?:totally |completely |definitely |do )?agree(?: with (?:you|that))?|"
    r"(?:that|it)(?:'s| is| was) (?:so |very |definitely |absolutely )?(?:true|right|correct)|(?:so |very )?true|"
    r"exactly|definitely|absolutely|for sure|you(?:'re| are) (?:so |absolutely )?right|right)"
    r"(?: too| as well)?"
)
_AFFIRMATION = re.compile(r"^\s*" + _AFFIRMING + r"[\s.!,]*$", re.IGNORECASE)
# A remark to the user that shares a sentence with a claim, set off by a comma or dash: an affirmation or pleasantry
# opening it ("I agree, the tower was completed in 1889", "Great question, the tower …"), or an offer closing it
# ("… 330 metres tall, hope that helps!", "…; let me know if you need more"). The rest is the claim, as it is when the
# remark is a sentence of its own. v9 dropped only the opening affirmation: "The Eiffel Tower is 330 metres tall,
# hope that helps!" scored 0.17 where the same answer ending "… tall. Hope that helps!" scored 0.93. A dash counts
# only with a space before it, so a hyphenated word ("well-known") is not split.
_SETS_OFF = r"\s*(?:[,;:–—]|\s-)+\s*"
_OPENING_REMARK = re.compile(r"^\s*(?:" + _AFFIRMING + "|" + _PLEASANT + ")" + _SETS_OFF + r"(?=\w)", re.IGNORECASE)
_CLOSING_OFFER = re.compile(_SETS_OFF + r"(?:and |so |but )?" + _OFFERING + r".*$", re.IGNORECASE | re.DOTALL)
_NONCOMMITTAL = re.compile(
    r"\b(?:i don'?t know|i do not know|i'?m not sure|i am not sure|not sure|cannot (?:answer|determine|say)|"
    r"can'?t (?:answer|determine|say)|unable to (?:answer|determine)|no (?:relevant )?information)\b",
    re.IGNORECASE,
)


def strip_citations(text: str) -> str:
    """The answer without citation markers: "Paris is the capital [1]." → "Paris is the capital."."""
    return _CITATION.sub("", text).strip()


def sentences(text: str, *, lowercase_starts: bool = False) -> list[str]:
    """The text's sentences: a break after ".", "!" or "?" before a capital, a digit or a quote (not after a known
    abbreviation), and at line breaks. With `lowercase_starts` also before a lower-case word — chat text is often
    all lower case ("yes. it was released in 2010") — unless the word before the stop is a single letter, holds a
    stop of its own ("u.s.", "a.m.") or is a lower-case abbreviation ("approx.", "etc.")."""
    protected = text
    for i, abbreviation in enumerate(_ABBREVIATIONS):
        protected = protected.replace(abbreviation, f"\x00{i}\x00")
    parts = _SENTENCE_END.split(protected)
    if lowercase_starts:
        parts = [piece for part in parts for piece in _split_lowercase_starts(part)]
    out = []
    for part in parts:
        for i, abbreviation in enumerate(_ABBREVIATIONS):
            part = part.replace(f"\x00{i}\x00", abbreviation)
        part = part.strip()
        if part:
            out.append(part)
    return out


# A passage sentence that opens with a pronoun ("It was completed in 1889") speaks of what the sentence before named
# ("The Eiffel Tower is … in Paris"), where an answer names it: "The Eiffel Tower was completed in 1889".
_LEADING_PRONOUN = re.compile(r"^(?:It|He|She|They|Its|His|Her|Their)\b")


def passage_sentences(passage: str) -> list[str]:
    """The passage's sentences (`sentences`), a leading pronoun replaced by the first names of the sentence before,
    so a claim that names its subject meets the sentence that says "it": after "The Eiffel Tower is … in Paris.",
    "It was completed in 1889" reads "The Eiffel Tower was completed in 1889". A cheap stand-in for resolving the
    reference: the first run of capitalised words is taken for the subject, which it often is in reference text."""
    out: list[str] = []
    for sentence in sentences(passage):
        pronoun = _LEADING_PRONOUN.match(sentence)
        names = _first_names(out[-1]) if pronoun and out else []
        out.append(" ".join(names) + sentence[pronoun.end() :] if pronoun and names else sentence)
    return out


def bare_words(sentence: str) -> list[str]:
    """The sentence's words as written, split on spaces, without the punctuation around them."""
    return [w.strip(".,;:!?\"'()[]“”") for w in sentence.split()]


def is_capitalised(word: str) -> bool:
    """The one reading of "a capitalised word" that both name readers share (`_first_names`, lexical._names)."""
    return word[:1].isupper()


def _first_names(sentence: str) -> list[str]:
    """The sentence's first run of capitalised words ("The Eiffel Tower", "Kurt Cobain"); its first word counts only
    when the next is capitalised too, since every sentence's first word is."""
    words = bare_words(sentence)
    run: list[str] = []
    for i, word in enumerate(words):
        capitalised = is_capitalised(word) and word != "I"
        if capitalised and (i > 0 or (len(words) > 1 and is_capitalised(words[1]))):
            run.append(word)
        elif run:
            break
    return run


def _split_lowercase_starts(part: str) -> list[str]:
    pieces, start = [], 0
    for match in _LOWERCASE_START.finditer(part):
        before = part[start : match.start()].split()
        word = before[-1].rstrip(".!?").lower() if before else ""
        if len(word) <= 1 or "." in word or word in _LOWERCASE_ABBREVIATIONS:
            continue
        pieces.append(part[start : match.start() + 1])
        start = match.end()
    pieces.append(part[start:])
    return pieces


def split_claims(answer: str) -> list[str]:
    """Atomic-ish claims: sentences, then clauses joined by ';' or ', and/but ...'. Citation markers go first.

    Fragments without a content word (a lone "Yes", "Sure!"), courtesies to the user ("Would you like to know
    more?", `is_courtesy`) and affirmations of what the user said ("I agree.", `is_affirmation`) assert nothing
    checkable and are dropped, as one is that opens or closes a sentence (`without_remark_clauses`).
    """
    claims = []
    for sentence in sentences(strip_citations(answer), lowercase_starts=True):
        for clause in _CLAUSE_SPLIT.split(without_remark_clauses(sentence)):
            clause = clause.strip(" ,;")
            if content_tokens(clause) and not is_remark_to_user(clause):
                claims.append(clause)
    return claims


def is_courtesy(clause: str) -> bool:
    """An offer, closing or pleasantry addressed to the user ("Would you like to know more?", "Hope this helps!")."""
    return bool(_OFFER.match(clause) or _PLEASANTRY.match(clause))


def is_affirmation(clause: str) -> bool:
    """Agreement with the user's last turn and nothing more ("I agree.", "Yes, that's true!", "Exactly.")."""
    return bool(_AFFIRMATION.match(clause))


def is_remark_to_user(clause: str) -> bool:
    """A courtesy or an affirmation: the clause speaks to the user, not about the world, so it is no claim."""
    return is_courtesy(clause) or is_affirmation(clause)


def without_remark_clauses(sentence: str) -> str:
    """The sentence without a remark to the user that opens it or closes it, set off by a comma or dash ("I agree, it
    was built in 1889" and "It was built in 1889, hope that helps!" → the claim alone); unchanged without one."""
    return _CLOSING_OFFER.sub("", _OPENING_REMARK.sub("", sentence, count=1), count=1)


def without_remarks_to_user(answer: str) -> str:
    """The answer without its sentences that are remarks to the user (`is_remark_to_user`) and the remarks that open or
    close its other sentences (`without_remark_clauses`), for the features read off the whole answer, so "… in 1889.
    Would you like to know more?" and "… in 1889, hope that helps!" read as "… in 1889."; unchanged when it has none,
    or is nothing else."""
    parts = sentences(answer, lowercase_starts=True)
    kept = [without_remark_clauses(part) for part in parts if not is_remark_to_user(part)]
    return " ".join(kept) if kept and kept != parts else answer


def plain_tokens(text: str) -> list[str]:
    """`tokens` without reading number words as digits: the overlap baseline's tokens, kept as they were so its
    figures stay comparable across judge versions."""
    return [t.removesuffix("'s") for t in _TOKEN.findall(text.lower().replace("’", "'"))]


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens; a possessive "'s" is dropped so "Presley's" and "Presley 's" both give "presley",
    and a number written in words is one token of digits ("three hundred and thirty" → "330", v6)."""
    words = plain_tokens(text)
    return _merge_number_words(words) if _NUMBER_WORDS.intersection(words) else words


def stem(word: str) -> str:
    """A stemming-lite: strip common English suffixes so "wins", "winning" and "won't-win" meet. Not Porter:
    it only has to make the same word in two inflections compare equal, and errors cost little here."""
    if len(word) <= 3 or word.isdigit():
        return word
    for suffix, keep in (
        ("'s", 0),
        ("ies", 3),
        ("ied", 3),
        ("ing", 4),
        ("edly", 4),
        ("ed", 4),
        ("ly", 4),
        ("es", 4),
        ("s", 3),
    ):
        if word.endswith(suffix) and len(word) - len(suffix) >= keep:
            word = word[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
            if suffix in ("ing", "ed") and len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouls":
                word = word[:-1]  # "winn" → "win", "stopp" → "stop"; keeps "fall", "pass"
            break
    return word


def content_tokens(text: str) -> list[str]:
    """Stemmed tokens that carry content (no stopwords, no negations — "not", "isn't", a tokenised text's "n't" —, no
    lone letters)."""
    return [stem(t) for t in tokens(text) if t not in STOPWORDS and not is_negation(t) and len(t) > 1]


def is_negation(token: str) -> bool:
    return token in NEGATIONS or token.endswith(_NEGATION_SUFFIX)


def numbers(text: str) -> set[str]:
    """The numbers a text states, as digit strings: "1,889" → "1889", "three hundred" → "300"."""
    worded: set[str] = set()
    words = plain_tokens(text)
    if _NUMBER_WORDS.intersection(words):
        _merge_number_words(words, worded)
    return {n.replace(",", "") for n in _NUMBER.findall(text)} | worded


def _merge_number_words(words: list[str], values: set[str] | None = None) -> list[str]:
    """The tokens with each run of number words ("twenty five", "three hundred and thirty") replaced by its value
    in digits, so a number reads the same written either way; "one" alone stays a word. The values replaced are
    added to `values`."""
    out: list[str] = []
    total, current, run = 0, 0, []
    for word in [*words, ""]:
        if word in _UNITS or word in _TENS:
            current += _UNITS.get(word, 0) + _TENS.get(word, 0)
            run.append(word)
            continue
        if word in _SCALES and run:
            total += max(current, 1) * _SCALES[word]
            current = 0
            run.append(word)
            continue
        if word == "and" and run:
            run.append(word)  # "three hundred and five"; put back below if no number word follows
            continue
        trailing_and = run[-1:] == ["and"]
        if trailing_and:
            run.pop()
        if run == ["one"]:
            out.append("one")
        elif run:
            out.append(str(total + current))
            if values is not None:
                values.add(out[-1])
        if trailing_and:
            out.append("and")
        total, current, run = 0, 0, []
        if word:
            out.append(word)
    return out


def has_negation(text: str) -> bool:
    return any(is_negation(t) for t in tokens(text))


def is_refusal(answer: str) -> bool:
    """An answer that declines to answer ("I'm sorry, the context does not say") asserts nothing. One that declines
    and then asserts ("I don't know, but he was born in Tupelo") is not a refusal: its assertions are judged."""
    answer = strip_citations(answer)
    declined = _REFUSAL.match(answer)
    if not declined:
        return False
    rest = answer[declined.end() :]
    follows = _ASSERTION_FOLLOWS.search(rest)
    return follows is None or not content_tokens(rest[follows.end() :])


def is_noncommittal(answer: str) -> bool:
    return bool(_NONCOMMITTAL.search(answer))
