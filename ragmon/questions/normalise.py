"""A question's normalised text: what two askings of the same question share once case, Unicode forms, punctuation,
spacing and the particulars (numbers, ids, e-mail addresses, links) are set aside.

It is the key of the exact-repeat cache and the text a group's id derives from (`groups.group_id`), so it must not
change for a given input across releases of ragmon without a reason: a change re-keys every group.
"""

from __future__ import annotations

import re
import unicodedata

# Longest normalised text kept: a pasted document is not a question, and its first part says what it is about.
MAX_CHARS = 400

_URL = re.compile(r"https?://\S+|www\.\S+")
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
# An id: hex of 8+ characters with at least one digit (trace ids, hashes, uuids), or a word mixing letters and
# digits (order numbers such as AB12345); masked so "order 12345" and "order 67890" are one question.
_HEX_ID = re.compile(r"\b(?=[0-9a-f-]*\d)[0-9a-f]{8,}(?:-[0-9a-f]{4,})*\b")
_MIXED_ID = re.compile(r"\b(?=\w*\d)(?=\w*[^\W\d_])\w{4,}\b")
_NUMBER = re.compile(r"\d+(?:[.,:/]\d+)*")
_NOT_WORD = re.compile(r"[^\w#]+")
_SPACES = re.compile(r"\s+")

MASK = "#"


def normalise(text: str) -> str:
    """NFKC, case-folded, particulars masked as `#`, punctuation as spaces, spaces collapsed, at most MAX_CHARS."""
    t = unicodedata.normalize("NFKC", text).casefold()
    t = _URL.sub(f" {MASK} ", t)
    t = _EMAIL.sub(f" {MASK} ", t)
    t = _HEX_ID.sub(f" {MASK} ", t)
    t = _MIXED_ID.sub(f" {MASK} ", t)
    t = _NUMBER.sub(f" {MASK} ", t)
    t = _NOT_WORD.sub(" ", t).replace("_", " ")
    return _SPACES.sub(" ", t).strip()[:MAX_CHARS].rstrip()
